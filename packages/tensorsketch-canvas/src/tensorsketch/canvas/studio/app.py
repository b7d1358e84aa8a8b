"""The Studio's state and the work behind each route, as plain synchronous methods.

The only state is the trace tail and the last good graph (for display while the file does not
parse): every load re-reads the file, every edit re-writes it. File work is serialised by one
lock and runs on a worker thread, so the event loop keeps streaming while a large file is
re-extracted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import subprocess
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch.canvas import handoffs
from tensorsketch.canvas._classes import NodeClass, find_node_classes
from tensorsketch.canvas._extract import build_ir, select
from tensorsketch.canvas._modules import Origin
from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas._reconstruct import WriteBack, write_back
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._wiring import GraphModel, find_graphs
from tensorsketch.canvas.drafts import draft_path, read_drafts
from tensorsketch.canvas.exceptions import (
    CanvasError,
    GraphNotFoundError,
    IRError,
    SourceParseError,
    WriteBackError,
)
from tensorsketch.canvas.ir import GraphIR
from tensorsketch.canvas.layout import Position, layout_path, read_layout, write_layout
from tensorsketch.canvas.studio import _restore, _stub_rename, editor, ops
from tensorsketch.canvas.studio._files import (
    SourceFile,
    atomic_write_bytes,
    read_source,
    sha256_hex,
)
from tensorsketch.canvas.studio.trace import TraceTail

__all__ = ["ApiError", "Studio", "project_root"]

_log = logging.getLogger("tensorsketch.canvas.studio")

#: The IR's style names → the API's (``>>`` wiring is "rshift" on the wire).
_STYLE = {"fluent": "fluent", "statement": "statement", "operator": "rshift"}
#: Skipped while looking for holes.
_SKIP_DIRS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "build", "dist", "venv", ".venv"}
)
#: The most files the holes badge reads in a project.
MAX_PROJECT_FILES = 20000
#: The largest layout coordinate accepted (a canvas is a few thousand units across).
MAX_COORDINATE = 1e6
#: Parses kept (by file version and graph).
_PARSE_CACHE = 8


class ApiError(Exception):
    """An error answer: HTTP ``status`` with ``{"error": message, **extra}``."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": self.message, **self.extra}


def project_root(path: Path) -> Path:
    """The file's git repository root, else its folder."""
    folder = path.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return folder
    if out.returncode == 0 and out.stdout.strip():
        return Path(out.stdout.strip())
    return folder


@dataclass
class _Parsed:
    ir: GraphIR
    graphs: list[str]
    src: ParsedSource
    models: list[GraphModel]
    classes: dict[str, NodeClass]


