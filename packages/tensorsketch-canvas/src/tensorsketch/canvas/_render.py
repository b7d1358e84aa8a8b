"""Writing wiring as text, in each authoring style.

Only wiring that changed is rendered; everything else keeps its original text. The three
styles render the same ordered items, so whichever style a file uses, the edges come back in
the order the IR lists them — that is what keeps the round trip a plain list equality.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

from tensorsketch.canvas._source import Chain, Link
from tensorsketch.canvas._wiring import Item, ItemKind, NodeDecl
from tensorsketch.canvas.ir import END, LOOP_EXIT, START, EdgeIR, Style

__all__ = ["Fresh", "RenderContext", "render_chain", "snake_name"]

#: A fluent chain that fits on one line stays on one line up to this width.
LINE_WIDTH = 100


@dataclass
class Fresh:
    """An item of the new wiring: reused from the source (``origin``) or to be rendered."""

    kind: ItemKind
    nodes: list[NodeDecl] = field(default_factory=list)
    edges: list[EdgeIR] = field(default_factory=list)
    origin: Item | None = None
    handles: dict[str, str] = field(default_factory=dict)  # var -> node name it binds


@dataclass
class RenderContext:
    """What rendering needs to know about the file and the graph."""

    style: Style
    var: str | None
    quote: str
    handles: dict[str, str]  # node name -> handle variable
    needs: set[str] = field(default_factory=set)  # names the rendered code uses unimported

    def string(self, value: str) -> str:
        return py_string(value, self.quote)

    def name_ref(self, name: str) -> str:
        """A node in a builder call: ``"Billing"``, or ``START``/``END``."""
        if name == START:
            self.needs.add("START")
            return "START"
        if name == END:
            self.needs.add("END")
            return "END"
        return self.string(name)

    def handle_ref(self, name: str) -> str:
        """A node in ``>>`` wiring: its handle, ``g["Name"]``, or ``START``/``END``."""
        if name in (START, END):
            return self.name_ref(name)
        var = self.handles.get(name)
        if var is not None:
            return var
        return f"{self.var}[{self.string(name)}]"


def py_string(value: str, quote: str = '"') -> str:
    """A Python string literal for ``value`` using the file's preferred quote.

    Printable characters are written as they are; anything else (line breaks, U+2028, lone
    surrogates) as an escape, so the literal stays on one line and encodes as UTF-8.
    """
    parts = [quote]
    for char in value:
        if char in (quote, "\\"):
            parts.append("\\" + char)
        elif char.isprintable():
            parts.append(char)
        else:
            parts.append(repr(char)[1:-1])
    parts.append(quote)
    return "".join(parts)


def snake_name(name: str) -> str:
    """A handle variable name for a node: ``FetchDocs`` → ``fetch_docs``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    text = re.sub(r"\W", "_", text) or "node"
    if text[0].isdigit():
        text = f"n_{text}"
    if keyword.iskeyword(text):
        text = f"{text}_node"
    return text


# -- calls -----------------------------------------------------------------------------------


def _add_call(decl: NodeDecl, ctx: RenderContext) -> str:
    args = [decl.cls]
    if _needs_name(decl):
        args.append(f"name={ctx.string(decl.name)}")
    args.extend(decl.mappings)
    if decl.retry is not None:
        args.append(f"retry={decl.retry}")
    if decl.timeout is not None:
        args.append(f"timeout={decl.timeout}")
    if decl.cache is not None:
        args.append(f"cache={decl.cache}")
    if decl.defer:
        args.append("defer=True")
    if decl.destinations is not None:
        names = [ctx.name_ref(name) for name in decl.destinations]
        tail = "," if len(names) == 1 else ""
        args.append(f"destinations=({', '.join(names)}{tail})")
    return f"add({', '.join(args)})"


def _mapping(edges: list[EdgeIR], ctx: RenderContext) -> str:
    pairs = ", ".join(f"{ctx.string(e.label or '')}: {ctx.name_ref(e.target or '')}" for e in edges)
    return "{" + pairs + "}"


