"""Parsing a source file for the engine: a libcst module plus pre-split builder chains.

Why not just ``libcst.parse_module``? Its parser is quadratic in the number of calls in one
method chain: a fluent ``Graph(S).add(...).edge(...)`` chain of 600 links takes about a second
alone. So before libcst sees the file, a fast ``ast`` pass finds every builder chain (and any
very long call chain) and swaps its text for a same-height placeholder name; each chain is
then split at its links, and all links are parsed together as one flat list, which is linear.
The wiring code reads chains from :class:`Chain` objects, and :meth:`ParsedSource.unmask`
puts the (original or rewritten) chain text back when code is generated.

If ``ast`` cannot parse the file (syntax newer than the running Python), nothing is masked and
libcst parses it whole; the engine works the same, just slower on huge chains.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tensorsketch.canvas import _reparse
from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas._stmts import deep_recursion, walk_statements
from tensorsketch.canvas.exceptions import SourceParseError

if TYPE_CHECKING:
    from tensorsketch.canvas._modules import ImportRef, Origin

__all__ = ["Chain", "Link", "ParsedSource", "deep_recursion", "parse_source"]

#: Chains rooted anywhere but ``Graph(...)`` are masked only from this many links on.
_LONG_CHAIN = 12
_NEWLINES = re.compile(r"\r\n|\r|\n")


@dataclass
class Link:
    """One ``.method(args)`` of a chain.

    ``trivia`` is the text between the previous element and the dot (whitespace, comments,
    sometimes a closing parenthesis); ``body`` runs from the dot to the closing parenthesis.
    ``call`` is ``body`` parsed as ``_.method(args)``.
    """

    method: str
    body: str
    trivia: str
    call: cst.Call


@dataclass
class Chain:
    """A masked call chain: ``prefix`` + ``root_text`` + each link's trivia and body."""

    key: str
    placeholder: str
    text: str
    prefix: str
    root: cst.BaseExpression
    root_text: str
    links: list[Link]
    indent: str
    line: int


