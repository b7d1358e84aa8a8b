"""The Ray distribution's plugin module (registered under the ``tensorsketch`` group).

Nothing heavy is imported here: Ray loads only when a command that needs it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import hookimpl

__all__ = ["tensorsketch_cli_commands", "tensorsketch_executors"]


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """No command yet; ``tensorsketch worker`` arrives with the worker pool."""
    return []


@hookimpl
def tensorsketch_executors() -> Mapping[str, str]:
    """``compile(executor="ray")``: a superstep's ``Send`` instances as Ray tasks."""
    return {"ray": "tensorsketch.ray.executor:RayExecutor"}
