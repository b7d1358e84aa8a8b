"""The ``tensorsketch`` console command; its subcommands come from plugins.

Each distribution contributes :class:`CliCommand` objects through the
``tensorsketch_cli_commands`` hook — core adds ``plugins``; the canvas adds ``holes``; and so on.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tensorsketch._arguments import count, port, seconds
from tensorsketch.errors import PluginError
from tensorsketch.hookspecs import CliCommand
from tensorsketch.plugins import get_plugin_manager
from tensorsketch.pregel.compiled import CompiledGraph

__all__ = [
    "CliCommand",
    "build_parser",
    "count",
    "installed_versions",
    "load_graph",
    "load_target",
    "main",
    "port",
    "run_file_as",
    "seconds",
]


def load_target(target: str, *, unimportable: str = "check the name or cd.") -> Any:
    """What a command names as ``module:attr`` (``app:agent``) or ``path/to/file.py:attr``
    (``app.py:agent``), imported with the working directory importable (as uvicorn does);
    dots in ``attr`` walk attributes. A ``ValueError`` says what is wrong.

    A file is imported once per process, under its stem (``app``) when that name imports
    nothing else, with its folder on ``sys.path`` so it can import its neighbours.

    :param unimportable: how to fix a module (or file) that cannot be found, for the error
        message (a worker node says where the code must be, for instance).
    """
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        msg = (
            f"{target!r} is not MODULE:ATTR (or FILE.py:ATTR); name the module and the "
            "attribute, e.g. `app:agent` or `path/to/app.py:agent`."
        )
        raise ValueError(msg)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if where.endswith(".py"):
        module = _import_file(where, unimportable)
    elif "/" in where or "\\" in where:
        dotted = where.replace("\\", "/").strip("/").replace("/", ".")
        msg = (
            f"{where!r} is neither a module name nor a .py file; name the file with its "
            f"suffix (`{where}.py:{attr}`) or the module with dots (`{dotted}:{attr}`)."
        )
        raise ValueError(msg)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name not in (where, where.split(".")[0]):
                raise  # the module exists; something it imports does not
            msg = f"cannot import module {where!r} from {os.getcwd()}; {unimportable}"
            raise ValueError(msg) from None
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            kind = "file" if where.endswith(".py") else "module"
            msg = f"{kind} {where!r} has no attribute {attr!r}."
            raise ValueError(msg)
        found = getattr(found, part)
    return found


def _import_file(where: str, unimportable: str) -> Any:
    """The module of the Python file ``where`` (executed on first use)."""
    file = Path(where).resolve()
    if not file.is_file():
        msg = f"no Python file {where!r} (looked from {os.getcwd()}); {unimportable}"
        raise ValueError(msg)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.append(folder)  # after everything else: a neighbour never shadows a package
    name = file.stem
    try:
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
        mine = spec is None or _same_file(spec.origin, file)
    except (ImportError, ValueError):
        mine = False
    if not mine:  # the stem is another module's name (`json.py`): a private one instead
        name = f"_tensorsketch_file_{hashlib.sha1(str(file).encode()).hexdigest()[:12]}"
    loaded = sys.modules.get(name)
    if loaded is not None and _same_file(getattr(loaded, "__file__", None), file):
        return loaded
    return run_file_as(name, file)


def run_file_as(name: str, file: Path) -> ModuleType:
    """Execute the Python file ``file`` as the module ``name``: in ``sys.modules`` while it
    runs (so its own imports of ``name`` find it), taken out again if it fails."""
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has one
        msg = f"cannot import {str(file)!r}."
        raise ValueError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _same_file(origin: str | None, file: Path) -> bool:
    return origin is not None and Path(origin).resolve() == file


def load_graph(target: str, *, unimportable: str = "check the name or cd.") -> CompiledGraph[Any]:
    """The compiled graph a command names as ``module:attr`` (``app:agent``) or
    ``path/to/file.py:attr`` (:func:`load_target`); a ``ValueError`` says what is wrong.

    :param unimportable: how to fix a module that cannot be imported, for the error message
        (a worker node says where the code must be, for instance).
    """
    graph = load_target(target, unimportable=unimportable)
    if not isinstance(graph, CompiledGraph):
        msg = (
            f"{target} is a {type(graph).__name__}, not a compiled graph; point at the result "
            "of `create_agent(...)` or `Graph(...).compile()`."
        )
        raise ValueError(msg)
    return graph


def _commands() -> list[tuple[CliCommand, str]]:
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


def installed_versions() -> list[tuple[str, str]]:
    """Every installed ``tensorsketch*`` distribution and its version, by name."""
    from importlib import metadata  # noqa: PLC0415 - package metadata is read when asked for

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "tensorsketch" or name.startswith("tensorsketch-"):
            found.setdefault(name, dist.version)
    return sorted(found.items())


class _Version(argparse.Action):
    """``--version``: tensorsketch-core's version, then every other tensorsketch
    distribution's, read from the installed metadata when asked for (not at every start)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        versions = dict(installed_versions())
        core = versions.pop("tensorsketch-core", "not installed")
        lines = [f"tensorsketch-core {core}", *(f"{n} {v}" for n, v in versions.items())]
        print("\n".join(lines))
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every plugin's subcommands attached."""
    parser = argparse.ArgumentParser(
        prog="tensorsketch", description="TensorSketch command line (subcommands from plugins)."
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the version of tensorsketch-core and of every other tensorsketch "
        "distribution installed, and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command, plugin in _commands():
        child = sub.add_parser(command.name, help=f"{command.help} [{plugin}]")
        if command.configure is not None:
            command.configure(child)
        child.set_defaults(_run=command.run, _parser=child)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorsketch`` console script."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # The subcommand's parser reports it, with its own usage: `tensorsketch serve --bogus`
        # shows how `serve` is called, not the list of commands.
        owner: argparse.ArgumentParser = getattr(args, "_parser", parser)
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        code: int = run(args)
        sys.stdout.flush()  # here, where a reader that left can still be answered
    except BrokenPipeError:
        return _reader_left()
    return code


#: The status of a command whose reader left (``| head``), as a shell reports SIGPIPE.
READER_LEFT = 128 + 13


def _reader_left() -> int:
    """The output's reader closed the pipe (``tensorsketch trace report x | head``): stop
    quietly, as Unix tools do, instead of a traceback; stdout points at the null device so
    the interpreter's last flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return READER_LEFT


if __name__ == "__main__":  # pragma: no cover
    # `python -m tensorsketch.cli` runs this file as `__main__`; the plugins' commands are
    # `tensorsketch.cli.CliCommand`s, so run the imported module's `main`, not this copy's.
    from tensorsketch.cli import main as _main

    sys.exit(_main())