@dataclass
class ParsedSource:
    """A parsed file: the (masked) libcst module, its chains and its class line numbers."""

    text: str
    module: cst.Module
    chains: dict[str, Chain] = field(default_factory=dict)
    class_lines: dict[int, int] = field(default_factory=dict)
    masked: str = ""
    top_lines: list[tuple[int, int]] | None = None  # (first line, statements) per ast line
    #: Where the file lives, so a subgraph imported from another module can be read (see
    #: ``_modules``); ``None`` for text with no file, whose imports are not followed.
    origin: Origin | None = None
    #: The names its top-level imports bind (``_modules.import_refs``), read once when needed.
    imports: dict[str, ImportRef] | None = field(default=None, repr=False, compare=False)

    def render(self, module: cst.Module) -> str:
        """The (masked) code of ``module``, a rewrite of this file's module.

        Top-level statements that are still the original objects are copied from the original
        text instead of regenerated: libcst's code generation is the slowest part of a
        write-back on a big file. The original text of every statement next to a change is
        checked against libcst's own rendering first; any doubt falls back to ``module.code``.
        """
        spans = self._spans()
        if spans is None:
            return _code(module, module)
        header, bodies, footer = spans
        old_body = self.module.body
        index_of = {id(stmt): index for index, stmt in enumerate(old_body)}
        kept: list[int | None] = []
        for stmt in module.body:
            index = index_of.get(id(stmt))
            kept.append(index if index is not None and old_body[index] is stmt else None)
        kept_set = {k for k in kept if k is not None}
        check = {i for i in range(len(old_body)) if i not in kept_set}
        for position, index in enumerate(kept):
            if index is None:
                for near in (position - 1, position + 1):
                    neighbour = kept[near] if 0 <= near < len(kept) else None
                    if neighbour is not None:
                        check.add(neighbour)
        for index in check:
            if bodies[index] != _code(self.module, old_body[index]):
                return _code(module, module)
        if module.header is not self.module.header or module.footer is not self.module.footer:
            return _code(module, module)
        parts = [header]
        for stmt, index in zip(module.body, kept, strict=True):
            parts.append(bodies[index] if index is not None else _code(module, stmt))
        parts.append(footer)
        return "".join(parts)

    def _spans(self) -> tuple[str, list[str], str] | None:
        """Original text of the header, each top-level statement and the footer."""
        if self.top_lines is None or not self.masked or not self.module.body:
            return None
        starts: list[int] = []
        lines = iter(self.top_lines)
        for stmt in self.module.body:
            count = len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
            entry = next(lines, None)
            if entry is None or entry[1] != count:
                return None
            starts.append(entry[0] - len(stmt.leading_lines))
        if next(lines, None) is not None:
            return None
        offsets = [0] + [match.end() for match in _NEWLINES.finditer(self.masked)]
        ends_with_newline = self.masked.endswith(("\n", "\r"))
        end_line = len(offsets) - len(self.module.footer) + (0 if ends_with_newline else 1)

        def at(line: int) -> int:
            return offsets[line - 1] if 0 < line <= len(offsets) else len(self.masked)

        bounds = [at(line) for line in starts] + [at(end_line)]
        if any(a > b for a, b in itertools.pairwise(bounds)):
            return None
        bodies = [self.masked[bounds[i] : bounds[i + 1]] for i in range(len(starts))]
        return self.masked[: bounds[0]], bodies, self.masked[bounds[-1] :]

    def chain(self, expr: cst.BaseExpression) -> Chain | None:
        """The chain an expression stands for, when it is a placeholder."""
        if isinstance(expr, cst.Name) and expr.value in self.chains:
            return self.chains[expr.value]
        return None

    def code(self, node: cst.CSTNode) -> str:
        """The original source text of ``node`` (chains restored), without leading lines."""
        if isinstance(node, cst.Name) and not node.lpar and node.value not in self.chains:
            return node.value  # the common case, without a code generation pass
        if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            node = node.with_changes(leading_lines=())
        try:
            text = self.module.code_for_node(node)
        except RecursionError:
            with deep_recursion():
                text = self.module.code_for_node(node)
        return self.unmask(text).strip()

    def unmask(self, text: str, replacements: dict[str, str] | None = None) -> str:
        """Put chain text back in place of placeholders (``replacements`` wins over originals)."""
        if not self.chains or "__tschain" not in text:
            return text
        for key, chain in self.chains.items():
            if chain.placeholder in text:
                new = (replacements or {}).get(key, chain.text)
                text = text.replace(chain.placeholder, new)
        return text

    def class_line(self, node: cst.ClassDef) -> int | None:
        return self.class_lines.get(id(node))


def parse_source(text: str, filename: str = "<source>") -> ParsedSource:
    """Parse ``text``; :class:`SourceParseError` says where the syntax error is."""
    try:
        tree: ast.Module | None = parse_python(text, filename=filename)
    except SyntaxError as exc:
        tree = None
        ast_error: SyntaxError | None = exc
    except ValueError as exc:  # null bytes
        msg = f"cannot parse {filename}: {exc}; extraction needs a readable Python file."
        raise SourceParseError(msg) from None
    else:
        ast_error = None

    chains: dict[str, Chain] = {}
    masked = text
    class_lines: list[int] | None = None
    if tree is not None:
        found, class_lines = _scan(tree, text)
        masked, chains = _mask_chains(text, found)
    try:
        with deep_recursion():
            module = _reparse.parse_module(masked, tree)
    except (cst.ParserSyntaxError, RecursionError) as exc:
        if ast_error is None:
            where = str(exc).splitlines()[0]
        elif ast_error.lineno is None:
            where = ast_error.msg
        else:
            where = f"line {ast_error.lineno}: {ast_error.msg}"
        msg = (
            f"cannot parse {filename} ({where}); fix the syntax error first — extraction reads "
            "any file that parses, even with undefined names or unfinished nodes."
        )
        raise SourceParseError(msg) from None
    parsed = ParsedSource(text=text, module=module, chains=chains, masked=masked)
    parsed.class_lines = _class_lines(module, class_lines)
    if tree is not None:
        parsed.top_lines = _top_lines(tree)
    return parsed


