"""Following an import to the graph another module defines, without importing it.

``Graph(S).add(research_app)`` where ``research_app`` comes from ``from myapp.research import
research_app`` (or ``import myapp.research as r`` and ``r.research_app``, or a relative
import) is a subgraph defined in ``myapp/research.py``. This module finds that file — under
the project root, its ``src/`` folder or the importing file's folder, as Python would for a
script — parses it, and names the graph in it. Nothing is imported or run. A module of the
project that cannot be found, read or parsed, or a name that is no graph the canvas can read,
gives a reason instead, so the node is drawn as an opaque subgraph box that says why; a name
imported from outside the project (a library) is not followed at all.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from tensorsketch.canvas._classes import NodeClass, find_node_classes
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._wiring import GraphModel, find_graphs
from tensorsketch.canvas.exceptions import CanvasError

__all__ = [
    "Module",
    "Origin",
    "Resolved",
    "assigned_call",
    "dotted",
    "import_refs",
    "module_of",
    "resolve",
]

#: How many re-exports (``from .research import research_app`` in an ``__init__.py``) are
#: followed before giving up: enough for any real package, and a guard against cycles.
MAX_HOPS = 8
#: Parsed modules kept (by path, with the bytes they were parsed from).
_CACHE_SIZE = 32


@dataclass(frozen=True)
class Origin:
    """Where a parsed source lives: its file and the project root imports resolve against."""

    path: Path
    root: Path

    @staticmethod
    def of(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Origin:
        file = Path(os.path.abspath(path))
        return Origin(file, Path(os.path.abspath(root)) if root is not None else file.parent)

    def relative(self, path: Path) -> str:
        """``path`` as the IR names it: relative to the project root, with ``/``."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return Path(os.path.relpath(path, self.root)).as_posix()


@dataclass
class Module:
    """Another module of the project, parsed: its graphs and node classes."""

    origin: Origin
    src: ParsedSource
    models: list[GraphModel]
    classes: dict[str, NodeClass]


@dataclass
class Resolved:
    """What an imported name turned out to be: a graph of another module (``module`` and
    ``model``), a call that builds one (``call``, read by the caller), or why neither
    could be read (``reason``)."""

    module: Module | None = None
    model: GraphModel | None = None
    call: cst.Call | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ImportRef:
    """A name bound by an import: ``module`` (dots included, ``level`` leading dots
    stripped) and, for ``from m import name``, the ``name``."""

    module: str
    level: int
    name: str | None


_parsed: OrderedDict[tuple[Path, Path], tuple[bytes, Module | str]] = OrderedDict()


def dotted(text: str) -> list[str] | None:
    """``"r.research_app"`` as ``["r", "research_app"]``; ``None`` unless a dotted name."""
    parts = text.strip().split(".")
    return parts if all(p.isidentifier() for p in parts) else None


def import_refs(module: cst.Module) -> dict[str, ImportRef]:
    """The names the module's top-level imports bind."""
    refs: dict[str, ImportRef] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                base = _code(small.module) if small.module is not None else ""
                for alias in small.names:
                    name = _code(alias.name)
                    refs[_bound(alias, name)] = ImportRef(base, len(small.relative), name)
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    full = _code(alias.name)
                    if alias.asname is not None:
                        refs[_bound(alias, full)] = ImportRef(full, 0, None)
                    else:
                        head = full.split(".")[0]
                        refs[head] = ImportRef(head, 0, None)
    return refs


def module_of(src: ParsedSource, parts: list[str]) -> str | None:
    """The full dotted path ``parts`` names through the file's imports
    (``decompose`` from ``from tensorsketch.agents import decompose`` →
    ``tensorsketch.agents.decompose``); ``None`` when the head is not imported."""
    ref = import_refs(src.module).get(parts[0])
    if ref is None or ref.level:
        return None
    head = ref.module if ref.name is None else f"{ref.module}.{ref.name}"
    return ".".join([head, *parts[1:]])


def resolve(
    src: ParsedSource,
    origin: Origin,
    text: str,
    hops: int = 0,
    memo: dict[object, object] | None = None,
) -> Resolved | None:
    """What the ``add(...)`` argument ``text`` names, when an import brings it from another
    module of the project; ``None`` when it does not (a local name, a library's, a class).
    ``memo`` keeps the files found and read for one extraction (a graph of many imported
    classes reads their module once)."""
    memo = {} if memo is None else memo
    parts = dotted(text)
    if parts is None:
        return None
    if src.imports is None:
        src.imports = import_refs(src.module)
    ref = src.imports.get(parts[0])
    if ref is None:
        return None
    if ref.name is None:
        module, rest = ref.module, parts[1:]
    else:
        module, rest = ref.module, [ref.name, *parts[1:]]
    file = _find(origin, module, ref.level, memo)
    # `from myapp import research` + `research.research_app`: walk into submodules
    while len(rest) > 1:
        deeper = f"{module}.{rest[0]}" if module else rest[0]
        sub = _find(origin, deeper, ref.level, memo)
        if sub is None:
            break
        module, rest, file = deeper, rest[1:], sub
    if file is None:
        if ref.level or _in_project(origin, module.split(".")[0]):
            where = "." * ref.level + module
            return Resolved(reason=f"cannot find module {where!r} under {origin.root}")
        return None
    if len(rest) != 1:
        return Resolved(reason=f"cannot read {text!r} in {origin.relative(file)}")
    return _definition(origin, file, rest[0], hops, memo)


