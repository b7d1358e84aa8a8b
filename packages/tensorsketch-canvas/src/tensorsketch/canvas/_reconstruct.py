"""Canvas → code: write an edited GraphIR back into the source, touching only the wiring.

How it works:

1. Read the file's wiring as items (see ``_wiring``) and plan the new wiring from the IR,
   reusing an existing item wherever the IR still says exactly what it says.
2. Diff old items against the plan (per stream: node declarations, then edges). Kept items
   keep their text byte-for-byte; removed ones disappear; new ones are rendered in the file's
   own style next to their neighbours, and an item replacing exactly one old item inherits
   its comments.
3. Write stubs for nodes the canvas created, adjust ports of nodes that are still holes, and
   add any missing ``from tensorsketch import`` names the new code needs.
4. Re-extract the result and check it equals the IR, so a write-back that would not
   round-trip raises instead of corrupting the file.

Nothing else changes: node bodies, imports, comments and unrelated code stay byte-identical,
and an IR equal to the file's own extraction returns the source unchanged.
"""

from __future__ import annotations

import difflib
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import libcst as cst

from tensorsketch.canvas import _imports
from tensorsketch.canvas._classes import NodeClass, find_node_classes
from tensorsketch.canvas._extract import build_ir, select
from tensorsketch.canvas._interface import STUB_NAMES, edit_ports, stub_text
from tensorsketch.canvas._render import (
    ChainUnit,
    Fresh,
    RenderContext,
    link_bodies,
    render_chain,
    snake_name,
    statements,
)
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._stmts import apply, walk_statements
from tensorsketch.canvas._wiring import (
    Container,
    GraphModel,
    Item,
    ItemKind,
    NodeDecl,
    edge_key,
    find_graphs,
)
from tensorsketch.canvas.exceptions import IRError, WriteBackError
from tensorsketch.canvas.ir import END, LOOP_EXIT, LOOP_REPEAT, START, EdgeIR, GraphIR, NodeIR

__all__ = ["reconstruct"]

_IDENT = re.compile(r"[A-Za-z_]\w*")

#: One statement of the rewritten suite: ``(old index, None, change)`` keeps (and maybe
#: changes) an existing statement, ``(None, statement, None)`` inserts a new one.
_Entry = tuple[
    int | None,
    cst.BaseStatement | None,
    Callable[[cst.BaseStatement], cst.BaseStatement] | None,
]


def reconstruct(source: str, ir: GraphIR) -> str:
    """Write ``ir`` back into ``source`` and return the new source text.

    Only the wiring of the graph named ``ir.name`` is rewritten, in the style the file already
    uses (fluent chain, statements, or ``>>``). Nodes listed in ``ir.added`` get a typed stub
    class (a hole) above the graph builder. Ports may change only on nodes that are still holes.

    :raises GraphNotFoundError: the source has no graph named ``ir.name``.
    :raises IRError: the IR is inconsistent (duplicate node names, half a loop, ...).
    :raises WriteBackError: the edit needs code the canvas never writes (a node body, the state
        schema, a class defined in another module).
    """
    src = parse_source(source)
    models = find_graphs(src)
    model = select(models, ir.name)
    classes = find_node_classes(src)
    current = build_ir(src, model, classes)
    if current == ir and not ir.added:
        return source
    target = _normalized(ir, classes)
    _validate(target)
    plan = _Writer(src, model, classes, current, target)
    new_source = plan.write()
    _verify(new_source, target)
    return new_source


# -- validation ------------------------------------------------------------------------------


def _normalized(ir: GraphIR, classes: dict[str, NodeClass]) -> GraphIR:
    """The IR as the file will say it: a created node whose class already exists takes that
    class's real interface (classes are never rewritten). A stub says exactly what was sent."""
    target = ir.copy()
    for node in target.nodes:
        if node.name not in target.added:
            continue
        key = _class_key(node.cls)
        cls = classes.get(key)
        if cls is None:
            continue
        # A sibling node of the same class carries the class as this IR edits it (its ports
        # may change in the same write-back); otherwise the class stays as the file has it.
        peer = next(
            (n for n in target.nodes if n.name not in target.added and _class_key(n.cls) == key),
            None,
        )
        inputs, outputs = (peer.inputs, peer.outputs) if peer else (cls.inputs, cls.outputs)
        node.inputs = [replace(p) for p in inputs]
        node.outputs = [replace(p) for p in outputs]
        node.has_hole, node.hole = cls.has_hole, cls.hole
    return target


