"""The Ray distribution's plugin module (registered under the ``tensorsketch`` group).

It contributes the ``tensorsketch worker`` command and the ``ray`` executor. Nothing heavy is
imported here: the command's module, the executor's, and Ray load only when used.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import hookimpl

__all__ = ["tensorsketch_cli_commands", "tensorsketch_executors"]

WORKER_HELP = "run a pool of Ray worker actors for the run table (--ray ADDRESS --backend DSN)"


def _configure(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.ray._cli import configure  # noqa: PLC0415 - a command's module loads when it runs

    configure(parser)


def _run(args: argparse.Namespace) -> int:
    from tensorsketch.ray._cli import run  # noqa: PLC0415 - a command's module loads when it runs

    return run(args)


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch worker app:agent --ray HOST:PORT --backend postgresql://...``."""
    return [CliCommand(name="worker", help=WORKER_HELP, configure=_configure, run=_run)]


@hookimpl
def tensorsketch_executors() -> Mapping[str, str]:
    """``compile(executor="ray")``: a superstep's ``Send`` instances as Ray tasks."""
    return {"ray": "tensorsketch.ray.executor:RayExecutor"}