def _edge_calls(item: Fresh, ctx: RenderContext) -> list[str]:
    """The builder calls (``method(args)``) that write an edge item."""
    edges = item.edges
    first = edges[0]
    if first.kind == "sequential":
        return [
            f"edge({ctx.name_ref(e.source or '')}, {ctx.name_ref(e.target or '')})" for e in edges
        ]
    if first.kind == "join":
        sources = ", ".join(ctx.name_ref(name) for name in first.sources or [])
        return [f"edge([{sources}], {ctx.name_ref(first.target or '')})"]
    then = "" if first.then is None else f", then={ctx.name_ref(first.then)}"
    if first.kind == "map":
        source, node = ctx.name_ref(first.source or ""), ctx.name_ref(first.target or "")
        over, port = ctx.string(first.path or ""), ctx.string(first.label or "")
        return [f"map({source}, {node}, over={over}, item={port}{then})"]
    if first.kind == "parallel":
        nodes = ", ".join(ctx.name_ref(name) for name in first.sources or [])
        return [f"parallel({ctx.name_ref(first.source or '')}, [{nodes}]{then})"]
    source = ctx.name_ref(first.source or "")
    method = first.branch or "conditional"
    if first.kind == "dynamic":
        return [f"{method}({source}, {first.path})"]
    if first.branch == "loop":
        exit_edge = next((e for e in edges if e.label == LOOP_EXIT), None)
        call = f"loop({source}, until={first.path}"
        if exit_edge is not None and exit_edge.target != END:
            call += f", exit={ctx.name_ref(exit_edge.target or '')}"
        return [call + ")"]
    return [f"{method}({source}, {first.path}, {_mapping(edges, ctx)})"]


def link_bodies(item: Fresh, ctx: RenderContext) -> list[str]:
    """An item as fluent links (``.add(A)``, ``.edge(START, "A")``)."""
    if item.kind == "custom":
        code = item.edges[0].code or ""
        return [code if code.startswith(".") else f".{code}"]
    if item.kind in ("add", "nodes"):
        return [f".{_add_call(decl, ctx)}" for decl in item.nodes]
    return [f".{call}" for call in _edge_calls(item, ctx)]


def _routable(edges: list[EdgeIR]) -> bool:
    return (
        edges[0].kind == "conditional"
        and edges[0].branch == "conditional"
        and all(
            e.label is not None and e.label.isidentifier() and not keyword.iskeyword(e.label)
            for e in edges
        )
    )


def _nodes_entry(decl: NodeDecl, ctx: RenderContext) -> str:
    """One entry of ``g.nodes(...)``: the class, or ``("Name", Class)`` for a node named
    otherwise."""
    if not _needs_name(decl):
        return decl.cls
    return f"({ctx.string(decl.name)}, {decl.cls})"


def _needs_name(decl: NodeDecl) -> bool:
    """Whether the node must be named where it is added: a class names its node, a graph
    names its subgraph node (``derived_name``, when the file says which name that is;
    otherwise ``named`` asks for the name to be spelled out)."""
    if decl.derived_name is not None:
        return decl.name != decl.derived_name
    return decl.named or decl.name != decl.class_key


def statements(item: Fresh, ctx: RenderContext) -> list[str]:
    """An item as statements, in the file's statement or ``>>`` style."""
    var = ctx.var or "graph"
    if item.kind == "custom":
        code = item.edges[0].code or ""
        return [f"{var}{code}" if code.startswith(".") else code]
    if item.kind in ("add", "nodes"):
        if ctx.style != "operator" or not item.handles:
            return [f"{var}.{_add_call(decl, ctx)}" for decl in item.nodes]
        names = list(item.handles)
        if item.kind == "nodes":
            classes = ", ".join(_nodes_entry(decl, ctx) for decl in item.nodes)
            targets = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
            return [f"{targets} = {var}.nodes({classes})"]
        decl = item.nodes[0]
        return [f"{var}.{_add_call(decl, ctx)}", f"{names[0]} = {var}[{ctx.string(decl.name)}]"]
    edges = item.edges
    pseudo = all(e.source in (START, END) and e.target in (START, END) for e in edges)
    if ctx.style == "operator" and not pseudo:
        if edges[0].kind == "sequential":
            parts = [ctx.handle_ref(edges[0].source or "")]
            parts.extend(ctx.handle_ref(e.target or "") for e in edges)
            return [" >> ".join(parts)]
        if edges[0].kind == "join":
            sources = ", ".join(ctx.handle_ref(name) for name in edges[0].sources or [])
            return [f"[{sources}] >> {ctx.handle_ref(edges[0].target or '')}"]
        if _routable(edges):
            ctx.needs.add("Router")
            targets = ", ".join(f"{e.label}={ctx.handle_ref(e.target or '')}" for e in edges)
            source = ctx.handle_ref(edges[0].source or "")
            return [f"{source} >> Router({edges[0].path}, {targets})"]
    return [f"{var}.{call}" for call in _edge_calls(item, ctx)]


# -- chains ----------------------------------------------------------------------------------