def _top_lines(tree: ast.Module) -> list[tuple[int, int]]:
    """For each source line starting top-level statements: (its first line, how many)."""
    found: list[tuple[int, int]] = []
    for stmt in tree.body:
        decorators = getattr(stmt, "decorator_list", [])
        first = min([stmt.lineno, *(d.lineno for d in decorators)])
        if found and found[-1][0] == stmt.lineno and not decorators:
            found[-1] = (found[-1][0], found[-1][1] + 1)
        else:
            found.append((first, 1))
    return found


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    with deep_recursion():
        return module.code_for_node(node)


# -- class line numbers ----------------------------------------------------------------------


def _class_lines(module: cst.Module, ast_lines: list[int] | None) -> dict[int, int]:
    classes = [loc.stmt for loc in walk_statements(module) if isinstance(loc.stmt, cst.ClassDef)]
    if ast_lines is not None and len(ast_lines) == len(classes):
        return {id(node): line for node, line in zip(classes, ast_lines, strict=True)}
    # Slow path (ast could not read the file): ask libcst for positions.
    with deep_recursion():
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
    return {id(node): positions[node].start.line for node in classes}


# -- masking chains --------------------------------------------------------------------------


class _Offsets:
    """Converts ast (line, utf-8 column) positions to string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        self.lines: list[str] = []
        pos = 0
        for match in _NEWLINES.finditer(text):
            self.lines.append(text[pos : match.start()])
            pos = match.end()
            self.starts.append(pos)
        self.lines.append(text[pos:])

    def __call__(self, line: int, col: int) -> int:
        content = self.lines[line - 1]
        if not content.isascii():
            col = len(content.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        return self.starts[line - 1] + col


def _is_graph_call(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "Graph") or (
        isinstance(func, ast.Attribute) and func.attr == "Graph"
    )


def _chain_parts(node: ast.expr) -> tuple[ast.expr, list[ast.Call]]:
    links: list[ast.Call] = []
    current = node
    while (
        isinstance(current, ast.Call)
        and isinstance(current.func, ast.Attribute)
        and not _is_graph_call(current)
    ):
        links.append(current)
        current = current.func.value
    links.reverse()
    return current, links


def _scan(
    tree: ast.Module, text: str
) -> tuple[list[tuple[ast.expr, ast.expr, list[ast.Call]]], list[int]]:
    """One walk over the ast: the chains to mask, and every class's line in source order.

    Only statements whose text could hold a chain — it names ``Graph`` or has at least
    ``_LONG_CHAIN`` dots — are walked down to their expressions; the others (node classes,
    mostly) only for the classes in them. The test is on the text, so it never misses one.
    """
    found: list[tuple[ast.expr, ast.expr, list[ast.Call]]] = []
    classes: list[tuple[int, int]] = []
    lines = _NEWLINES.split(text)
    statements: list[ast.stmt] = list(reversed(tree.body))
    while statements:
        stmt = statements.pop()
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
        segment = "\n".join(lines[first - 1 : stmt.end_lineno or stmt.lineno])
        if "Graph" in segment or segment.count(".") >= _LONG_CHAIN:
            _scan_node(stmt, found, classes)
            continue
        if isinstance(stmt, ast.ClassDef):
            classes.append((stmt.lineno, stmt.col_offset))
        inner: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list):
                inner.extend(block)
        for part in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
            inner.extend(part.body)
        statements.extend(reversed(inner))
    return found, [line for line, _ in sorted(classes)]


def _scan_node(
    root: ast.AST,
    found: list[tuple[ast.expr, ast.expr, list[ast.Call]]],
    classes: list[tuple[int, int]],
) -> None:
    stack: list[ast.AST] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            classes.append((node.lineno, node.col_offset))
        elif isinstance(node, ast.Call):
            chain_root, links = _chain_parts(node)
            if _is_graph_call(chain_root) or len(links) >= _LONG_CHAIN:
                found.append((node, chain_root, links))
                continue
            if links:
                # Not masked: look inside the root and every link's arguments only.
                stack.append(chain_root)
                for link in links:
                    stack.extend(link.args)
                    stack.extend(k.value for k in link.keywords)
                continue
        if isinstance(node, ast.JoinedStr):
            continue  # positions inside f-strings are not reliable on every Python
        stack.extend(ast.iter_child_nodes(node))


def _dot_before(text: str, start: int, end: int) -> int | None:
    """The offset of the last ``.`` in ``text[start:end]`` outside comments."""
    dot = None
    i = start
    while i < end:
        char = text[i]
        if char == "#":
            newline = text.find("\n", i, end)
            i = end if newline < 0 else newline
            continue
        if char == ".":
            dot = i
        elif not (char.isspace() or char in "()\\"):
            return None
        i += 1
    return dot


@dataclass
class _Pending:
    start: int
    end: int
    prefix: str
    root_text: str
    indent: str
    line: int
    parts: list[tuple[str, str, str]]


def _mask_chains(
    text: str, found: list[tuple[ast.expr, ast.expr, list[ast.Call]]]
) -> tuple[str, dict[str, Chain]]:
    offsets = _Offsets(text)
    token = "__tschain"
    while token in text:
        token += "_"
    pending: list[_Pending] = []
    for top, ast_root, ast_links in found:
        split = _split_chain(text, offsets, top, ast_root, ast_links)
        if split is not None:
            pending.append(split)
    if not pending:
        return text, {}
    pending.sort(key=lambda p: p.start)
    # Parse every root and link body in one flat list expression: linear in libcst (and
    # texts parsed recently, e.g. before the edit that wrote this file, are reused).
    pieces: list[str] = []
    for item in pending:
        pieces.append(f"({item.root_text})")
        pieces.extend(f"(_{body})" for _, _, body in item.parts)
    with deep_recursion():
        parsed = _reparse.parse_expressions(pieces)
    if parsed is None:
        return text, {}
    elements = iter(parsed)

    chains: dict[str, Chain] = {}
    out: list[str] = []
    cursor = 0
    for number, item in enumerate(pending):
        key = f"{token}{number}__"
        original = text[item.start : item.end]
        placeholder = f"({key}" + "\n" * len(_NEWLINES.findall(original)) + ")"
        root = next(elements)
        links: list[Link] = []
        for method, trivia, body in item.parts:
            call = next(elements)
            if not isinstance(call, cst.Call):  # pragma: no cover - bodies end in a call
                return text, {}
            links.append(Link(method=method, body=body, trivia=trivia, call=call))
        chains[key] = Chain(
            key=key,
            placeholder=placeholder,
            text=original,
            prefix=item.prefix,
            root=root,
            root_text=item.root_text,
            links=links,
            indent=item.indent,
            line=item.line,
        )
        out.append(text[cursor : item.start])
        out.append(placeholder)
        cursor = item.end
    out.append(text[cursor:])
    return "".join(out), chains


def _split_chain(
    text: str, offsets: _Offsets, top: ast.expr, root: ast.expr, links: list[ast.Call]
) -> _Pending | None:
    start = offsets(top.lineno, top.col_offset)
    end = offsets(top.end_lineno or top.lineno, top.end_col_offset or 0)
    root_start = offsets(root.lineno, root.col_offset)
    root_end = offsets(root.end_lineno or root.lineno, root.end_col_offset or 0)
    if not start <= root_start <= root_end <= end:
        return None
    parts: list[tuple[str, str, str]] = []
    previous = root_end
    for link in links:
        func = link.func
        if not isinstance(func, ast.Attribute):  # pragma: no cover - see _chain_parts
            return None
        attr_end = offsets(func.end_lineno or func.lineno, func.end_col_offset or 0)
        attr_start = attr_end - len(func.attr)
        if text[attr_start:attr_end] != func.attr:
            return None
        dot = _dot_before(text, previous, attr_start)
        if dot is None:
            return None
        link_end = offsets(link.end_lineno or link.lineno, link.end_col_offset or 0)
        parts.append((func.attr, text[previous:dot], text[dot:link_end]))
        previous = link_end
    if previous != end:
        return None
    line_text = offsets.lines[top.lineno - 1]
    indent = line_text[: len(line_text) - len(line_text.lstrip())]
    return _Pending(
        start=start,
        end=end,
        prefix=text[start:root_start],
        root_text=text[root_start:root_end],
        indent=indent,
        line=top.lineno,
        parts=parts,
    )
