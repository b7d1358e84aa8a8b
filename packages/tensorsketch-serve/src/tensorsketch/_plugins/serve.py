"""The serve distribution's plugin: its protocols and the ``tensorsketch serve`` command.

Registered under the ``tensorsketch`` entry-point group, exactly like a third-party plugin.
Kept light: the targets are ``"module:attribute"`` strings and the CLI imports Starlette and
uvicorn only when the command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import hookimpl

__all__ = ["tensorsketch_cli_commands", "tensorsketch_serve_protocols"]

SERVE_HELP = "serve a graph over HTTP (OpenAI-compatible, A2A, AG-UI, ...) with uvicorn"


@hookimpl
def tensorsketch_serve_protocols() -> Mapping[str, str]:
    """The first-party protocols, one per line (each module defines a ``PROTOCOL``)."""
    return {
        "openai": "tensorsketch.serve._openai:PROTOCOL",
        "a2a": "tensorsketch.serve.a2a._app:PROTOCOL",
        "agui": "tensorsketch.serve._agui:PROTOCOL",
        "tasks": "tensorsketch.serve._tasks:PROTOCOL",
    }


def _configure(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.serve._cli import configure  # noqa: PLC0415 - a command's module loads when it runs

    configure(parser)


def _run(args: argparse.Namespace) -> int:
    from tensorsketch.serve._cli import run  # noqa: PLC0415 - a command's module loads when it runs

    return run(args)


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch serve module:attr --protocol openai|a2a|agui|tasks|all --backend DSN``."""
    return [CliCommand(name="serve", help=SERVE_HELP, configure=_configure, run=_run)]