def _validate(ir: GraphIR) -> None:
    names = [node.name for node in ir.nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        msg = (
            f"graph {ir.name!r} has several nodes named {duplicates[0]!r}; node names must be "
            "unique — rename one of them."
        )
        raise IRError(msg)
    for name in names:
        if name in (START, END):
            msg = f"a node cannot be named {name!r}: that name is reserved for START/END."
            raise IRError(msg)
    for name in ir.added:
        if name not in names:
            msg = (
                f"graph.added lists {name!r}, but no node of that name is in graph.nodes; "
                "append the NodeIR as well as its name."
            )
            raise IRError(msg)
    edges = ir.edges
    index = 0
    while index < len(edges):
        edge = edges[index]
        where = f"edges[{index}]"
        if edge.kind == "custom":
            if not edge.code:
                msg = f"{where} is a custom element without code; keep the `code` it was read with."
                raise IRError(msg)
        elif edge.source is None:
            msg = f"{where} ({edge.kind}) needs a source node."
            raise IRError(msg)
        elif edge.kind == "sequential":
            if edge.target is None:
                msg = f"{where}: a sequential edge from {edge.source!r} needs a target."
                raise IRError(msg)
        elif edge.kind == "dynamic":
            if not edge.path or edge.target is not None:
                msg = (
                    f"{where}: a dynamic edge from {edge.source!r} needs the routing function in "
                    "`path` and no target (its targets are decided at run time)."
                )
                raise IRError(msg)
        elif edge.branch == "loop":
            nxt = edges[index + 1] if index + 1 < len(edges) else None
            if not (
                edge.label == LOOP_REPEAT
                and edge.target == edge.source
                and nxt is not None
                and nxt.branch == "loop"
                and nxt.label == LOOP_EXIT
                and nxt.source == edge.source
                and nxt.path == edge.path
                and nxt.target is not None
            ):
                msg = (
                    f"{where}: the loop on {edge.source!r} needs its {LOOP_REPEAT!r} edge back to "
                    f"the node followed directly by its {LOOP_EXIT!r} edge; add or remove both "
                    "together."
                )
                raise IRError(msg)
            if not edge.path:
                msg = f"{where}: the loop on {edge.source!r} needs its `until` predicate in `path`."
                raise IRError(msg)
            index += 2
            continue
        elif edge.target is None or edge.label is None or not edge.path:
            msg = (
                f"{where}: a conditional edge from {edge.source!r} needs a target, the mapping "
                "key in `label` and the routing function in `path`."
            )
            raise IRError(msg)
        index += 1


def _verify(new_source: str, target: GraphIR) -> None:
    from tensorsketch.canvas._extract import extract

    result = extract(new_source, target.name)
    if result != target:
        msg = (
            f"write-back of graph {target.name!r} would not round-trip (the re-read graph differs "
            "from the edited IR), so the file was left unchanged; this is a bug in the canvas "
            "engine — please report it with the source and the IR."
        )
        raise WriteBackError(msg)


# -- the writer ------------------------------------------------------------------------------


@dataclass
class _Slots:
    """Where new items go, relative to existing ones."""

    before: dict[int, list[Fresh]] = field(default_factory=dict)
    after: dict[int, list[Fresh]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    inherit: dict[int, Item] = field(default_factory=dict)
    chain_start: list[Fresh] = field(default_factory=list)
    chain_end: list[Fresh] = field(default_factory=list)
    after_creation: list[Fresh] = field(default_factory=list)


class _Writer:
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
        self.module = src.module
        self.indent = self.module.default_indent
        self.config = self.module.config_for_parsing
        self.ctx = RenderContext(style=model.style, var=model.var, quote=model.quote, handles={})
        self.slots = _Slots()
        self.bound = _imports.bound_names(self.module) or set()
        self.stub_ids: set[int] = set()

    # planning ----------------------------------------------------------------------------

    def write(self) -> str:
        if self.target.state != self.current.state:
            msg = (
                f"the IR changes the state schema of {self.target.name!r} from "
                f"{self.current.state!r} to {self.target.state!r}; the canvas only edits wiring "
                "— change `Graph(...)` in code."
            )
            raise WriteBackError(msg)
        stubs, port_edits = self._interfaces()
        old_nodes = [i for i in self.model.items if i.stream == "nodes"]
        old_edges = [i for i in self.model.items if i.stream == "edges"]
        node_plan = self._plan_nodes(old_nodes)
        self._assign_handles(node_plan)
        edge_plan = self._plan_edges(old_edges)
        self._diff(old_nodes, node_plan, stream="nodes")
        declarations = [i for i in self.model.items if i.kind in ("add", "nodes", "handle")]
        self._diff(
            old_edges,
            edge_plan,
            stream="edges",
            last_node=declarations[-1] if declarations else None,
        )
        return self._emit(stubs, port_edits)

    def _interfaces(self) -> tuple[list[NodeIR], dict[str, NodeIR]]:
        """Stubs to write and hole classes whose ports change; refuse anything else."""
        stubs: dict[str, NodeIR] = {}
        port_edits: dict[str, NodeIR] = {}
        for node in self.target.nodes:
            key = _class_key(node.cls)
            cls = self.classes.get(key)
            if cls is not None:
                if self._ports_change(node, cls, key):
                    other = port_edits.setdefault(key, node)
                    if (other.inputs, other.outputs) != (node.inputs, node.outputs):
                        raise WriteBackError(_disagree(other, node, key))
            elif key in stubs:
                if (node.inputs, node.outputs) != (stubs[key].inputs, stubs[key].outputs):
                    raise WriteBackError(_disagree(stubs[key], node, key))
            elif node.name in self.target.added:
                self._check_new(node, key)
                stubs[key] = node
            elif node.inputs or node.outputs or node.has_hole or node.hole is not None:
                msg = (
                    f"node {node.name!r} uses class {key!r}, which is not defined in this file; "
                    "its ports and body live in its own module — edit them there, or list the "
                    "node in `added` to create a stub here."
                )
                raise WriteBackError(msg)
        return list(stubs.values()), port_edits

    def _check_new(self, node: NodeIR, key: str) -> None:
        """A node the canvas created must be a hole with a free, valid class name."""
        if key in self.bound:
            msg = (
                f"cannot create node class {key!r}: the name is already used in this file by "
                "something that is not a node class; pick another name."
            )
            raise WriteBackError(msg)
        if not node.cls.isidentifier() or keyword.iskeyword(node.cls):
            msg = (
                f"cannot create node class {node.cls!r}: a new node's class must be a Python "
                "identifier that is not a keyword, such as 'Escalate'."
            )
            raise WriteBackError(msg)
        if not node.has_hole:
            msg = (
                f"new node {node.name!r} must be created as a hole (has_hole=True); its body is "
                "written in code afterwards."
            )
            raise WriteBackError(msg)
        for port in (*node.inputs, *node.outputs):
            _check_port(node.name, port.name, port.type)

    def _ports_change(self, node: NodeIR, cls: NodeClass, key: str) -> bool:
        """Whether an existing class's ports change (allowed only while it is a hole)."""
        if (node.has_hole, node.hole) != (cls.has_hole, cls.hole):
            msg = (
                f"node {node.name!r}: has_hole/hole come from the body of class {key!r}, which "
                "the canvas never edits; implement or stub the body in code."
            )
            raise WriteBackError(msg)
        if (node.inputs, node.outputs) == (cls.inputs, cls.outputs):
            return False
        if not cls.has_hole:
            msg = (
                f"node {node.name!r} already has a body, so its ports cannot change from the "
                f"canvas (its code may use them); edit `{key}.In`/`{key}.Out` in code."
            )
            raise WriteBackError(msg)
        for port in (*node.inputs, *node.outputs):
            _check_port(node.name, port.name, port.type)
        return True

    def _plan_nodes(self, old: list[Item]) -> list[Fresh]:
        wanted = [(n.name, n.cls) for n in self.target.nodes]
        index: dict[tuple[str, str], list[Item]] = {}
        for item in old:
            index.setdefault((item.nodes[0].name, item.nodes[0].cls), []).append(item)
        used: set[int] = set()
        plan: list[Fresh] = []
        i = 0
        while i < len(wanted):
            match = None
            for item in index.get(wanted[i], []):
                size = len(item.nodes)
                if (
                    id(item) not in used
                    and [(n.name, n.cls) for n in item.nodes] == wanted[i : i + size]
                ):
                    match = item
                    break
            if match is not None:
                used.add(id(match))
                plan.append(
                    Fresh(match.kind, list(match.nodes), origin=match, handles=dict(match.handles))
                )
                i += len(match.nodes)
                continue
            name, cls = wanted[i]
            decl = NodeDecl(name=name, cls=cls, class_key=_class_key(cls))
            operator = self.model.style == "operator"
            previous = plan[-1] if plan else None
            if (
                operator
                and decl.name == decl.class_key
                and previous is not None
                and previous.origin is None
                and previous.kind == "nodes"
            ):
                previous.nodes.append(decl)
            else:
                kind: ItemKind = "nodes" if operator and decl.name == decl.class_key else "add"
                plan.append(Fresh(kind, [decl]))
            i += 1
        return plan

    def _assign_handles(self, plan: list[Fresh]) -> None:
        if self.model.style != "operator":
            return
        names = {n.name for n in self.target.nodes}
        handles: dict[str, str] = {}
        taken: set[str] = set()
        for item in plan:
            if item.origin is not None:
                for var, name in item.handles.items():
                    handles.setdefault(name, var)
                    taken.add(var)
        for old in self.model.items:
            if old.kind == "handle":
                for var, name in old.handles.items():
                    if name in names:
                        handles.setdefault(name, var)
                        taken.add(var)
        old_vars = {name: var for var, name in self.model.handles.items()}
        identifiers = set(_IDENT.findall(self.src.text))
        for item in plan:
            if item.origin is not None:
                continue
            for decl in item.nodes:
                known = old_vars.get(decl.name)
                if known is not None and known not in taken:
                    var = known
                else:
                    base = snake_name(decl.name)
                    var, n = base, 1
                    while var in taken or (var in identifiers and var != known):
                        n += 1
                        var = f"{base}_{n}" if n > 2 else f"{base}_node"
                handles[decl.name] = var
                taken.add(var)
                item.handles[var] = decl.name
        self.ctx.handles = handles

    def _plan_edges(self, old: list[Item]) -> list[Fresh]:
        edges = self.target.edges
        keys = [edge_key(e) for e in edges]
        index: dict[tuple[object, ...], list[Item]] = {}
        for item in old:
            index.setdefault(edge_key(item.edges[0]), []).append(item)
        used: set[int] = set()

        def match_at(i: int) -> Item | None:
            for item in index.get(keys[i], []):
                size = len(item.edges)
                if id(item) not in used and [edge_key(e) for e in item.edges] == keys[i : i + size]:
                    return item
            return None

        plan: list[Fresh] = []
        i = 0
        while i < len(edges):
            match = match_at(i)
            if match is not None:
                used.add(id(match))
                plan.append(Fresh(match.kind, edges=list(match.edges), origin=match))
                i += len(match.edges)
                continue
            j = self._group_end(edges, i, match_at)
            kind: ItemKind = "custom" if edges[i].kind == "custom" else "edge"
            plan.append(Fresh(kind, edges=list(edges[i:j])))
            i = j
        return plan

    def _group_end(
        self, edges: list[EdgeIR], i: int, match_at: Callable[[int], Item | None]
    ) -> int:
        first = edges[i]
        if first.kind in ("custom", "dynamic"):
            return i + 1
        if first.branch == "loop":
            return i + 2
        j = i + 1
        if first.kind == "conditional":
            labels = {first.label}
            while (
                j < len(edges)
                and edges[j].kind == "conditional"
                and (edges[j].source, edges[j].branch, edges[j].path)
                == (first.source, first.branch, first.path)
                and edges[j].label not in labels
            ):
                labels.add(edges[j].label)
                j += 1
            return j
        if self.model.style != "operator":
            return j
        while (
            j < len(edges)
            and edges[j].kind == "sequential"
            and edges[j].source == edges[j - 1].target
            and edges[j].source not in (START, END)
            and match_at(j) is None
        ):
            j += 1
        return j

    def _diff(
        self, old: list[Item], plan: list[Fresh], *, stream: str, last_node: Item | None = None
    ) -> None:
        slots = self.slots
        a = [("old", id(item)) for item in old]
        b = [
            ("old", id(p.origin)) if p.origin is not None else ("new", k)
            for k, p in enumerate(plan)
        ]
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            slots.deleted.update(id(item) for item in old[i1:i2])
            new = plan[j1:j2]
            if not new:
                continue
            if tag == "replace" and i2 - i1 == j2 - j1:
                for fresh, item in zip(new, old[i1:i2], strict=True):
                    if fresh.origin is None:
                        slots.inherit[id(fresh)] = item
            if tag == "replace":
                slots.before.setdefault(id(old[i1]), []).extend(new)
            elif i1 > 0:
                slots.after.setdefault(id(old[i1 - 1]), []).extend(new)
            elif old:
                slots.before.setdefault(id(old[0]), []).extend(new)
            elif stream == "edges" and last_node is not None:
                slots.after.setdefault(id(last_node), []).extend(new)
            elif self.model.style == "fluent" or self.model.var is None:
                (slots.chain_start if stream == "nodes" else slots.chain_end).extend(new)
            else:
                slots.after_creation.extend(new)

    # emitting ----------------------------------------------------------------------------

    def _emit(self, stubs: list[NodeIR], port_edits: dict[str, NodeIR]) -> str:
        model = self.model
        slots = self.slots
        body = model.suite.body
        by_stmt: dict[int, list[Item]] = {}
        for item in model.items:
            if item.container is None:
                by_stmt.setdefault(item.stmt_index, []).append(item)
        node_names = {n.name for n in self.target.nodes}
        replacements: dict[str, str] = {}
        plan: list[_Entry] = []

        def new_statements(fresh: Fresh) -> list[cst.BaseStatement]:
            origin = fresh.origin
            if origin is not None and origin.container is None:
                return [body[origin.stmt_index]]
            texts = statements(fresh, self.ctx)
            made: list[cst.BaseStatement] = [
                cst.parse_statement(t + "\n", config=self.config) for t in texts
            ]
            inherit = slots.inherit.get(id(fresh))
            if inherit is not None and inherit.container is None and made:
                old = body[inherit.stmt_index]
                first = made[0]
                if isinstance(old, cst.SimpleStatementLine) and isinstance(
                    first, cst.SimpleStatementLine
                ):
                    made[0] = first.with_changes(
                        leading_lines=old.leading_lines, trailing_whitespace=old.trailing_whitespace
                    )
            return made

        def emit_new(items: list[Fresh]) -> None:
            for fresh in items:
                for stmt in new_statements(fresh):
                    plan.append((None, stmt, None))

        creation_top = self._top_level_index()
        for index in range(len(body)):
            if model.module_level and index == creation_top and stubs:
                for stub in stubs:
                    plan.append((None, self._stub(stub), None))
            items = by_stmt.get(index, [])
            for item in items:
                emit_new(slots.before.get(id(item), []))
            container = model.containers.get(index)
            if container is not None:
                self._emit_container(container, index, plan, replacements, emit_new)
            elif items:
                keep = all(id(item) not in slots.deleted for item in items)
                for item in items:
                    if item.kind == "handle" and not all(
                        n in node_names for n in item.handles.values()
                    ):
                        keep = False
                if keep:
                    plan.append((index, None, None))
            else:
                plan.append((index, None, None))
            if index == model.creation_index:
                emit_new(slots.after_creation)
            for item in items:
                emit_new(slots.after.get(id(item), []))

        def rebuild(suite: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(suite, cst.Module | cst.IndentedBlock)
            updated = suite.body
            new_body: list[cst.BaseStatement] = []
            for old_index, stmt, change in plan:
                if old_index is not None:
                    current = updated[old_index]
                    new_body.append(change(current) if change is not None else current)
                elif stmt is not None:
                    new_body.append(stmt)
            return suite.with_changes(body=new_body)

        rewrites: list[tuple[tuple[cst.CSTNode, ...], Callable[[cst.CSTNode], cst.CSTNode]]] = []
        suite_path = (*model.path,) if model.path else (self.module,)
        module_fns: list[Callable[[cst.Module], cst.Module]] = []
        if model.module_level:

            def rebuild_module(m: cst.Module) -> cst.Module:
                new = rebuild(m)
                assert isinstance(new, cst.Module)
                return new

            module_fns.append(rebuild_module)
        else:
            rewrites.append((suite_path, rebuild))
            if stubs:
                top = creation_top
                made = [self._stub(stub) for stub in stubs]

                def add_stubs(m: cst.Module) -> cst.Module:
                    new_body: list[cst.BaseStatement] = list(m.body)
                    new_body[top:top] = made
                    return m.with_changes(body=new_body)

                module_fns.append(add_stubs)
        for key, node in port_edits.items():
            cls = self.classes[key]
            path = self._class_path(cls.node)
            edited = edit_ports(self.src, cls, node, self.config, self.indent)
            rewrites.append((path, _constant(edited)))
        needs = set(self.ctx.needs)
        if stubs:
            needs.update(STUB_NAMES)
            made_stubs = self.stub_ids

            def space_after_stubs(m: cst.Module) -> cst.Module:
                body: list[cst.BaseStatement] = list(m.body)
                for i in range(len(body) - 1):
                    if id(body[i]) in made_stubs and id(body[i + 1]) not in made_stubs:
                        body[i + 1] = _blank_before(body[i + 1], 2)
                return m.with_changes(body=body)

            module_fns.append(space_after_stubs)
        import_fn = self._imports(needs)
        if import_fn is not None:
            module_fns.append(import_fn)
        if module_fns:

            def module_rewrite(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Module)
                for fn in module_fns:
                    node = fn(node)
                return node

            rewrites.append(((self.module,), module_rewrite))
        new_module = apply(self.module, rewrites)
        return self.src.unmask(self.src.render(new_module), replacements)

    def _emit_container(
        self,
        container: Container,
        index: int,
        plan: list[_Entry],
        replacements: dict[str, str],
        emit_new: Callable[[list[Fresh]], None],
    ) -> None:
        slots = self.slots
        items = [item for item in self.model.items if item.container is container]
        units: list[ChainUnit] = []
        late: list[Fresh] = []
        changed = False

        def add_fresh(fresh_items: list[Fresh]) -> None:
            nonlocal changed
            for fresh in fresh_items:
                changed = True
                origin = fresh.origin
                if origin is not None and origin.container is not None and origin.link is not None:
                    units.append(ChainUnit(origin.link.body, origin.link))
                    continue
                if origin is not None or fresh.handles:
                    late.append(fresh)
                    continue
                inherit = slots.inherit.get(id(fresh))
                link = (
                    inherit.link if inherit is not None and inherit.container is container else None
                )
                bodies = link_bodies(fresh, self.ctx)
                for number, body_text in enumerate(bodies):
                    units.append(ChainUnit(body_text, link if number == 0 else None))

        if container.creation:
            add_fresh(slots.chain_start)
        for item in items:
            add_fresh(slots.before.get(id(item), []))
            if id(item) in slots.deleted:
                changed = True
            else:
                assert item.link is not None
                units.append(ChainUnit(item.link.body, item.link))
            add_fresh(slots.after.get(id(item), []))
        if container.creation:
            add_fresh(slots.chain_end)
        if not changed:
            plan.append((index, None, None))
        elif not units and not container.creation:
            pass  # every link of this statement chain is gone: drop the statement
        else:
            text = render_chain(container.chain, units, container.compile_link, self.indent)
            if container.chain.key:
                replacements[container.chain.key] = text
                plan.append((index, None, None))
            else:
                old_expr = container.expr
                new_expr = cst.parse_expression(text)

                def change(
                    stmt: cst.BaseStatement, old: cst.CSTNode = old_expr
                ) -> cst.BaseStatement:
                    result = stmt.deep_replace(old, new_expr)
                    assert isinstance(result, cst.BaseStatement)
                    return result

                plan.append((index, None, change))
        if late:
            emit_new(late)

    # helpers -----------------------------------------------------------------------------

    def _stub(self, node: NodeIR) -> cst.BaseStatement:
        stub = self._make_stub(node)
        self.stub_ids.add(id(stub))
        return stub

    def _make_stub(self, node: NodeIR) -> cst.BaseStatement:
        stmt = cst.parse_statement(
            stub_text(node, self.indent, self.model.quote), config=self.config
        )
        blank = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
        return stmt.with_changes(leading_lines=blank)

    def _top_level_index(self) -> int:
        path = self.model.path
        if self.model.module_level or len(path) < 2:
            return self.model.creation_index
        top = path[1]
        for index, stmt in enumerate(self.module.body):
            if stmt is top:
                return index
        return len(self.module.body)  # pragma: no cover - a path always starts at the module

    def _class_path(self, node: cst.ClassDef) -> tuple[cst.CSTNode, ...]:
        for located in walk_statements(self.module):
            if located.stmt is node:
                return (*located.path, node)
        msg = f"class {node.name.value!r} vanished while writing back"  # pragma: no cover
        raise WriteBackError(msg)  # pragma: no cover

    def _imports(self, needs: set[str]) -> Callable[[cst.Module], cst.Module] | None:
        bound = _imports.bound_names(self.module)
        if bound is None:
            return None
        missing = sorted(needs - bound)
        if not missing:
            return None
        position = _imports.find_import(self.module)
        if position is not None:
            old = self.module.body[position]
            assert isinstance(old, cst.SimpleStatementLine)
            new_line = _imports.with_names(old, missing)

            def fix(m: cst.Module) -> cst.Module:
                body = list(m.body)
                for i, stmt in enumerate(body):
                    if stmt is old or (
                        isinstance(stmt, cst.SimpleStatementLine) and stmt.deep_equals(old)
                    ):
                        body[i] = new_line
                        break
                return m.with_changes(body=body)

            return fix
        new_import = _imports.import_statement(missing)
        at = _imports.import_position(self.module)
        anchor = self.module.body[at - 1] if at > 0 else None

        def add(m: cst.Module) -> cst.Module:
            body = list(m.body)
            where = 0
            if anchor is not None:
                where = next((i + 1 for i, s in enumerate(body) if s is anchor), at)
            body.insert(where, new_import)
            return m.with_changes(body=body)

        return add


def _blank_before(stmt: cst.BaseStatement, count: int) -> cst.BaseStatement:
    """``stmt`` with at least ``count`` blank lines above it (its comments stay attached)."""
    if not isinstance(stmt, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return stmt  # pragma: no cover - every statement is one of the two
    leading = list(stmt.leading_lines)
    blank = 0
    while blank < len(leading) and leading[blank].comment is None:
        blank += 1
    if blank >= count:
        return stmt
    return stmt.with_changes(
        leading_lines=[cst.EmptyLine(indent=False)] * (count - blank) + leading
    )


def _constant(node: cst.CSTNode) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def replace(_old: cst.CSTNode) -> cst.CSTNode:
        return node

    return replace


def _disagree(first: NodeIR, second: NodeIR, key: str) -> str:
    return (
        f"nodes {first.name!r} and {second.name!r} share class {key!r} but list different "
        "ports; give both the same inputs and outputs."
    )


def _class_key(cls: str) -> str:
    text = cls.split("(", 1)[0].strip()
    return text.rsplit(".", 1)[-1]


def _check_port(node: str, name: str, type_text: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        msg = (
            f"node {node!r}: port name {name!r} is not a Python identifier (or is a keyword); "
            "use e.g. 'query'."
        )
        raise WriteBackError(msg)
    try:
        cst.parse_expression(type_text)
    except cst.ParserSyntaxError:
        msg = (
            f"node {node!r}: the type {type_text!r} of port {name!r} is not a Python expression; "
            "write it as in code, e.g. 'str' or 'list[str]'."
        )
        raise WriteBackError(msg) from None