def _split_trivia(trivia: str) -> tuple[str, str]:
    """``(rest of the previous line, leading lines of the next link)``.

    A closing parenthesis (before ``.compile()``) always stays with what follows it.
    """
    newline = trivia.find("\n")
    paren = _code_only(trivia).find(")")
    if paren >= 0 and (newline < 0 or paren < newline):
        return trivia[:paren], trivia[paren:]
    if newline < 0:
        return trivia, ""
    return trivia[: newline + 1], trivia[newline + 1 :]


def _code_only(text: str) -> str:
    """``text`` with comments blanked out (same length, so indices still match)."""
    return re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), text)


@dataclass
class ChainUnit:
    """One link of a chain being re-rendered: kept text, or a new body."""

    body: str
    link: Link | None = None  # the original link whose surrounding text to keep


def render_chain(
    chain: Chain, units: list[ChainUnit], compile_link: Link | None, indent_unit: str
) -> str:
    """The new text of a chain whose links changed.

    Kept links keep their comments and layout (links that shared a line still do when they
    stay neighbours); new links go one per line at the chain's indentation, or inline for a
    chain written on one line that still fits.
    """
    links = chain.links[:-1] if compile_link is not None else chain.links
    trivias = [link.trivia for link in links]
    compile_trivia = compile_link.trivia if compile_link is not None else ""
    prefix_code = _code_only(chain.prefix)
    regular = (
        prefix_code.count("(") <= 1
        and not any(ch in _code_only(t) for t in trivias for ch in "()\\")
        and not any(ch in _code_only(compile_trivia) for ch in "(\\")
    )
    multiline = "\n" in chain.prefix or any("\n" in t for t in (*trivias, compile_trivia))
    compile_text = compile_link.body if compile_link is not None else ""

    if regular and not multiline:
        flat = chain.prefix + chain.root_text + "".join(u.body for u in units)
        flat += compile_trivia + compile_text
        if len(chain.indent) + len(flat) + 8 <= LINE_WIDTH:
            return flat
    if not regular or not multiline:
        inner = chain.indent + indent_unit
        lines = [inner + chain.root_text, *(inner + u.body.strip() for u in units)]
        return "(\n" + "\n".join(lines) + "\n" + chain.indent + ")" + compile_text

    # Each link owns the comment lines above it and the rest of its own line.
    heads: dict[int, str] = {}
    previous: dict[int, int] = {}
    before: Link | None = None
    following: list[Link | None] = [*links[1:], compile_link] if links else []
    for each, nxt in zip(links, following, strict=True):
        heads[id(each)] = _split_trivia(nxt.trivia)[0] if nxt is not None else ""
        previous[id(each)] = id(before) if before is not None else 0
        before = each
    root_head = _split_trivia(links[0].trivia if links else compile_trivia)[0]
    last_head = heads[id(links[-1])] if links else root_head
    indent = _link_indent(chain, links, indent_unit)

    parts = [chain.prefix, chain.root_text, root_head]
    emitted = 0  # id of the link emitted last; 0 for the root
    for unit in units:
        link: Link | None = unit.link
        if link is not None:
            head, tail = _split_trivia(link.trivia)
            inline = "\n" not in link.trivia
            if inline and previous[id(link)] == emitted and not parts[-1].endswith("\n"):
                text = head + unit.body + heads[id(link)]
            else:
                text = (tail or indent) + unit.body + heads[id(link)]
        else:
            text = indent + unit.body + "\n"
        if (
            not parts[-1].endswith("\n")
            and text[:1] != ""
            and not (link is not None and "\n" not in link.trivia and previous[id(link)] == emitted)
        ):
            parts.append("\n")
        parts.append(text)
        emitted = id(link) if link is not None else -1
    result = "".join(parts)
    if last_head.endswith("\n") and not result.endswith("\n"):
        result += "\n"
    elif not last_head.endswith("\n") and result.endswith("\n"):
        result = result[:-1]
    compile_tail = _split_trivia(compile_trivia)[1] if compile_link is not None else ""
    return result + compile_tail + compile_text


def _link_indent(chain: Chain, links: list[Link], indent_unit: str) -> str:
    for link in links:
        tail = _split_trivia(link.trivia)[1]
        if tail and not tail.strip():
            return tail.rsplit("\n", 1)[-1]
        if tail:
            last = tail.rsplit("\n", 1)[-1]
            if not last.strip():
                return last
    if "\n" in chain.prefix:
        last = chain.prefix.rsplit("\n", 1)[-1]
        if not last.strip():
            return last
    return chain.indent + indent_unit
