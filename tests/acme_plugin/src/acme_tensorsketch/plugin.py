"""The plugin module named by the `tensorsketch` entry point."""

from __future__ import annotations

import argparse

from tensorsketch import hookimpl
from tensorsketch.cli import CliCommand


@hookimpl
def tensorsketch_providers() -> dict[str, str]:
    return {"acme": "acme_tensorsketch.provider:AcmeProvider"}


@hookimpl
def tensorsketch_tracers() -> dict[str, str]:
    return {"acme": "acme_tensorsketch.extras:AcmeTracer"}


@hookimpl
def tensorsketch_channel_types() -> dict[str, str]:
    return {"acme-unique": "acme_tensorsketch.extras:Unique"}


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
