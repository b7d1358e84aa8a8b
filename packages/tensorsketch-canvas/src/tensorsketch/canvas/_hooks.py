"""The canvas's TensorSketch plugin: contributes the ``tensorsketch holes`` command.

Registered through the ``tensorsketch`` entry-point group, exactly like a third-party plugin.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorsketch.canvas._cli import HOLES_HELP, configure_holes, run_holes
from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import hookimpl

__all__ = ["tensorsketch_cli_commands"]


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch holes [paths]``: list every node that still needs code."""
    return [CliCommand(name="holes", help=HOLES_HELP, configure=configure_holes, run=run_holes)]
