"""Where the debugger's data comes from: the backend named by ``--backend`` and the compiled
graph of the opened file.

The rest of the Studio reads the file statically and never runs it. The debugger's write
actions need the real graph (its nodes' code), so the opened file is imported in the server
process — lazily, on the first debugger request, and again whenever the file changes on disk.
A file that fails to import is reported (``graph_error``), never a crash: reading threads and
checkpoints goes on without it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import keyword
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tensorsketch.backend_urls import backend_label, open_backend
from tensorsketch.backend_urls import parse_backend_options as parse_options
from tensorsketch.canvas.studio._files import file_stamp
from tensorsketch.graph import Graph
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.pregel.subgraph import SubgraphNode

__all__ = ["GraphSource", "Loaded", "backend_label", "open_backend", "parse_options"]


@dataclass(frozen=True, slots=True)
class Loaded:
    """The opened file's compiled graph as last imported, or why there is none."""

    graph: CompiledGraph[Any] | None
    error: str | None
    stamp: tuple[int, int] | None
    #: the module variable that holds it (what ``--graph`` names)
    name: str | None = None


def _subgraphs(graph: CompiledGraph[Any]) -> list[CompiledGraph[Any]]:
    """Every graph ``graph`` runs as a subgraph node, at any depth."""
    found: list[CompiledGraph[Any]] = []
    todo = [graph]
    while todo:
        for spec in todo.pop().spec.nodes.values():
            if not isinstance(spec.node, SubgraphNode):
                continue
            child = spec.node.graph
            if all(child is not g for g in found):
                found.append(child)
                todo.append(child)
    return found


def _same_file(origin: str, path: Path) -> bool:
    try:
        return os.path.samefile(origin, path)
    except OSError:
        return False


def _error_text(exc: BaseException, path: Path) -> str:
    """The exception with the file's own line that raised it (the last frame in it)."""
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == str(path):
            where = f" (line {frame.lineno}: {(frame.line or '').strip()})"
            break
    return f"{type(exc).__name__}: {exc}{where}"


class GraphSource:
    """Imports the opened file and picks its compiled graph; thread-safe."""

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = Path(os.path.abspath(path))
        self.name = name
        self._lock = threading.Lock()
        self._loaded: Loaded | None = None
        self.module_name: str | None = None

    def get(self) -> Loaded:
        """The graph, re-importing the file if it changed since the last import."""
        with self._lock:
            stamp = file_stamp(self.path)
            if self._loaded is None or self._loaded.stamp != stamp:
                self._loaded = self._load(stamp)
            return self._loaded

    def _name(self) -> str:
        """The module name to import the file under: its own (``runs.py`` → ``runs``), as
        the process that wrote the checkpoints most likely imported it — so the types its
        values were tagged with (``runs.Order``) resolve to this very module — unless that
        name is taken by another module; then a private one."""
        stem = self.path.stem
        if stem.isidentifier() and not keyword.iskeyword(stem):
            loaded = sys.modules.get(stem)
            origin = getattr(loaded, "__file__", None) if loaded is not None else None
            if loaded is None:
                try:
                    spec = importlib.util.find_spec(stem)
                except (ImportError, ValueError):
                    spec = None
                origin = spec.origin if spec is not None else None
            if origin is not None and _same_file(origin, self.path):
                return stem
        digest = hashlib.blake2b(str(self.path).encode(), digest_size=6).hexdigest()
        return f"_tensorsketch_studio_{stem}_{digest}"

    def _load(self, stamp: tuple[int, int] | None) -> Loaded:
        folder = str(self.path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # the file imports its siblings as when run
        if self.module_name is None:
            self.module_name = self._name()
        try:
            module = self._import()
        except BaseException as exc:  # user code: anything, including SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            if self.module_name is not None:
                sys.modules.pop(self.module_name, None)
            return Loaded(None, _error_text(exc, self.path), stamp)
        try:
            name, graph = self._pick(module)
        except LookupError as exc:
            return Loaded(None, str(exc.args[0]), stamp, self.name)
        return Loaded(graph, None, stamp, name)

    def _import(self) -> ModuleType:
        assert self.module_name is not None
        spec = importlib.util.spec_from_file_location(self.module_name, self.path)
        if spec is None or spec.loader is None:
            msg = f"{self.path} cannot be imported as a Python module."
            raise ImportError(msg)
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module  # dataclasses and pickling look it up
        spec.loader.exec_module(module)
        return module

    def _pick(self, module: ModuleType) -> tuple[str, CompiledGraph[Any]]:
        found = vars(module)
        if self.name is not None:
            value = found.get(self.name)
            if isinstance(value, CompiledGraph):
                return self.name, value
            if isinstance(value, Graph):
                return self.name, value.compile()
            known = sorted(k for k, v in found.items() if isinstance(v, CompiledGraph | Graph))
            msg = (
                f"{self.path.name} has no compiled graph named {self.name!r} after import "
                f"(graphs found: {known or 'none'}); pass --graph with the variable that holds "
                "graph.compile()."
            )
            raise LookupError(msg)
        compiled = {k: v for k, v in found.items() if isinstance(v, CompiledGraph)}
        unique = {id(v): k for k, v in compiled.items()}
        if len(unique) == 1:
            return next(iter(compiled.items()))
        # graphs that others of the file run as subgraph nodes are parts, not the graph
        inner = {id(g) for g in compiled.values() for g in _subgraphs(g)}
        roots = {i: k for i, k in unique.items() if i not in inner}
        if len(roots) == 1:
            name = next(iter(roots.values()))
            return name, compiled[name]
        if not compiled:
            msg = (
                f"{self.path.name} defines no compiled graph at module level; assign "
                "graph.compile() to a name (e.g. app = Graph(State)...compile()) so the "
                "debugger can run it."
            )
        else:
            msg = (
                f"{self.path.name} defines several compiled graphs ({', '.join(sorted(compiled))});"
                " start the Studio with --graph NAME to pick one."
            )
        raise LookupError(msg)
