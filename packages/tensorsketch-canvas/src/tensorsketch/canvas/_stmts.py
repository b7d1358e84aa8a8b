"""Walking statements only, and rewriting a few of them, without visiting every expression.

A full libcst visitor over a 3,000-line file costs about a third of a second because it
touches every token; classes, graph builders and imports are all statements, so the engine
walks suites and compound statements and never descends into expressions. Rewrites go
through :func:`apply`, which only enters the nodes on the path to what it replaces.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import libcst as cst

__all__ = ["Located", "apply", "deep_recursion", "walk_statements"]

Suite = cst.Module | cst.IndentedBlock


@contextmanager
def deep_recursion(limit: int = 20_000) -> Iterator[None]:
    """Let libcst recurse through deeply nested trees (long chains, big expressions)."""
    old = sys.getrecursionlimit()
    if old < limit:
        sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@dataclass
class Located:
    """A statement with the suite it sits in, its index there and its ancestors."""

    stmt: cst.BaseStatement
    suite: Suite
    index: int
    function: str | None
    path: tuple[cst.CSTNode, ...]


def _child_suites(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    # Explicit attributes: libcst's generic ``children`` rebuilds the node and is slow.
    body = getattr(node, "body", None)
    if isinstance(body, cst.BaseSuite):
        yield body
    for name in ("handlers", "cases"):
        yield from getattr(node, name, ())
    for name in ("orelse", "finalbody"):
        child = getattr(node, name, None)
        if child is not None:
            yield child


def walk_statements(module: cst.Module) -> list[Located]:
    """Every statement of every suite, in source order, with where it sits (cached)."""
    cached = _CACHE.get(id(module))
    if cached is not None and cached[0] is module:
        return cached[1]
    found = list(_walk(module, None, (module,)))
    _CACHE.clear()  # only the latest module is worth keeping
    _CACHE[id(module)] = (module, found)
    return found


_CACHE: dict[int, tuple[cst.Module, list[Located]]] = {}


def _walk(suite: Suite, function: str | None, path: tuple[cst.CSTNode, ...]) -> Iterator[Located]:
    for index, stmt in enumerate(suite.body):
        yield Located(stmt, suite, index, function, path)
        if isinstance(stmt, cst.BaseCompoundStatement):
            inner = stmt.name.value if isinstance(stmt, cst.FunctionDef) else function
            for child, child_path in _suites_of(stmt, (*path, stmt)):
                yield from _walk(child, inner, child_path)


def _suites_of(
    node: cst.CSTNode, path: tuple[cst.CSTNode, ...]
) -> Iterator[tuple[cst.IndentedBlock, tuple[cst.CSTNode, ...]]]:
    for child in _child_suites(node):
        if isinstance(child, cst.IndentedBlock):
            yield child, (*path, child)
        elif isinstance(
            child,
            cst.Else
            | cst.Finally
            | cst.ExceptHandler
            | cst.ExceptStarHandler
            | cst.If
            | cst.MatchCase,
        ):
            yield from _suites_of(child, (*path, child))


class _Apply(cst.CSTTransformer):
    def __init__(
        self,
        allowed: set[int],
        replace: dict[int, Callable[[cst.CSTNode], cst.CSTNode]],
    ) -> None:
        super().__init__()
        self.allowed = allowed
        self.replace = replace

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.allowed

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode:
        rewrite = self.replace.get(id(original_node))
        return updated_node if rewrite is None else rewrite(updated_node)


def apply(
    module: cst.Module,
    rewrites: Sequence[tuple[tuple[cst.CSTNode, ...], Callable[[cst.CSTNode], cst.CSTNode]]],
) -> cst.Module:
    """Rewrite nodes given with their ancestor paths; ``fn(updated_node)`` returns the new node.

    Only the ancestors of rewritten nodes are entered. A rewrite of a suite receives the suite
    with its own descendants already rewritten, in the same statement positions.
    """
    allowed: set[int] = set()
    replace: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] = {}
    for path, fn in rewrites:
        allowed.update(id(node) for node in path)
        replace[id(path[-1])] = fn
    with deep_recursion():
        result = module.visit(_Apply(allowed, replace))
    assert isinstance(result, cst.Module)
    return result
