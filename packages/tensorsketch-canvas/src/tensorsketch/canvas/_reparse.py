"""Parsing a file again after an edit without parsing again what the edit did not touch.

libcst builds (and validates) a Python object per token, so a 300-node file costs about half a
second to parse, and the Studio parses the file after every edit — to verify the write-back
and to answer with the new graph. An edit changes a few top-level statements (the builder, a
stub, an import line); the rest is text that was parsed a moment ago. So a module is parsed in
*chunks*, one per top-level statement with the blank and comment lines above it, and a chunk
whose exact text was parsed recently reuses that parse: libcst nodes are immutable, so two
modules can share them. The root and link texts of masked builder chains are kept the same way.

A chunk boundary is placed only where libcst's ownership of the lines in between is certain
(blank lines and column-0 comments belong to the next statement), and the joined module is
used only when every chunk agrees on the indentation and newline style libcst would detect for
the whole file; anything else is parsed whole. Either way the module renders to exactly the
text it was parsed from. The same text never shares a node twice within one module (identity
marks statements for the engine), and the caches are bounded (least recently used out).
"""

from __future__ import annotations

import ast
import itertools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

import libcst as cst

__all__ = ["clear", "parse_expressions", "parse_module"]

_NEWLINES = re.compile(r"\r\n|\r|\n")
#: Chunk parses kept: a few versions of a few thousand-statement files.
MAX_CHUNKS = 4096
#: Chain roots and link bodies kept.
MAX_PIECES = 16384
#: Below this many top-level statements a file is parsed whole (chunks pay off on big files).
MIN_CHUNKS = 8

_T = TypeVar("_T")
_lock = threading.Lock()
_chunks: OrderedDict[str, cst.Module] = OrderedDict()
_pieces: OrderedDict[str, cst.BaseExpression] = OrderedDict()


def clear() -> None:
    """Forget every kept parse (tests use it to compare a cold parse with a warm one)."""
    with _lock:
        _chunks.clear()
        _pieces.clear()


def _get(cache: OrderedDict[str, _T], key: str) -> _T | None:
    with _lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _put(cache: OrderedDict[str, _T], key: str, value: _T, limit: int) -> None:
    with _lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > limit:
            cache.popitem(last=False)


def _reuse(
    keys: Sequence[str],
    cache: OrderedDict[str, _T],
    limit: int,
    parse: Callable[[list[str]], list[_T] | None],
) -> list[_T] | None:
    """A value per key: kept ones reused (each at most once), the others parsed by one call."""
    values: list[_T | None] = []
    first_use: set[int] = set()
    seen: set[str] = set()
    for index, key in enumerate(keys):
        if key in seen:
            values.append(None)  # parsed again: no node twice in one module
            continue
        seen.add(key)
        first_use.add(index)
        values.append(_get(cache, key))
    missing = [i for i, value in enumerate(values) if value is None]
    if missing:
        fresh = parse([keys[i] for i in missing])
        if fresh is None:
            return None
        for i, value in zip(missing, fresh, strict=True):
            values[i] = value
            if i in first_use:
                _put(cache, keys[i], value, limit)
    return [value for value in values if value is not None]


# -- chain pieces ----------------------------------------------------------------------------


def parse_expressions(texts: Sequence[str]) -> list[cst.BaseExpression] | None:
    """Each text parsed as an expression (the unknown ones in one flat list, which is linear
    in libcst); ``None`` when they do not parse."""

    def parse(todo: list[str]) -> list[cst.BaseExpression] | None:
        try:
            parsed = cst.parse_expression("[\n" + ",\n".join(todo) + "\n]")
        except cst.ParserSyntaxError:
            return None
        if not isinstance(parsed, cst.List):  # pragma: no cover - a list literal is a List
            return None
        return [element.value for element in parsed.elements]

    return _reuse(texts, _pieces, MAX_PIECES, parse)


# -- module chunks ---------------------------------------------------------------------------


def parse_module(text: str, tree: ast.Module | None) -> cst.Module:
    """``cst.parse_module(text)``, reusing recent parses of unchanged top-level statements.

    ``tree`` is ``ast.parse(text)`` (``None`` when ast could not read it: parsed whole).
    """
    bounds = _bounds(text, tree) if tree is not None else None
    if bounds is not None:
        module = _joined([text[a:b] for a, b in itertools.pairwise(bounds)])
        if module is not None:
            return module
    return cst.parse_module(text)


def _bounds(text: str, tree: ast.Module) -> list[int] | None:
    """Offsets splitting ``text`` into chunks (first is 0, last is ``len(text)``)."""
    groups: list[tuple[int, int]] = []  # (first line, last line) of statements sharing lines
    for stmt in tree.body:
        decorators = getattr(stmt, "decorator_list", [])
        first = min([stmt.lineno, *(d.lineno for d in decorators)])
        last = stmt.end_lineno or stmt.lineno
        if groups and first <= groups[-1][1]:
            groups[-1] = (groups[-1][0], max(last, groups[-1][1]))
        else:
            groups.append((first, last))
    if len(groups) < MIN_CHUNKS:
        return None
    starts = [0] + [match.end() for match in _NEWLINES.finditer(text)]

    def line(number: int) -> str:
        end = starts[number] if number < len(starts) else len(text)
        return text[starts[number - 1] : end].rstrip("\r\n")

    bounds = [0]
    for (_, previous_last), (first, _) in itertools.pairwise(groups):
        if previous_last >= len(starts):
            return None
        trivia = (line(n) for n in range(previous_last + 1, first))
        if all(not content or content.startswith("#") for content in trivia):
            bounds.append(starts[previous_last])
    bounds.append(len(text))
    return bounds if len(bounds) > 2 else None


def _joined(pieces: list[str]) -> cst.Module | None:
    """The module of ``"".join(pieces)`` from one parse per piece, or ``None`` if in doubt."""

    def parse(todo: list[str]) -> list[cst.Module] | None:
        try:
            return [cst.parse_module(piece) for piece in todo]
        except cst.ParserSyntaxError:
            return None

    # The first piece holds the module header: it is parsed every time (and is small).
    head = parse(pieces[:1])
    rest = _reuse(pieces[1:], _chunks, MAX_CHUNKS, parse)
    if head is None or rest is None:
        return None
    modules = head + rest
    indent: str | None = None
    newline = modules[0].default_newline
    body: list[cst.BaseStatement] = list(modules[0].body)
    for number, (piece, module) in enumerate(zip(pieces, modules, strict=True)):
        if any(isinstance(stmt, cst.BaseCompoundStatement) for stmt in module.body):
            if indent is None:
                indent = module.default_indent
            elif module.default_indent != indent:
                return None
        if module.default_newline != newline and _NEWLINES.search(piece):
            return None
        if number == 0:
            continue
        if not module.body or (number < len(pieces) - 1 and module.footer):
            return None
        first, *others = module.body
        if module.header:
            first = first.with_changes(leading_lines=[*module.header, *first.leading_lines])
        body.append(first)
        body.extend(others)
    return modules[0].with_changes(
        body=body,
        footer=modules[-1].footer,
        default_indent=indent if indent is not None else modules[0].default_indent,
        has_trailing_newline=modules[-1].has_trailing_newline,
    )
