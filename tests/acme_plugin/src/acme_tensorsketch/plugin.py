"""The plugin module named by the `tensorsketch` entry point."""

from __future__ import annotations

import argparse

from tensorsketch import hookimpl
from tensorsketch.cli import CliCommand


@hookimpl
def tensorsketch_providers() -> dict[str, str]:
    return {"acme": "acme_tensorsketch.provider:AcmeProvider"}


def _hello(args: argparse.Namespace) -> int:
    print(f"acme says hello to {args.name}")
    return 0


@hookimpl
def tensorsketch_cli_commands() -> list[CliCommand]:
    return [
        CliCommand(
            name="acme-hello",
            help="greet from the acme plugin",
            run=_hello,
            configure=lambda p: p.add_argument("name"),
        )
    ]
