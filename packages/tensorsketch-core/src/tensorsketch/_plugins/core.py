"""Core's own plugin: what ``tensorsketch-core`` contributes through the public hooks."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import RESERVED, hookimpl
from tensorsketch.plugins import failed_plugins, plugin_infos
from tensorsketch.registry import backends, channel_types, executors, providers, tracers


@hookimpl
def tensorsketch_providers() -> Mapping[str, str]:
    return {"fake": "tensorsketch.fake:FakeProvider"}


@hookimpl
def tensorsketch_backends() -> Mapping[str, str]:
    return {
        "memory": "tensorsketch.runtime.backends.memory:InMemoryBackend",
        "sqlite": "tensorsketch.runtime.backends.sqlite:SqliteBackend",
    }


@hookimpl
def tensorsketch_memory_stores() -> Mapping[str, str]:
    return {
        "memory": "tensorsketch.memory.inmemory:InMemoryStore",
        "sqlite": "tensorsketch.memory.sqlite:SqliteStore",
    }


@hookimpl
def tensorsketch_session_stores() -> Mapping[str, str]:
    return {
        "memory": "tensorsketch.memory.sessions:InMemorySessionStore",
        "sqlite": "tensorsketch.memory.sqlite_sessions:SqliteSessionStore",
    }


@hookimpl
def tensorsketch_executors() -> Mapping[str, str]:
    return {"inprocess": "tensorsketch.executors:InProcessExecutor"}


@hookimpl
def tensorsketch_tracers() -> Mapping[str, str]:
    return {
        "memory": "tensorsketch.observability.memory:InMemoryTracer",
        "file": "tensorsketch.observability.export:FileTracer",
    }


@hookimpl
def tensorsketch_channel_types() -> Mapping[str, str]:
    return {"reducer": "tensorsketch.channels:Reducer", "topic": "tensorsketch.channels:Topic"}


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _run_plugins(args: argparse.Namespace) -> int:
    infos = plugin_infos()
    failed = failed_plugins()
    if args.json:
        print(
            json.dumps(
                {
                    "plugins": [
                        {
                            "name": i.name,
                            "distribution": i.distribution,
                            "version": i.version,
                            "hooks": list(i.hooks),
                        }
                        for i in infos
                    ],
                    "failed": dict(failed),
                    "providers": providers.names(),
                    "backends": backends.names(),
                    "tracers": tracers.names(),
                    "executors": executors.names(),
                    "channel_types": channel_types.names(),
                    "reserved_hooks": dict(RESERVED),
                },
                indent=2,
            )
        )
        return 0
    print("Installed TensorSketch plugins:")
    for info in infos:
        dist = f"{info.distribution} {info.version}" if info.distribution else "(not installed)"
        print(f"  {info.name:<12} {dist}")
        for hook in info.hooks:
            reserved = RESERVED.get(hook)
            print(
                f"      - {hook}"
                + (f"  (reserved: no effect until {reserved})" if reserved else "")
            )
    for name, reason in failed.items():
        print(f"  {name:<12} FAILED to load: {reason}")
    print(f"Providers: {', '.join(providers.names())}")
    print(f"Backends:  {', '.join(backends.names())}")
    print(f"Tracers:   {', '.join(tracers.names())}")
    print(f"Executors: {', '.join(executors.names())}")
    print(f"Channel types: {', '.join(channel_types.names())}")
    return 0


def _configure_trace(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.observability.report import configure_cli  # noqa: PLC0415 - a command's module loads when it runs

    configure_cli(parser)


def _run_trace(args: argparse.Namespace) -> int:
    from tensorsketch.observability.report import run_cli  # noqa: PLC0415 - a command's module loads when it runs

    return run_cli(args)


def _configure_doctor(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.doctor import configure_cli  # noqa: PLC0415 - a command's module loads when it runs

    configure_cli(parser)


def _run_doctor(args: argparse.Namespace) -> int:
    from tensorsketch.doctor import run_cli  # noqa: PLC0415 - a command's module loads when it runs

    return run_cli(args)


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    return [
        CliCommand(
            name="plugins",
            help="list installed distributions, versions and their hook implementations",
            run=_run_plugins,
            configure=_configure_plugins,
        ),
        CliCommand(
            name="trace",
            help="read trace files: report (time, tokens, cost), diff two runs, show the tree",
            run=_run_trace,
            configure=_configure_trace,
        ),
        CliCommand(
            name="doctor",
            help="what is installed and from where, the services and browser it can reach, "
            "and what is wrong",
            run=_run_doctor,
            configure=_configure_doctor,
        ),
    ]