def _definition(
    origin: Origin, file: Path, name: str, hops: int, memo: dict[object, object]
) -> Resolved | None:
    """What ``name`` is in ``file``: one of its graphs, a re-export, or a reason."""
    if ("load", file) not in memo:
        memo["load", file] = _load(Origin(file, origin.root))
    loaded = memo["load", file]
    assert isinstance(loaded, Module | str)
    if isinstance(loaded, str):
        return Resolved(reason=f"{origin.relative(file)}: {loaded}")
    for model in loaded.models:
        if name in model.names:
            return Resolved(module=loaded, model=model)
    if name in loaded.classes:
        return None  # a node class of that module: a plain node
    rel = origin.relative(file)  # for the reasons below
    if name in import_refs(loaded.src.module):
        if hops >= MAX_HOPS:
            return Resolved(reason=f"{rel}: {name!r} is re-exported more than {MAX_HOPS} times")
        return resolve(loaded.src, loaded.origin, name, hops + 1, memo)
    call = _assigned_call(loaded.src.module, name)
    if call is not None:
        return Resolved(module=loaded, call=call)
    if _assigned(loaded.src.module, name):
        return Resolved(
            reason=f"{rel}: {name!r} is not a `Graph(...)` the canvas can read (built by code)"
        )
    return Resolved(reason=f"{rel} defines no {name!r}")


def assigned_call(module: cst.Module, name: str) -> cst.Call | None:
    """The call a top-level ``name = f(...)`` assigns (the last one), if any."""
    return _assigned_call(module, name)


def _assigned_call(module: cst.Module, name: str) -> cst.Call | None:
    found: cst.Call | None = None
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            value = _assigned_value(small, name)
            if value is not None:
                found = value if isinstance(value, cst.Call) else None
    return found


def _assigned(module: cst.Module, name: str) -> bool:
    return any(
        _assigned_value(small, name) is not None
        for stmt in module.body
        if isinstance(stmt, cst.SimpleStatementLine)
        for small in stmt.body
    ) or any(
        isinstance(stmt, cst.FunctionDef | cst.ClassDef) and stmt.name.value == name
        for stmt in module.body
    )


def _assigned_value(small: cst.BaseSmallStatement, name: str) -> cst.BaseExpression | None:
    if isinstance(small, cst.Assign) and any(
        isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
    ):
        return small.value
    if (
        isinstance(small, cst.AnnAssign)
        and isinstance(small.target, cst.Name)
        and small.target.value == name
    ):
        return small.value
    return None


def _load(origin: Origin) -> Module | str:
    """The parsed module at ``origin.path``, or why it cannot be read. Parses are kept by
    path and reused while the file's bytes are the same (the Studio re-reads a graph on
    every request; a modification time is too coarse to tell two quick edits apart)."""
    try:
        data = origin.path.read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    key = (origin.path, origin.root)
    cached = _parsed.get(key)
    if cached is not None and cached[0] == data:
        _parsed.move_to_end(key)
        return cached[1]
    loaded: Module | str
    try:
        src = parse_source(data.decode("utf-8-sig"), filename=origin.path.name)
        src.origin = origin
        loaded = Module(origin, src, find_graphs(src), find_node_classes(src))
    except UnicodeDecodeError as exc:
        loaded = f"cannot be read ({exc})"
    except CanvasError as exc:
        loaded = f"does not parse: {exc}"
    _parsed[key] = (data, loaded)
    while len(_parsed) > _CACHE_SIZE:
        _parsed.popitem(last=False)
    return loaded


def _bases(origin: Origin, level: int) -> list[Path]:
    """The folders a module path is looked up in: for a relative import the importing
    file's package (``level`` dots up); else the project root, its ``src/``, and the
    importing file's folder (a script's own folder comes first on ``sys.path``)."""
    if level:
        folder = origin.path.parent
        for _ in range(level - 1):
            folder = folder.parent
        return [folder]
    return list(dict.fromkeys([origin.root, origin.root / "src", origin.path.parent]))


def _find(origin: Origin, module: str, level: int, memo: dict[object, object]) -> Path | None:
    key = ("find", origin.path.parent, module, level)
    if key not in memo:
        memo[key] = _find_file(origin, module, level)
    found = memo[key]
    return found if isinstance(found, Path) else None


def _find_file(origin: Origin, module: str, level: int) -> Path | None:
    parts = [p for p in module.split(".") if p]
    for base in _bases(origin, level):
        folder = base.joinpath(*parts) if parts else base
        for candidate in (folder.with_suffix(".py") if parts else None, folder / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


def _in_project(origin: Origin, top: str) -> bool:
    """Whether the top-level package ``top`` is one of the project's (not a library's)."""
    return any(
        (base / f"{top}.py").is_file() or (base / top).is_dir() for base in _bases(origin, 0)
    )


def _bound(alias: cst.ImportAlias, name: str) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return name


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