@dataclass
class Studio:
    """One launch: the opened file, its default graph, the project for holes, the token."""

    path: Path
    token: str
    graph: str | None = None
    project: Path | None = None
    trace: TraceTail = field(default_factory=TraceTail)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _last_good: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    _holes_cache: dict[Path, tuple[tuple[int, ...], list[dict[str, Any]]]] = field(
        default_factory=dict
    )
    #: parses by (file version, graph asked for): the file is re-read on every request, but
    #: bytes already parsed are not parsed again (edits are pure, so sharing an IR is safe)
    _parsed: OrderedDict[tuple[str, str | None], _Parsed] = field(default_factory=OrderedDict)
    #: signs the ``restore`` inverses this launch hands out (never leaves the process)
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    #: the opened file's Studio and one per other module opened through a subgraph node,
    #: by path (shared by all of them: one launch, one token, one lock)
    _family: dict[Path, Studio] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(os.path.abspath(self.path))
        if self.project is None:
            self.project = project_root(self.path)
        self.project = Path(os.path.abspath(self.project))
        self._family.setdefault(self.path, self)

    def for_file(self, file: Any) -> Studio:
        """The Studio of ``file``: a module of the project that defines a subgraph the
        opened graph runs (``NodeIR.subgraph_file``, relative to the project root), so its
        graph is shown and edited there; ``None`` is the opened file itself."""
        if file is None or file == "":
            return self
        assert self.project is not None
        if not isinstance(file, str) or not file.endswith(".py") or os.path.isabs(file):
            msg = (
                "'file' must be a Python file's path relative to the project root, as a "
                f"subgraph node's `subgraph_file` gives it (got {file!r})."
            )
            raise ApiError(400, msg)
        path = Path(os.path.abspath(self.project / file))
        if not path.is_relative_to(self.project):
            raise ApiError(400, f"'file' {file!r} is outside the project ({self.project}).")
        if not path.is_file():
            raise ApiError(404, f"no file {file!r} in the project ({self.project}).")
        with self.lock:
            studio = self._family.get(path)
            if studio is None:
                studio = Studio(
                    path,
                    self.token,
                    project=self.project,
                    trace=self.trace,
                    lock=self.lock,
                    _key=self._key,
                    _family=self._family,
                )
            return studio

    def _forget_parses(self) -> None:
        """After a write: a graph of another file may nest the one just edited."""
        for studio in self._family.values():
            if studio is not self:
                studio._parsed.clear()

    # -- reading -------------------------------------------------------------------------------

    def _read(self) -> SourceFile:
        try:
            return read_source(self.path)
        except FileNotFoundError:
            msg = f"{self.path} no longer exists; restore it or relaunch the Studio."
            raise ApiError(404, msg) from None
        except (OSError, UnicodeDecodeError, SyntaxError) as exc:
            msg = f"cannot read {self.path}: {exc}"
            raise ApiError(422, msg) from None

    def _parse(self, source: SourceFile, graph: str | None) -> _Parsed:
        key = (source.version, graph)
        parsed = self._parsed.get(key)
        if parsed is not None:
            self._parsed.move_to_end(key)
            return parsed
        src = parse_source(source.text, filename=self.path.name)
        src.origin = self.origin
        models = find_graphs(src)
        classes = find_node_classes(src)
        ir = build_ir(src, select(models, graph), classes, models)
        names = [m.name for m in models]
        return self._keep(key, _Parsed(ir, names, src, models, classes))

    def _keep(self, key: tuple[str, str | None], parsed: _Parsed) -> _Parsed:
        self._parsed[key] = parsed
        self._parsed.move_to_end(key)
        while len(self._parsed) > _PARSE_CACHE:
            self._parsed.popitem(last=False)
        return parsed

    @property
    def origin(self) -> Origin:
        """Where the file is, so subgraphs imported from other modules are read."""
        assert self.project is not None
        return Origin(self.path, self.project)

    def layout_for(self, nodes: list[str] | None) -> dict[str, dict[str, float]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            positions = read_layout(self.path, nodes)
        return {name: {"x": p.x, "y": p.y} for name, p in positions.items()}

    def graph_view(self, graph: str | None = None) -> dict[str, Any]:
        """``GET /api/graph``."""
        if graph is not None and not graph:
            graph = None
        with self.lock:
            source = self._read()
            chosen = graph if graph is not None else self.graph
            base: dict[str, Any] = {
                "file": str(self.path),
                "version": source.version,
                "holes": self.holes(),
                "parse_error": None,
                "stale": False,
                "team": _team(source.text),
            }
            try:
                parsed = self._parse(source, chosen)
            except SourceParseError as exc:
                kept = self._last_good.get(chosen)
                return {
                    **base,
                    "graph": kept["graph"] if kept else None,
                    "graphs": kept["graphs"] if kept else [],
                    "selected": kept["selected"] if kept else chosen,
                    "layout": self.layout_for(kept["nodes"] if kept else None),
                    "parse_error": _parse_error(source.text, str(exc)),
                    "stale": kept is not None,
                    "style": kept["style"] if kept else None,
                }
            except GraphNotFoundError as exc:
                if graph is not None:
                    raise ApiError(404, str(exc)) from None
                return {
                    **base,
                    "graph": None,
                    "graphs": [],
                    "selected": None,
                    "layout": {},
                    "style": None,
                    "message": str(exc),
                }
            ir = parsed.ir
            nodes = [n.name for n in ir.nodes]
            view = {
                **base,
                "graph": ir.to_dict(),
                "graphs": parsed.graphs,
                "selected": ir.name,
                "layout": self.layout_for(nodes),
                "style": _STYLE.get(ir.style, ir.style),
                "functions": ops.module_functions(source.text),
                "classes": ops.node_classes(source.text),
            }
            kept = {
                "graph": view["graph"],
                "graphs": parsed.graphs,
                "selected": ir.name,
                "nodes": nodes,
                "style": view["style"],
            }
            self._last_good[chosen] = kept
            self._last_good[ir.name] = kept
            return view

    def handoff(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/handoff``: add or remove the handoff ``source`` -> ``target`` (agent
        names) in the giver's ``handoffs=[...]``; answers the file's new version and team."""
        version, op, giver, receiver = _handoff_request(body)
        with self.lock:
            source = self._read()
            if source.version != version:
                raise ApiError(
                    409,
                    "the file changed since the page loaded it; nothing was written — reload "
                    "to see the current agents and redo the edit.",
                    version=source.version,
                )
            change = handoffs.add_handoff if op == "add" else handoffs.remove_handoff
            try:
                text = change(source.text, giver, receiver)
            except SourceParseError as exc:
                raise ApiError(422, str(exc)) from None
            except (IRError, WriteBackError) as exc:
                raise ApiError(422, str(exc)) from None
            new_source = self._write(source, text)
            return {"version": new_source.version, "team": _team(new_source.text)}

    def open_node(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/open``: open node ``body["node"]``'s class in ``$VISUAL``/``$EDITOR``."""
        name = body.get("node")
        graph = body.get("graph")
        if not isinstance(name, str) or (graph is not None and not isinstance(graph, str)):
            raise ApiError(400, "open needs `node` (a node's name) and optionally `graph`.")
        ir = self.current_ir(graph)
        node = next((n for n in ir.nodes if n.name == name), None)
        if node is None:
            known = ", ".join(n.name for n in ir.nodes) or "none"
            raise ApiError(404, f"graph {ir.name!r} has no node {name!r} (its nodes: {known}).")
        line = node.line or 1
        try:
            command = editor.open_in_editor(self.path, line)
        except LookupError as exc:
            raise ApiError(409, str(exc)) from None
        except OSError as exc:
            raise ApiError(409, f"the editor could not be started: {exc}") from None
        return {"opened": True, "file": str(self.path), "line": line, "command": command}

    def current_ir(self, graph: str | None = None) -> GraphIR:
        """The selected graph, for exports; 422 while the file does not parse."""
        with self.lock:
            source = self._read()
            try:
                return self._parse(source, graph if graph else self.graph).ir
            except SourceParseError as exc:
                raise ApiError(422, str(exc)) from None
            except GraphNotFoundError as exc:
                raise ApiError(404, str(exc)) from None

    # -- holes ---------------------------------------------------------------------------------

    def _project_files(self) -> list[Path]:
        assert self.project is not None
        files: list[Path] = []
        if self.project.is_file():
            return [self.project]
        for root, dirs, names in os.walk(self.project):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
            for name in sorted(names):
                if name.endswith(".py"):
                    files.append(Path(root) / name)
                    if len(files) >= MAX_PROJECT_FILES:
                        return files
        return files

    def holes(self) -> list[dict[str, Any]]:
        """Every hole in the project (and the opened file), re-reading only changed files."""
        files = self._project_files()
        if self.path not in files:
            files.append(self.path)
        out: list[dict[str, Any]] = []
        seen: set[Path] = set()
        for file in files:
            seen.add(file)
            try:
                st = os.stat(file)
            except OSError:
                continue
            try:  # a fill's drafts sidecar changes a hole's status, not the file
                side = os.stat(draft_path(file))
                drafted = (side.st_mtime_ns, side.st_size)
            except OSError:
                drafted = (0, 0)
            key = (st.st_mtime_ns, st.st_size, *drafted)
            cached = self._holes_cache.get(file)
            if cached is None or cached[0] != key:
                cached = (key, _holes_in(file))
                self._holes_cache[file] = cached
            out.extend(cached[1])
        for stale in set(self._holes_cache) - seen:
            del self._holes_cache[stale]
        return out

    # -- writing -------------------------------------------------------------------------------

    def edit(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/edit``: check, apply, reconstruct, write atomically, re-extract.

        ``exact`` (optional): the ``exact`` of an earlier answer, sent back to undo (or redo)
        it. While the file is still exactly the text that edit wrote, the file gets back
        exactly the text it had before — byte for byte, stubs, imports and statement layout
        included; otherwise ``op`` is applied to the graph as it is now. ``layout``
        (optional): positions to save with the edit (a node the edit creates is placed where
        it was dropped)."""
        version, op, args, graph = _edit_request(body)
        exact = self._exact_request(body.get("exact"))
        positions = _positions(body["layout"]) if body.get("layout") is not None else {}
        with self.lock:
            source = self._read()
            if source.version != version:
                raise ApiError(
                    409,
                    "the file changed since the page loaded it; nothing was written — reload "
                    "to see the current graph and redo the edit.",
                    version=source.version,
                )
            try:
                parsed = self._parse(source, graph or self.graph)
            except SourceParseError as exc:
                raise ApiError(422, str(exc)) from None
            except GraphNotFoundError as exc:
                raise ApiError(404, str(exc)) from None
            back = _restore.patched(source.text, exact) if exact is not None else None
            inverse: dict[str, Any] | None
            renamed: tuple[str, str] | None
            if back is not None:
                assert exact is not None
                written_text, inverse, renamed = back, None, _pair(exact.get("renamed"))
                new_source = self._write(source, back)
            else:
                written_text, inverse, renamed, new_source = self._apply(parsed, source, op, args)
            if renamed is not None and new_source.data != source.data:
                self._move_layout(*renamed)
            try:
                new_ir = self._parse(new_source, graph or self.graph).ir
            except CanvasError as exc:  # an exact undo gives back text that parsed before
                raise ApiError(422, str(exc)) from None
            if positions:
                known = self._node_names(new_source)
                self._save_positions({n: p for n, p in positions.items() if n in known})
            nodes = [n.name for n in new_ir.nodes]
            if inverse is not None and inverse["op"] == "restore":
                text = _restore.text_hunks(written_text, source.text)
                inverse = {"op": "restore", "args": self._sealed({**inverse["args"], "text": text})}
            return {
                "graph": new_ir.to_dict(),
                "version": new_source.version,
                "inverse": inverse,
                "exact": self._exact_answer(written_text, source.text, renamed),
                "selected": new_ir.name,
                "layout": self.layout_for(nodes),
                "style": _STYLE.get(new_ir.style, new_ir.style),
            }

    def _apply(
        self, parsed: _Parsed, source: SourceFile, op: str, args: dict[str, Any]
    ) -> tuple[str, dict[str, Any] | None, tuple[str, str] | None, SourceFile]:
        """Apply ``op`` to the graph and write it back: the text written, the inverse, the
        rename it made, and the file as read back."""
        if op == "restore":
            args = self._unsealed(args)
        try:
            result = ops.apply_op(parsed.ir, op, args, source.text)
        except ops.BadEdit as exc:
            raise ApiError(400, str(exc)) from None
        except (ops.EditRejected, IRError) as exc:
            raise ApiError(422, str(exc)) from None
        origin = self.origin
        written = _exact(result, origin) if result.text is not None else None
        if written is None:
            written = _written(parsed, result.ir, op, args)
        if result.stub is not None:
            written = _stub_renamed(written, result.ir, *result.stub, origin) or written
        new_source = self._write(source, written.text)
        if new_source.text == written.text:
            # The write-back's verification parsed exactly this text: keep that parse.
            graphs = [m.name for m in written.graphs]
            kept = _Parsed(written.ir, graphs, written.parsed, written.graphs, written.classes)
            self._keep((new_source.version, written.ir.name), kept)
        return written.text, result.inverse, result.renamed, new_source

    def _write(self, source: SourceFile, text: str) -> SourceFile:
        """Write ``text`` over ``source`` (when it changes anything) and read the file back;
        a 409 when someone else wrote the file meanwhile."""
        data = _encoded(source, text)
        if data != source.data:
            try:
                current = self.path.read_bytes()
            except OSError:
                current = b""
            if current != source.data:
                raise ApiError(
                    409,
                    "the file changed while the edit was being made; nothing was written.",
                    version=_sha(current),
                )
            atomic_write_bytes(self.path, data)
            self._forget_parses()
        return read_source(self.path)

    def _exact_answer(
        self, written: str, before: str, renamed: tuple[str, str] | None
    ) -> dict[str, Any] | None:
        """The ``exact`` of an answer: ``written`` → ``before`` as hunks, signed (it carries
        source text), with the rename to move the layout entry back."""
        if written == before:
            return None
        payload: dict[str, Any] = _restore.text_hunks(written, before)
        payload["renamed"] = [renamed[1], renamed[0]] if renamed is not None else None
        return self._sealed(payload)

    def _exact_request(self, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        body = {k: v for k, v in value.items() if k != "seal"} if isinstance(value, dict) else {}
        seal = value.get("seal") if isinstance(value, dict) else None
        if not isinstance(seal, str) or not hmac.compare_digest(seal, _seal(self._key, body)):
            raise ApiError(
                400,
                "'exact' takes only the 'exact' of an answer this Studio gave (unchanged): it "
                "carries source text; drop it to apply the op to the graph as it is.",
            )
        return body

    def _sealed(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` signed with this launch's key: a ``restore`` carries source text, so the
        Studio only accepts the ones it issued."""
        return {**args, "seal": _seal(self._key, args)}

    def _unsealed(self, args: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in args.items() if k != "seal"}
        seal = args.get("seal")
        if not isinstance(seal, str) or not hmac.compare_digest(seal, _seal(self._key, body)):
            raise ApiError(
                400,
                "restore is the undo of a deletion and takes only the arguments this Studio "
                "returned as that deletion's inverse (unchanged); re-delete and undo again.",
            )
        return body

    def _move_layout(self, old: str, new: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            positions = read_layout(self.path)
        if old in positions and new not in positions:
            positions[new] = positions.pop(old)
            self._write_layout(positions)

    def _write_layout(self, positions: dict[str, Position]) -> None:
        sidecar = layout_path(self.path)
        try:
            mode = os.stat(sidecar).st_mode & 0o7777
        except OSError:
            try:
                mode = os.stat(self.path).st_mode & 0o666
            except OSError:
                mode = 0o644
        write_layout(self.path, positions)
        os.chmod(sidecar, mode)

    def set_layout(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/layout``: merge positions into the sidecar (atomically); a ``null``
        position unpins the node (the automatic layout places it again).

        Only the nodes of the file's graphs are kept (others are counted in ``ignored``, and
        entries left for nodes that no longer exist are dropped), so the sidecar stays one
        small entry per node whatever a client posts."""
        positions = body.get("positions")
        if not isinstance(positions, dict):
            raise ApiError(400, 'expected {"positions": {"<node>": {"x": number, "y": number}}}.')
        new = _positions(positions)
        with self.lock:
            known = self._node_names(self._read())
            kept = {name: p for name, p in new.items() if name in known}
            merged = self._save_positions(kept, known)
            return {
                "layout": {n: {"x": p.x, "y": p.y} for n, p in merged.items()},
                "ignored": len(new) - len(kept),
            }

    def _save_positions(
        self, positions: dict[str, Position | None], known: set[str] | None = None
    ) -> dict[str, Position]:
        """Merge ``positions`` (``None``: unpin) into the sidecar, keeping only ``known``
        nodes (all of them: every node of the file's graphs)."""
        if known is None:
            known = self._node_names(self._read())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merged = read_layout(self.path, known)
        for name, position in positions.items():
            if position is None:
                merged.pop(name, None)
            else:
                merged[name] = position
        self._write_layout(merged)
        return merged

    def _node_names(self, source: SourceFile) -> set[str]:
        """Every node of every graph in the file: the names a layout entry may have."""
        try:
            graphs = self._parse(source, self.graph).graphs
            return {n.name for g in graphs for n in self._parse(source, g).ir.nodes}
        except SourceParseError as exc:
            msg = (
                f"the file does not parse ({exc}); the layout is saved once it parses again, "
                "so its entries can be checked against the graph's nodes."
            )
            raise ApiError(409, msg) from None
        except GraphNotFoundError as exc:
            raise ApiError(404, str(exc)) from None


def _positions(positions: Any) -> dict[str, Position | None]:
    """``{"<node>": {"x": number, "y": number} | null}`` checked, or a 400 naming the entry."""
    if not isinstance(positions, dict):
        raise ApiError(400, 'positions must be {"<node>": {"x": number, "y": number}}.')
    new: dict[str, Position | None] = {}
    for name, entry in positions.items():
        if entry is None:
            new[name] = None
            continue
        x = entry.get("x") if isinstance(entry, dict) else None
        y = entry.get("y") if isinstance(entry, dict) else None
        if not all(
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and _finite(v)
            and abs(v) <= MAX_COORDINATE
            for v in (x, y)
        ):
            msg = (
                f'position of {name!r} must be {{"x": number, "y": number}} (finite, '
                f"within ±{MAX_COORDINATE:g}), or null to unpin it."
            )
            raise ApiError(400, msg)
        assert isinstance(x, int | float) and isinstance(y, int | float)
        new[name] = Position(float(x), float(y))
    return new


def _pair(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def _sha(data: bytes) -> str:
    return sha256_hex(data)


def _parse_error(text: str, message: str) -> dict[str, Any]:
    try:
        parse_python(text)
    except SyntaxError as exc:
        return {"line": exc.lineno or 1, "column": exc.offset or 0, "message": message}
    except ValueError:
        pass
    return {"line": 1, "column": 0, "message": message}


def _holes_in(file: Path) -> list[dict[str, Any]]:
    """The holes of one file; unreadable or unparsable files have none (no warning)."""
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return []
    if "Hole" not in text:
        return []
    try:
        src = parse_source(text, filename=str(file))
        classes = find_node_classes(src)
    except Exception:  # a file the canvas cannot read has no holes to show
        return []
    drafts = read_drafts(file)
    return [
        {
            "file": str(file),
            "node": cls.name,
            "message": cls.hole or "",
            "line": cls.line,
            # A fill left a body that did not pass its checks: the node is "unverified".
            "status": "unverified" if cls.name in drafts else "needs code",
            "draft": drafts.get(cls.name),
        }
        for cls in classes.values()
        if cls.has_hole
    ]


def _team(text: str) -> dict[str, Any] | None:
    """The file's agents and handoffs (``None``: it builds no agent, or does not parse)."""
    if "Agent(" not in text and "create_agent(" not in text:
        return None
    try:
        team = handoffs.extract_handoffs(text)
    except SourceParseError:
        return None
    return team.to_json() if team.agents else None


def _handoff_request(body: dict[str, Any]) -> tuple[str, str, str, str]:
    """The ``POST /api/handoff`` body's parts, or a 400 naming what is wrong."""
    version, op = body.get("version"), body.get("op")
    giver, receiver = body.get("source"), body.get("target")
    if not isinstance(version, str) or not version:
        raise ApiError(400, "the edit needs 'version': the sha the page loaded.")
    if op not in ("add", "remove"):
        raise ApiError(400, f"'op' must be 'add' or 'remove', got {op!r:.40}.")
    for key, value in (("source", giver), ("target", receiver)):
        if not isinstance(value, str) or not value:
            raise ApiError(400, f"the edit needs '{key}': an agent's name (a string).")
    assert isinstance(giver, str) and isinstance(receiver, str)
    return version, op, giver, receiver


def _edit_request(body: dict[str, Any]) -> tuple[str, str, dict[str, Any], str | None]:
    """The ``POST /api/edit`` body's parts, or a 400 naming what is wrong."""
    version = body.get("version")
    op = body.get("op")
    args = body.get("args", {})
    graph = body.get("graph")
    if not isinstance(version, str) or not version:
        raise ApiError(400, "the edit needs 'version': the sha the page loaded.")
    if not isinstance(op, str):
        raise ApiError(400, f"the edit needs 'op', one of: {', '.join(ops.OPS)}.")
    if not isinstance(args, dict):
        raise ApiError(400, "'args' must be an object.")
    if graph is not None and not isinstance(graph, str):
        raise ApiError(400, "'graph' must be a graph name (a string).")
    if op not in ops.OPS:
        raise ApiError(400, f"unknown op {op!r}; the ops are: {', '.join(ops.OPS)}.")
    return version, op, args, graph


def _seal(key: bytes, args: dict[str, Any]) -> str:
    payload = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, payload.encode("ascii"), hashlib.sha256).hexdigest()


def _exact(result: ops.EditResult, origin: Origin) -> WriteBack | None:
    """A restore's exact old text, when it re-reads as the graph the restore makes."""
    assert result.text is not None
    return _reread(result.text, result.ir, origin)


def _stub_renamed(
    written: WriteBack, ir: GraphIR, old: str, new: str, origin: Origin
) -> WriteBack | None:
    """The write-back of a rename with the node's stub class renamed too, when the file
    allows it and the result re-reads as the rename with its class following."""
    text = _stub_rename.renamed_text(written.text, old, new)
    return None if text is None else _reread(text, _stub_rename.renamed_ir(ir, new), origin)


def _reread(text: str, want: GraphIR, origin: Origin) -> WriteBack | None:
    """``text`` as a write-back, when it reads as the graph ``want``."""
    try:
        parsed = parse_source(text)
        parsed.origin = origin
        models = find_graphs(parsed)
        classes = find_node_classes(parsed)
        ir = build_ir(parsed, select(models, want.name), classes, models)
    except CanvasError:
        return None
    return WriteBack(text, parsed, models, classes, ir) if ir == want else None


def _encoded(source: SourceFile, text: str) -> bytes:
    try:
        return source.encode(text)
    except UnicodeEncodeError as exc:
        msg = (
            f"the edit needs characters the file's encoding ({source.encoding}) cannot hold: {exc}"
        )
        raise ApiError(422, msg) from None


def _written(parsed: _Parsed, ir: GraphIR, op: str, args: dict[str, Any]) -> WriteBack:
    """The verified write-back of ``ir``, or a 422 saying why the engine cannot write it."""
    try:
        return write_back(parsed.src, ir, graphs=parsed.models, classes=parsed.classes)
    except CanvasError as exc:
        raise ApiError(422, str(exc)) from None
    except Exception as exc:  # an engine bug must not look like a server crash
        _log.exception("the canvas engine failed on %s %r", op, args)
        msg = f"the canvas engine could not write this edit back ({type(exc).__name__}: {exc})."
        raise ApiError(422, msg) from None
