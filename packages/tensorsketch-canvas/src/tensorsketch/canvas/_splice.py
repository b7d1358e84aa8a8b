"""Write-back phase 3a: the graph builder's suite, rewritten statement by statement.

The new suite is a list of entries: an old statement kept by its index (so its text and
comments never change, unless a chain in it is re-rendered) or a new statement rendered in the
file's style. A chain that loses or gains links is re-rendered as a whole; a masked chain (one
too long for libcst, see ``_source``) is re-rendered as text and substituted when unmasking.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst

from tensorsketch.canvas._breakpoints import rewrite_breakpoints
from tensorsketch.canvas._diff import Slots
from tensorsketch.canvas._render import (
    ChainUnit,
    Fresh,
    RenderContext,
    link_bodies,
    render_chain,
    statements,
)
from tensorsketch.canvas._source import Link
from tensorsketch.canvas._wiring import Container, GraphModel, Item

__all__ = ["Entry", "Splice", "rebuild"]

#: One statement of the rewritten suite: ``(old index, None, change)`` keeps (and maybe
#: changes) an existing statement, ``(None, statement, None)`` inserts a new one.
Entry = tuple[
    int | None,
    cst.BaseStatement | None,
    Callable[[cst.BaseStatement], cst.BaseStatement] | None,
]


@dataclass
class Splice:
    """The new builder suite for one write-back, as :data:`Entry` items."""

    model: GraphModel
    slots: Slots
    ctx: RenderContext
    config: cst.PartialParserConfig
    indent: str
    node_names: set[str]
    #: Breakpoint fixes for the graph's compile calls: renamed nodes (old -> new) and
    #: removed ones (see ``_breakpoints``).
    renames: dict[str, str] = field(default_factory=dict)
    drops: set[str] = field(default_factory=set)
    entries: list[Entry] = field(default_factory=list)
    #: Masked chain key -> its re-rendered text (see ``ParsedSource.unmask``).
    replacements: dict[str, str] = field(default_factory=dict)

    def run(self, stubs: list[cst.BaseStatement], stubs_at: int | None) -> None:
        """Plan every statement of the suite; ``stubs`` go before statement ``stubs_at``."""
        model, slots = self.model, self.slots
        by_stmt: dict[int, list[Item]] = {}
        for item in model.items:
            if item.container is None:
                by_stmt.setdefault(item.stmt_index, []).append(item)
        for index in range(len(model.suite.body)):
            if index == stubs_at:
                self.entries.extend((None, stub, None) for stub in stubs)
            items = by_stmt.get(index, [])
            for item in items:
                self._add_new(slots.before.get(id(item), []))
            container = model.containers.get(index)
            if container is not None:
                self._container(container, index)
            elif self._keeps(items):
                fix = self._fix_compile if index in model.compile_stmts else None
                self.entries.append((index, None, fix))
            if index == model.creation_index:
                self._add_new(slots.after_creation)
            for item in items:
                self._add_new(slots.after.get(id(item), []))

    def _fix_compile(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """``app = g.compile(...)`` with its breakpoint lists following renames/removals."""
        result = rewrite_breakpoints(stmt, self.renames, self.drops)
        assert isinstance(result, cst.BaseStatement)
        return result

    def _compile_link(self, container: Container) -> tuple[Link | None, bool]:
        """The chain's ``.compile(...)`` link with its breakpoints fixed, and whether that
        changed it."""
        link = container.compile_link
        if link is None or not (self.renames or self.drops):
            return link, False
        fixed = rewrite_breakpoints(link.call, self.renames, self.drops)
        blank = cst.Module(body=[])
        before, after = blank.code_for_node(link.call), blank.code_for_node(fixed)
        # ``call`` is ``body`` parsed after a ``_`` (and maybe parenthesized): cut the same
        # wrapping off the fixed code.
        head, found, tail = before.partition(link.body)
        if before == after or not found or not after.startswith(head) or not after.endswith(tail):
            return link, False
        assert isinstance(fixed, cst.Call)
        body = after[len(head) : len(after) - len(tail)]
        return dataclasses.replace(link, body=body, call=fixed), True

    def _keeps(self, items: list[Item]) -> bool:
        """Whether a statement of plain items stays: none deleted, no handle to a gone node."""
        return all(id(item) not in self.slots.deleted for item in items) and all(
            item.kind != "handle" or all(n in self.node_names for n in item.handles.values())
            for item in items
        )

    # new statements ----------------------------------------------------------------------

    def _add_new(self, items: list[Fresh]) -> None:
        for fresh in items:
            for stmt in self._new_statements(fresh):
                self.entries.append((None, stmt, None))

    def _new_statements(self, fresh: Fresh) -> list[cst.BaseStatement]:
        body = self.model.suite.body
        origin = fresh.origin
        if origin is not None and origin.container is None:
            return [body[origin.stmt_index]]
        texts = statements(fresh, self.ctx)
        made: list[cst.BaseStatement] = [
            cst.parse_statement(t + "\n", config=self.config) for t in texts
        ]
        inherit = self.slots.inherit.get(id(fresh))
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

    # chains ------------------------------------------------------------------------------

    def _container(self, container: Container, index: int) -> None:
        """A chain statement: kept, dropped (every link gone) or re-rendered."""
        units: list[ChainUnit] = []
        late: list[Fresh] = []
        compile_link, changed = self._compile_link(container)
        for piece in self._chain_pieces(container):
            if isinstance(piece, Fresh):
                changed = True
                self._fresh_units(piece, container, units, late)
            elif id(piece) in self.slots.deleted:
                changed = True
            else:
                assert piece.link is not None
                units.append(ChainUnit(piece.link.body, piece.link))
        if not changed:
            self.entries.append((index, None, None))
        elif units or container.creation:
            self._rewrite_chain(container, index, units, compile_link)
        # else: every link of this statement chain is gone: drop the statement
        self._add_new(late)

    def _chain_pieces(self, container: Container) -> Iterator[Fresh | Item]:
        """The chain's old links and the new items around them, in their new order."""
        slots = self.slots
        if container.creation:
            yield from slots.chain_start
        for item in self.model.items:
            if item.container is container:
                yield from slots.before.get(id(item), [])
                yield item
                yield from slots.after.get(id(item), [])
        if container.creation:
            yield from slots.chain_end

    def _fresh_units(
        self, fresh: Fresh, container: Container, units: list[ChainUnit], late: list[Fresh]
    ) -> None:
        """A new item as chain links, or in ``late`` if it must be a statement after it."""
        origin = fresh.origin
        if origin is not None and origin.container is not None and origin.link is not None:
            units.append(ChainUnit(origin.link.body, origin.link))
            return
        if origin is not None or fresh.handles:
            late.append(fresh)
            return
        inherit = self.slots.inherit.get(id(fresh))
        link = inherit.link if inherit is not None and inherit.container is container else None
        for number, body_text in enumerate(link_bodies(fresh, self.ctx)):
            units.append(ChainUnit(body_text, link if number == 0 else None))

    def _rewrite_chain(
        self,
        container: Container,
        index: int,
        units: list[ChainUnit],
        compile_link: Link | None,
    ) -> None:
        text = render_chain(container.chain, units, compile_link, self.indent)
        if container.chain.key:
            self.replacements[container.chain.key] = text
            self.entries.append((index, None, None))
            return
        old_expr = container.expr
        new_expr = cst.parse_expression(text)

        def change(stmt: cst.BaseStatement, old: cst.CSTNode = old_expr) -> cst.BaseStatement:
            result = stmt.deep_replace(old, new_expr)
            assert isinstance(result, cst.BaseStatement)
            return result

        self.entries.append((index, None, change))


def rebuild(entries: list[Entry]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A rewrite that gives a suite the body ``entries`` describe."""

    def rewrite(suite: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(suite, cst.Module | cst.IndentedBlock)
        updated = suite.body
        new_body: list[cst.BaseStatement] = []
        for old_index, stmt, change in entries:
            if old_index is not None:
                current = updated[old_index]
                new_body.append(change(current) if change is not None else current)
            elif stmt is not None:
                new_body.append(stmt)
        return suite.with_changes(body=new_body)

    return rewrite
