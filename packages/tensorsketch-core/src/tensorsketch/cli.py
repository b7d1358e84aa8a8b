"""The ``tensorsketch`` console command; its subcommands come from plugins.

Each distribution contributes :class:`CliCommand` objects through the
``tensorsketch_cli_commands`` hook — core adds ``plugins``; the canvas adds ``holes``; and so on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorsketch.errors import PluginError

if TYPE_CHECKING:
    from tensorsketch.compiled import CompiledGraph

__all__ = ["CliCommand", "build_parser", "load_graph", "main"]


@dataclass(frozen=True, slots=True)
class CliCommand:
    """One subcommand: ``configure`` adds its arguments, ``run`` returns the exit code."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    configure: Callable[[argparse.ArgumentParser], None] | None = None


def load_graph(target: str, *, unimportable: str = "check the name or cd.") -> CompiledGraph[Any]:
    """The compiled graph a command names as ``module:attr`` (``app:agent``), imported with the
    working directory importable (as uvicorn does); a ``ValueError`` says what is wrong.

    :param unimportable: how to fix a module that cannot be imported, for the error message
        (a worker node says where the code must be, for instance).
    """
    from tensorsketch.compiled import CompiledGraph

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        msg = f"{target!r} is not MODULE:ATTR; name the module and the graph, e.g. `app:agent`."
        raise ValueError(msg)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name not in (module_name, module_name.split(".")[0]):
            raise  # the module exists; something it imports does not
        msg = f"cannot import module {module_name!r} from {os.getcwd()}; {unimportable}"
        raise ValueError(msg) from None
    graph: Any = module
    for part in attr.split("."):
        if not hasattr(graph, part):
            msg = f"module {module_name!r} has no attribute {attr!r}."
            raise ValueError(msg)
        graph = getattr(graph, part)
    if not isinstance(graph, CompiledGraph):
        msg = (
            f"{target} is a {type(graph).__name__}, not a compiled graph; point at the result "
            "of `create_agent(...)` or `Graph(...).compile()`."
        )
        raise ValueError(msg)
    return graph


def _commands() -> list[tuple[CliCommand, str]]:
    from tensorsketch.plugins import get_plugin_manager

    pm = get_plugin_manager()
    found: dict[str, tuple[CliCommand, str]] = {}
    for impl in pm.hook.tensorsketch_cli_commands.get_hookimpls():
        contributed: Sequence[object] = impl.function() or ()  # type: ignore[assignment]
        for command in contributed:
            if not isinstance(command, CliCommand):
                msg = (
                    f"plugin {impl.plugin_name!r} returned {type(command).__name__} from "
                    "`tensorsketch_cli_commands`; return `tensorsketch.cli.CliCommand` objects."
                )
                raise PluginError(msg)
            if command.name in found:
                other = found[command.name][1]
                msg = (
                    f"CLI command {command.name!r} is contributed by both plugins {other!r} and "
                    f"{impl.plugin_name!r}; rename one of them."
                )
                raise PluginError(msg)
            found[command.name] = (command, impl.plugin_name)
    return sorted(found.values(), key=lambda pair: pair[0].name)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every plugin's subcommands attached."""
    parser = argparse.ArgumentParser(
        prog="tensorsketch", description="TensorSketch command line (subcommands from plugins)."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, plugin in _commands():
        child = sub.add_parser(command.name, help=f"{command.help} [{plugin}]")
        if command.configure is not None:
            command.configure(child)
        child.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorsketch`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 2
    code: int = run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    # `python -m tensorsketch.cli` runs this file as `__main__`; the plugins' commands are
    # `tensorsketch.cli.CliCommand`s, so run the imported module's `main`, not this copy's.
    from tensorsketch.cli import main as _main

    sys.exit(_main())
