"""Which port types the canvas writes into a class body: annotations, never code.

A port type becomes ``name: <type>`` in an ``In``/``Out`` class, and the class body runs when
the module is imported (the debugger imports it; pydantic evaluates string forward references).
So a type is accepted only when every part of it is annotation-shaped: names and dotted names,
subscripts, ``|`` unions, literals, and the ``[...]``/``...`` that ``Callable`` and ``tuple``
take. Everything else — calls, lambdas, ``:=``, comprehensions, f-strings, operators other than
``|``, dunder names — is refused with the reason. The check walks the parsed expression and
whitelists node types, so a shape nobody thought of is refused too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from tensorsketch.canvas._pyparse import parse_python

__all__ = ["annotation_problem"]

#: What a string constant may be outside ``Literal[...]``: a forward reference, itself checked.
_LITERAL_HEADS = frozenset({"Literal", "typing.Literal", "typing_extensions.Literal"})
#: ``Annotated[T, metadata...]``: the metadata must be literals.
_ANNOTATED_HEADS = frozenset({"Annotated", "typing.Annotated", "typing_extensions.Annotated"})
_MAX_LENGTH = 500


def annotation_problem(text: str) -> str | None:
    """Why ``text`` is not a type annotation the canvas may write, or ``None`` when it is."""
    if len(text) > _MAX_LENGTH:
        return f"it is {len(text)} characters long; a port type is at most {_MAX_LENGTH}"
    try:
        tree = parse_python(text.strip(), mode="eval")
    except SyntaxError:
        return "it is not a Python expression"
    return _problem(tree.body)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` as text when ``node`` is a plain (dotted) name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _problem(node: ast.expr, *, literal: bool = False) -> str | None:
    if isinstance(node, ast.Name | ast.Attribute):
        name = _dotted(node)
        if name is None:
            return "an attribute is read off something that is not a name (e.g. a call)"
        if any(part.startswith("__") for part in name.split(".")):
            return f"{name!r} names a dunder; a type is a class name like 'str' or 'list[str]'"
        return None
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str) and not literal:
            # a forward reference: pydantic evaluates it, so its text is checked the same way
            inner = annotation_problem(value)
            return None if inner is None else f"the forward reference {value!r}: {inner}"
        if value is None or value is Ellipsis or isinstance(value, str | bytes | bool | int):
            return None
        return f"{value!r} is not a type"
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, ast.BitOr):
            return "only '|' combines types"
        return _problem(node.left) or _problem(node.right)
    if isinstance(node, ast.Subscript):
        head = _dotted(node.value)
        if head is None:
            return "only a (dotted) name may be subscripted, e.g. 'list[str]'"
        inner = _problem(node.value)
        if inner is not None:
            return inner
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head in _ANNOTATED_HEADS and items:
            return _problem(items[0]) or _first(_problem(i, literal=True) for i in items[1:])
        return _first(_problem(i, literal=head in _LITERAL_HEADS) for i in items)
    if isinstance(node, ast.List):  # Callable[[int, str], bool]
        return _first(_problem(item) for item in node.elts)
    if (  # Literal[-1]
        literal
        and isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return None
    return f"{type(node).__name__.lower()} expressions are code, not a type"


def _first(problems: Iterable[str | None]) -> str | None:
    return next((p for p in problems if p is not None), None)
