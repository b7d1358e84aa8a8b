"""Where a routing function without a mapping can send a run, read from its code.

``conditional("Classify", route)`` names no targets: the engine learns them when ``route``
returns. The canvas can still show them when the function's own code spells them out:
``return "Tech"``, ``return {"billing": "Billing"}.get(intent, "Fallback")``, ``return END``,
``[Send("Worker", x) for x in items]``, or a ``-> Literal["A", "B"]`` annotation. Reading is
purely syntactic and all-or-nothing: one ``return`` the reader does not understand (a
variable, a call, an f-string) and the answer is "unknown", so the canvas never draws a route
the code might not take.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from tensorsketch.canvas._classes import string_value
from tensorsketch.canvas.ir import END

__all__ = ["module_functions", "possible_routes"]

#: Stop reading a routing function with more returns than this (generated code): unknown.
_MAX_RETURNS = 64


def module_functions(module: cst.Module) -> dict[str, cst.FunctionDef | None]:
    """The module-level ``def`` of each name; ``None`` for a name defined more than once
    (which one runs depends on the code around them)."""
    found: dict[str, cst.FunctionDef | None] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            name = stmt.name.value
            found[name] = None if name in found else stmt
    return found


def possible_routes(
    functions: dict[str, cst.FunctionDef | None], path: str | None, nodes: set[str]
) -> list[str] | None:
    """The nodes (or ``END``) the routing function ``path`` can return, in first-seen order.

    ``functions`` is the file's :func:`module_functions`. ``None`` when that cannot be read
    from the code, when it names anything that is not one of ``nodes`` or ``END`` (the route
    returns something else, a typo, or a mapping key), or when it returns ``START``.
    """
    if path is None:
        return None
    try:
        expr = cst.parse_expression(path)
    except cst.ParserSyntaxError:
        return None
    found: list[str | None] | None
    if isinstance(expr, cst.Lambda):
        found = _values(expr.body)
    elif isinstance(expr, cst.Name):
        func = functions.get(expr.value)
        found = None if func is None else _function_values(func)
    else:
        return None
    if not found or None in found:
        return None
    names = [name for name in dict.fromkeys(found) if name is not None]
    if any(name not in nodes and name != END for name in names):
        return None
    return names


def _function_values(func: cst.FunctionDef) -> list[str | None] | None:
    annotated = _literal_annotation(func.returns)
    if annotated is not None:
        return list(annotated)
    values: list[str | None] = []
    for count, returned in enumerate(_returns(func.body), start=1):
        if returned is None or count > _MAX_RETURNS:
            return None
        got = _values(returned)
        if got is None:
            return None
        values.extend(got)
    return values


def _literal_annotation(returns: cst.Annotation | None) -> list[str | None] | None:
    """The strings of a ``-> Literal["A", "B"]`` annotation (also inside ``list[...]``)."""
    if returns is None:
        return None
    expr = returns.annotation
    if isinstance(expr, cst.Subscript) and _name_of(expr.value) == "list":
        inner = expr.slice[0].slice if len(expr.slice) == 1 else None
        expr = inner.value if isinstance(inner, cst.Index) else expr
    if not (isinstance(expr, cst.Subscript) and _name_of(expr.value) == "Literal"):
        return None
    out: list[str | None] = []
    for element in expr.slice:
        index = element.slice
        if not isinstance(index, cst.Index):
            return None
        out.append(_constant(index.value))
    return out


def _returns(body: cst.BaseSuite) -> list[cst.BaseExpression | None]:
    """Every ``return`` value of a function body, skipping nested functions and classes
    (``None`` for a bare ``return``)."""
    found: list[cst.BaseExpression | None] = []

    class Visitor(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> bool:
            found.append(node.value)
            return False

    body.visit(Visitor())
    return found


def _values(expr: cst.BaseExpression) -> list[str | None] | None:
    """What one returned expression can evaluate to, as node names; ``None``: unknown."""
    constant = _constant(expr)
    if constant is not None:
        return [constant]
    if isinstance(expr, cst.IfExp):
        return _union(expr.body, expr.orelse)
    if isinstance(expr, cst.BooleanOperation):
        return _union(expr.left, expr.right)
    if isinstance(expr, cst.List | cst.Tuple | cst.Set):
        return _elements(el.value for el in expr.elements if not isinstance(el, cst.StarredElement))
    if isinstance(expr, cst.ListComp | cst.GeneratorExp | cst.SetComp):
        return _values(expr.elt)
    if isinstance(expr, cst.Call):
        return _call_values(expr)
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Dict):
        return _dict_values(expr.value)
    return None


def _union(*exprs: cst.BaseExpression) -> list[str | None] | None:
    return _elements(exprs)


def _elements(exprs: Iterable[cst.BaseExpression]) -> list[str | None] | None:
    out: list[str | None] = []
    for expr in exprs:
        got = _values(expr)
        if got is None:
            return None
        out.extend(got)
    return out


def _call_values(call: cst.Call) -> list[str | None] | None:
    """``Send("Worker", ...)``: its node; ``{...}.get(key, default)``: the values and default."""
    if _name_of(call.func) == "Send" and call.args:
        name = _constant(call.args[0].value)
        return None if name is None else [name]
    func = call.func
    if (
        isinstance(func, cst.Attribute)
        and func.attr.value == "get"
        and isinstance(func.value, cst.Dict)
        and 1 <= len(call.args) <= 2
    ):
        values = _dict_values(func.value)
        if values is None:
            return None
        if len(call.args) == 1:
            return [*values, None]  # .get(key) can return None: not a route
        default = _values(call.args[1].value)
        return None if default is None else [*values, *default]
    return None


def _dict_values(mapping: cst.Dict) -> list[str | None] | None:
    values: list[str | None] = []
    for element in mapping.elements:
        if not isinstance(element, cst.DictElement):
            return None  # a ** spread
        got = _values(element.value)
        if got is None:
            return None
        values.extend(got)
    return values


def _constant(expr: cst.BaseExpression) -> str | None:
    """A string literal's value, or ``END`` for the name ``END`` (as ``__end__``)."""
    value = string_value(expr)
    if value is not None:
        return value
    if _name_of(expr) == "END":
        return END
    return None


def _name_of(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None
