"""Canvas → code: write an edited GraphIR back into the source, touching only the wiring.

How it works (one module per phase):

0. Refuse what cannot be written — an inconsistent IR (``_validate``), a new state schema
   (here), class edits the canvas never makes — and decide which stubs and port edits the IR
   needs (``_class_edits``).
1. Read the file's wiring as items (see ``_wiring``) and plan the new wiring from the IR,
   reusing an existing item wherever the IR still says exactly what it says (``_plan``).
2. Diff old items against the plan (per stream: node declarations, then edges). Kept items
   keep their text byte-for-byte; removed ones disappear; new ones are placed next to their
   neighbours, and an item replacing exactly one old item inherits its comments (``_diff``).
3. Rewrite the builder suite, rendering new items in the file's own style (``_splice``); write
   stubs for nodes the canvas created, adjust ports of nodes that are still holes, and add any
   missing ``from tensorsketch import`` names the new code needs (``_emit``).
4. Re-extract the result and check it equals the IR, so a write-back that would not
   round-trip raises instead of corrupting the file (here).

Nothing else changes: node bodies, imports, comments and unrelated code stay byte-identical,
and an IR equal to the file's own extraction returns the source unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from tensorsketch.canvas import _imports, _modules
from tensorsketch.canvas._class_edits import class_edits, normalized
from tensorsketch.canvas._classes import NodeClass, find_node_classes, string_value
from tensorsketch.canvas._diff import Slots, diff
from tensorsketch.canvas._emit import Emit
from tensorsketch.canvas._extract import build_ir, select
from tensorsketch.canvas._plan import assign_handles, plan_edges, plan_nodes
from tensorsketch.canvas._render import RenderContext
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._validate import validate
from tensorsketch.canvas._wiring import GraphModel, Item, find_graphs
from tensorsketch.canvas.exceptions import WriteBackError
from tensorsketch.canvas.ir import GraphIR

__all__ = ["WriteBack", "reconstruct", "write_back"]


def reconstruct(
    source: str,
    ir: GraphIR,
    *,
    path: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
) -> str:
    """Write ``ir`` back into ``source`` and return the new source text.

    Only the wiring of the graph named ``ir.name`` is rewritten, in the style the file already
    uses (fluent chain, statements, or ``>>``). Nodes listed in ``ir.added`` get a typed stub
    class (a hole) above the graph builder. Ports may change only on nodes that are still holes.

    :raises GraphNotFoundError: the source has no graph named ``ir.name``.
    :raises IRError: the IR is inconsistent (duplicate node names, half a loop, ...).
    :raises WriteBackError: the edit needs code the canvas never writes (a node body, the state
        schema, a class defined in another module).

    ``path`` and ``root`` are :func:`~tensorsketch.canvas.extract`'s: give them when the IR
    was read with them (a subgraph imported from another module), so the write-back reads
    that subgraph's ports the same way. An edit inside such a subgraph is an edit of the
    module that defines it: ``reconstruct`` that file's source with the child's IR.
    """
    src = parse_source(source)
    src.origin = _modules.Origin.of(path, root) if path is not None else None
    return write_back(src, ir).text


@dataclass
class WriteBack:
    """A verified write-back: the new text, and its parse and graph from the verification.

    A caller that keeps parses (the Studio) reuses ``parsed``/``graphs``/``ir`` for the next
    edit instead of parsing the text it just wrote a second time.
    """

    text: str
    parsed: ParsedSource
    graphs: list[GraphModel]
    classes: dict[str, NodeClass]
    ir: GraphIR


def write_back(
    src: ParsedSource,
    ir: GraphIR,
    *,
    graphs: list[GraphModel] | None = None,
    classes: dict[str, NodeClass] | None = None,
) -> WriteBack:
    """:func:`reconstruct` on an already parsed source (``src`` is not changed).

    ``graphs`` and ``classes`` are ``find_graphs(src)`` and ``find_node_classes(src)`` when
    the caller has them already (a previous :class:`WriteBack`'s); the write-back only reads
    them.
    """
    models = graphs if graphs is not None else find_graphs(src)
    model = select(models, ir.name)
    if classes is None:
        classes = find_node_classes(src)
    current = build_ir(src, model, classes, models)
    if current == ir and not ir.added:
        return WriteBack(src.text, src, models, classes, current)
    target = normalized(ir, classes)
    validate(target)
    plan = _Writer(src, model, classes, current, target)
    return _verify(plan.write(), target, src.origin)


class _Writer:
    """One write-back: the parsed file, the graph in it, and the IR it should say."""

    def __init__(
        self,
        src: ParsedSource,
        model: GraphModel,
        classes: dict[str, NodeClass],
        current: GraphIR,
        target: GraphIR,
    ) -> None:
        self.src = src
        self.model = model
        self.classes = classes
        self.current = current
        self.target = target

    def write(self) -> str:
        """Phases 0-3: the new source text (not yet verified)."""
        if self.target.state != self.current.state:
            msg = (
                f"the IR changes the state schema of {self.target.name!r} from "
                f"{self.current.state!r} to {self.target.state!r}; the canvas only edits wiring "
                "— change `Graph(...)` in code."
            )
            raise WriteBackError(msg)
        model, target = self.model, self.target
        bound = _imports.bound_names(self.src.module) or set()
        stubs, port_edits = class_edits(target, self.classes, bound)
        ctx = RenderContext(style=model.style, var=model.var, quote=model.quote, handles={})
        old_nodes = [i for i in model.items if i.stream == "nodes"]
        old_edges = [i for i in model.items if i.stream == "edges"]
        renames, drops = _renamed(self.current, target)
        node_plan = plan_nodes(target.nodes, old_nodes, model.style)
        ctx.handles = assign_handles(node_plan, target, model, self.src.text, renames)
        edge_plan = plan_edges(
            target.edges, old_edges, model.style, _handle_only(self.src, model, renames)
        )
        slots = Slots()
        diff(slots, model, old_nodes, node_plan, stream="nodes")
        declarations = [i for i in model.items if i.kind in ("add", "nodes", "handle")]
        last_node = declarations[-1] if declarations else None
        diff(slots, model, old_edges, edge_plan, stream="edges", last_node=last_node)
        emit = Emit(self.src, model, self.classes, target, ctx, slots, renames, drops)
        return emit.source(stubs, port_edits)


def _renamed(current: GraphIR, target: GraphIR) -> tuple[dict[str, str], set[str]]:
    """Which nodes the edit renamed (old -> new) and which it removed, for the breakpoint
    lists of the compile calls. A rename keeps the node's place and class (``edits``), so
    with as many nodes as before a changed name at the same place is a rename."""
    names = {n.name for n in target.nodes}
    renames: dict[str, str] = {}
    if len(current.nodes) == len(target.nodes):
        for old, new in zip(current.nodes, target.nodes, strict=True):
            if old.name != new.name and old.cls == new.cls and old.name not in names:
                renames[old.name] = new.name
    drops = {n.name for n in current.nodes if n.name not in names and n.name not in renames}
    return renames, drops


def _handle_only(
    src: ParsedSource, model: GraphModel, renames: dict[str, str]
) -> Callable[[Item], dict[str, str]]:
    """Which renames an old ``>>`` edge item survives unchanged (``{}``: none).

    In the ``>>`` style a renamed node keeps its handle variable, so a statement that names it
    only through handles (``START >> parse >> answer``) still says the right thing after the
    rename and keeps its text; one that spells the old name (``g["Answer"]``, a builder call)
    does not.
    """
    if model.style != "operator" or not renames:
        return lambda _item: {}

    def survives(item: Item) -> dict[str, str]:
        if item.container is not None:
            return {}
        stmt = model.suite.body[item.stmt_index]
        spelled = {value for node in _strings(stmt) if (value := string_value(node)) is not None}
        return {} if spelled & set(renames) else renames

    return survives


def _strings(node: cst.CSTNode) -> list[cst.SimpleString]:
    found: list[cst.SimpleString] = []

    class _Find(cst.CSTVisitor):
        def visit_SimpleString(self, s: cst.SimpleString) -> None:
            found.append(s)

    node.visit(_Find())
    return found


def _verify(new_source: str, target: GraphIR, origin: _modules.Origin | None) -> WriteBack:
    parsed = parse_source(new_source)
    parsed.origin = origin
    models = find_graphs(parsed)
    classes = find_node_classes(parsed)
    result = build_ir(parsed, select(models, target.name), classes, models)
    if result != target or any(
        wanted is not None and wanted != got
        for wanted, got in (
            (target.interrupt_before, result.interrupt_before),
            (target.interrupt_after, result.interrupt_after),
        )
    ):
        msg = (
            f"write-back of graph {target.name!r} would not round-trip (the re-read graph differs "
            "from the edited IR), so the file was left unchanged; this is a bug in the canvas "
            "engine — please report it with the source and the IR."
        )
        raise WriteBackError(msg)
    return WriteBack(new_source, parsed, models, classes, result)
