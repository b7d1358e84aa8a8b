"""Graders by name: the ``tensorsketch_graders`` hook, consumed.

A third-party distribution contributes ``{"polite": "acme_evals:Polite"}`` through the hook;
a suite file then writes ``create_grader("polite")`` or simply ``graders=["polite"]``.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.eval._graders import Grader
from tensorsketch.registry import Registry

__all__ = ["create_grader", "graders", "register_grader", "resolve_graders"]

#: Names from ``register_grader``, the ``tensorsketch_graders`` hook and the
#: ``tensorsketch.graders`` entry-point group.
graders: Registry[Grader] = Registry("grader", "tensorsketch_graders", "tensorsketch.graders")


def create_grader(name: str, /, *args: Any, **kwargs: Any) -> Grader:
    """Build a grader by name: ``create_grader("polite", threshold=0.8)``."""
    built = graders.create(name, *args, **kwargs)
    if not callable(getattr(built, "grade", None)):
        msg = (
            f"grader {name!r} ({graders.origin(name)}) built {built!r}, which has no "
            "`grade(trial)` method."
        )
        raise TypeError(msg)
    if not getattr(built, "name", None):
        built.name = name
    return built


def register_grader(name: str, grader: Any) -> None:
    """Register a grader class (or factory) under ``name``."""
    graders.register(name, grader)


def resolve_graders(items: Any) -> list[Grader]:
    """A case's graders with names replaced by registered graders."""
    return [create_grader(item) if isinstance(item, str) else item for item in items]
