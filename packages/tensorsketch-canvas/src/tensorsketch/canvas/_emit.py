"""Write-back phase 3b: apply everything to the module and render the new source.

The builder suite (see ``_splice``) is one rewrite; the others are stub classes above the
builder, ``In``/``Out`` edits of hole classes, two blank lines after the stubs and any missing
``from tensorsketch import`` names. All of them go through one ``_stmts.apply`` pass, which
only enters the statements on the path to what changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from tensorsketch.canvas import _imports
from tensorsketch.canvas._classes import NodeClass
from tensorsketch.canvas._diff import Slots
from tensorsketch.canvas._interface import STUB_NAMES, edit_ports, stub_text
from tensorsketch.canvas._render import RenderContext
from tensorsketch.canvas._source import ParsedSource
from tensorsketch.canvas._splice import Splice, rebuild
from tensorsketch.canvas._stmts import apply, walk_statements
from tensorsketch.canvas._wiring import GraphModel
from tensorsketch.canvas.exceptions import WriteBackError
from tensorsketch.canvas.ir import GraphIR, NodeIR

__all__ = ["Emit"]

Rewrite = tuple[tuple[cst.CSTNode, ...], Callable[[cst.CSTNode], cst.CSTNode]]
ModuleFn = Callable[[cst.Module], cst.Module]


@dataclass
class Emit:
    """Phase 3 of one write-back: what it reads to build every rewrite of the module."""

    src: ParsedSource
    model: GraphModel
    classes: dict[str, NodeClass]
    target: GraphIR
    ctx: RenderContext
    slots: Slots
    #: Node renames (old -> new) and removals the compile calls' breakpoints follow.
    renames: dict[str, str] = field(default_factory=dict)
    drops: set[str] = field(default_factory=set)
    config: cst.PartialParserConfig = field(init=False)
    indent: str = field(init=False)

    def __post_init__(self) -> None:
        self.config = self.src.module.config_for_parsing
        self.indent = self.src.module.default_indent

    def source(self, stubs: list[NodeIR], port_edits: dict[str, NodeIR]) -> str:
        """The new source text, with ``stubs`` written and ``port_edits`` applied."""
        module = self.src.module
        made = [self._stub(stub) for stub in stubs]
        top = self._top_level_index()
        splice = Splice(
            self.model,
            self.slots,
            self.ctx,
            self.config,
            self.indent,
            {n.name for n in self.target.nodes},
            self.renames,
            self.drops,
        )
        splice.run(made, top if self.model.module_level and made else None)
        rewrites: list[Rewrite] = []
        module_fns: list[ModuleFn] = []
        if self.model.module_level:
            module_fns.append(_on_module(rebuild(splice.entries)))
        else:
            rewrites.append((self.model.path or (module,), rebuild(splice.entries)))
            if made:
                module_fns.append(_insert(top, made))
        rewrites.extend(self._port_rewrites(port_edits))
        needs = set(self.ctx.needs)
        if made:
            needs.update(STUB_NAMES)
            module_fns.append(_space_after({id(stmt) for stmt in made}))
        import_fn = _imports.add_missing(module, needs)
        if import_fn is not None:
            module_fns.append(import_fn)
        if module_fns:
            rewrites.append(((module,), _module_rewrite(module_fns)))
        new_module = apply(module, rewrites)
        return self.src.unmask(self.src.render(new_module), splice.replacements)

    def _stub(self, node: NodeIR) -> cst.BaseStatement:
        stmt = cst.parse_statement(
            stub_text(node, self.indent, self.model.quote), config=self.config
        )
        blank = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
        return stmt.with_changes(leading_lines=blank)

    def _top_level_index(self) -> int:
        """The module statement that holds the builder: stubs go right above it."""
        path = self.model.path
        if self.model.module_level or len(path) < 2:
            return self.model.creation_index
        top = path[1]
        for index, stmt in enumerate(self.src.module.body):
            if stmt is top:
                return index
        return len(self.src.module.body)  # pragma: no cover - a path always starts at the module

    def _port_rewrites(self, port_edits: dict[str, NodeIR]) -> list[Rewrite]:
        rewrites: list[Rewrite] = []
        for key, node in port_edits.items():
            cls = self.classes[key]
            edited = edit_ports(self.src, cls, node, self.config, self.indent)
            rewrites.append((self._class_path(cls.node), _constant(edited)))
        return rewrites

    def _class_path(self, node: cst.ClassDef) -> tuple[cst.CSTNode, ...]:
        for located in walk_statements(self.src.module):
            if located.stmt is node:
                return (*located.path, node)
        msg = f"class {node.name.value!r} vanished while writing back"  # pragma: no cover
        raise WriteBackError(msg)  # pragma: no cover


def _module_rewrite(fns: list[ModuleFn]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """One rewrite of the module that runs ``fns`` in order."""

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Module)
        for fn in fns:
            node = fn(node)
        return node

    return rewrite


def _on_module(rewrite: Callable[[cst.CSTNode], cst.CSTNode]) -> ModuleFn:
    """The suite rewrite as a module function (the builder sits at module level)."""

    def fn(m: cst.Module) -> cst.Module:
        new = rewrite(m)
        assert isinstance(new, cst.Module)
        return new

    return fn


def _insert(at: int, stmts: list[cst.BaseStatement]) -> ModuleFn:
    def insert(m: cst.Module) -> cst.Module:
        body: list[cst.BaseStatement] = list(m.body)
        body[at:at] = stmts
        return m.with_changes(body=body)

    return insert


def _space_after(stub_ids: set[int]) -> ModuleFn:
    """Two blank lines between the written stubs and whatever follows them."""

    def space(m: cst.Module) -> cst.Module:
        body: list[cst.BaseStatement] = list(m.body)
        for i in range(len(body) - 1):
            if id(body[i]) in stub_ids and id(body[i + 1]) not in stub_ids:
                body[i + 1] = _blank_before(body[i + 1], 2)
        return m.with_changes(body=body)

    return space


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
