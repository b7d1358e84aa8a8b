"""The canvas's TensorSketch plugin: contributes ``tensorsketch holes`` and ``tensorsketch studio``.

Registered through the ``tensorsketch`` entry-point group, exactly like a third-party plugin.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import hookimpl

# Importing the CLI module loads libcst; defer it until the command actually runs, so loading
# plugins (e.g. to list provider names) stays light.
HOLES_HELP = "list the nodes that still need code (bodies that are `raise Hole(...)`)"
STUDIO_HELP = "open a graph file in TensorSketch Studio (the canvas in your browser)"


def _configure(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.canvas._cli import configure_holes  # noqa: PLC0415 - a command's module loads when it runs

    configure_holes(parser)


def _run(args: argparse.Namespace) -> int:
    from tensorsketch.canvas._cli import run_holes  # noqa: PLC0415 - a command's module loads when it runs

    return run_holes(args)


def _configure_studio(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.canvas._cli import configure_studio  # noqa: PLC0415 - a command's module loads when it runs

    configure_studio(parser)


def _run_studio(args: argparse.Namespace) -> int:
    from tensorsketch.canvas._cli import run_studio  # noqa: PLC0415 - a command's module loads when it runs

    return run_studio(args)


__all__ = ["tensorsketch_cli_commands"]


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch holes [paths]`` lists every node that still needs code;
    ``tensorsketch studio FILE`` opens the file in TensorSketch Studio."""
    return [
        CliCommand(name="holes", help=HOLES_HELP, configure=_configure, run=_run),
        CliCommand(name="studio", help=STUDIO_HELP, configure=_configure_studio, run=_run_studio),
    ]
