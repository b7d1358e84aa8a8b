"""The canvas's TensorSketch plugin: contributes the ``tensorsketch holes`` command.

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


def _configure(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.canvas._cli import configure_holes

    configure_holes(parser)


def _run(args: argparse.Namespace) -> int:
    from tensorsketch.canvas._cli import run_holes

    return run_holes(args)


__all__ = ["tensorsketch_cli_commands"]


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch holes [paths]``: list every node that still needs code."""
    return [CliCommand(name="holes", help=HOLES_HELP, configure=_configure, run=_run)]
