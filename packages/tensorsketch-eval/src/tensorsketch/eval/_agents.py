"""Finding the agent under test: an object with ``invoke``, a factory ``agent(env)``, or a
``"module:attr"`` / ``"path/to/file.py:attr"`` spec (what the CLI and child processes use)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from tensorsketch.cli import run_file_as
from tensorsketch.eval.exceptions import SandboxError

__all__ = ["build_agent", "load_attr", "load_module"]


def load_module(path: str | Path) -> Any:
    """Import a Python file by path (each file once per process)."""
    file = Path(path).resolve()
    if not file.is_file():
        msg = f"no Python file at {str(file)!r}."
        raise SandboxError(msg)
    name = f"tensorsketch_eval_file_{hashlib.sha1(str(file).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return run_file_as(name, file)


def load_attr(spec: str) -> Any:
    """Resolve ``"package.module:attr"`` or ``"file.py:attr"`` (dots in attr walk attributes)."""
    if ":" not in spec:
        msg = f"agent spec {spec!r} needs the form 'module:attribute' or 'file.py:attribute'."
        raise SandboxError(msg)
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py"):
        module = load_module(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            msg = f"cannot import {where!r} for agent spec {spec!r}: {exc}"
            raise SandboxError(msg) from exc
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            msg = f"{where!r} has no attribute {attr!r} (agent spec {spec!r})."
            raise SandboxError(msg) from None
    return found


def build_agent(agent: Any, env: Any) -> Any:
    """The runnable for one trial: ``agent`` itself, or ``agent(env)`` for a factory."""
    if isinstance(agent, str):
        agent = load_attr(agent)
    if callable(getattr(agent, "invoke", None)):
        return agent
    if callable(agent):
        try:
            takes = len(inspect.signature(agent).parameters)
        except (TypeError, ValueError):
            takes = 1
        built = agent(env) if takes else agent()
        if callable(getattr(built, "invoke", None)):
            return built
        msg = (
            f"the agent factory {agent!r} returned {built!r}, which has no `invoke`; "
            "return a compiled graph."
        )
        raise SandboxError(msg)
    msg = (
        f"cannot evaluate {agent!r}: pass a compiled graph (something with `invoke`), a factory "
        "`agent(env) -> graph`, or a 'module:attr' spec."
    )
    raise SandboxError(msg)
