"""Reading node classes: ``class X(Node)`` with its typed ports and whether it is a hole.

Only the interface is read — ``In``/``Out`` fields and the annotation text as written — plus
one fact about the body: whether ``run`` starts with ``raise Hole(...)``. Nothing is imported,
so undefined names and missing imports do not matter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from tensorsketch.canvas._source import ParsedSource
from tensorsketch.canvas._stmts import walk_statements
from tensorsketch.canvas.ir import END, START, Port

__all__ = ["NodeClass", "body_statements", "find_node_classes", "schema_fields", "string_value"]


@dataclass
class NodeClass:
    """What the engine knows about one node class in the file."""

    name: str
    node: cst.ClassDef
    inputs: list[Port]
    outputs: list[Port]
    has_hole: bool
    hole: str | None
    line: int | None
    in_def: cst.ClassDef | None
    out_def: cst.ClassDef | None
    #: ``destinations = (...)`` as node names (``END`` as ``"__end__"``), in the order
    #: declared; ``None`` when the class (and its node bases in the file) declares none, or
    #: declares them as something other than a literal tuple or list of names.
    destinations: list[str] | None = None


def string_value(expr: cst.BaseExpression) -> str | None:
    """The value of a plain string literal (implicit concatenation included), else ``None``."""
    if isinstance(expr, cst.SimpleString) and "\\" not in expr.value:
        prefix = expr.prefix.lower()
        if prefix in ("", "r", "u"):  # no escapes to process: skip libcst's literal_eval
            quote = expr.quote
            return expr.value[len(prefix) + len(quote) : -len(quote)]
    if isinstance(expr, cst.SimpleString | cst.ConcatenatedString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def body_statements(body: cst.BaseSuite) -> list[cst.BaseSmallStatement | cst.BaseStatement]:
    """The statements of a suite, small statements of one-liners flattened."""
    if isinstance(body, cst.SimpleStatementSuite):
        return list(body.body)
    items: list[cst.BaseSmallStatement | cst.BaseStatement] = []
    for stmt in body.body:
        items.append(stmt)
    return items


def _base_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _small(stmt: cst.BaseSmallStatement | cst.BaseStatement) -> Sequence[cst.BaseSmallStatement]:
    if isinstance(stmt, cst.SimpleStatementLine):
        return stmt.body
    if isinstance(stmt, cst.BaseSmallStatement):
        return [stmt]
    return []


def schema_fields(
    src: ParsedSource, schema: cst.ClassDef | None
) -> list[tuple[Port, cst.BaseSmallStatement | cst.BaseStatement]]:
    """The annotated fields of an ``In``/``Out`` class, with the statement declaring each."""
    if schema is None:
        return []
    fields: list[tuple[Port, cst.BaseSmallStatement | cst.BaseStatement]] = []
    for stmt in body_statements(schema.body):
        for small in _small(stmt):
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                port = Port(small.target.value, src.code(small.annotation.annotation))
                fields.append((port, stmt))
    return fields


def _hole(src: ParsedSource, run: cst.FunctionDef | None) -> tuple[bool, str | None]:
    if run is None:
        return False, None
    statements = body_statements(run.body)
    smalls: list[cst.BaseSmallStatement] = []
    for stmt in statements:
        parts = list(_small(stmt))
        if not parts:
            break
        smalls.extend(parts)
    # Skip a docstring, then the first statement must be `raise Hole(...)`.
    if smalls and isinstance(smalls[0], cst.Expr) and string_value(smalls[0].value) is not None:
        smalls = smalls[1:]
    if not smalls or not isinstance(smalls[0], cst.Raise) or smalls[0].exc is None:
        return False, None
    exc = smalls[0].exc
    if _base_name(exc) == "Hole" and not isinstance(exc, cst.Call):
        return True, None
    if not isinstance(exc, cst.Call) or _base_name(exc.func) != "Hole":
        return False, None
    if not exc.args:
        return True, None
    first = exc.args[0].value
    value = string_value(first)
    return True, value if value is not None else src.code(first)


def _destinations(stmt: cst.BaseSmallStatement | cst.BaseStatement) -> list[str] | bool | None:
    """``destinations = (...)`` in a class body: the names, ``None`` when it is there but not
    literal, ``False`` when the statement is something else."""
    for small in _small(stmt):
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target, value = small.target, small.value
        else:
            continue
        if not (isinstance(target, cst.Name) and target.value == "destinations"):
            continue
        if not isinstance(value, cst.Tuple | cst.List):
            return None
        names: list[str] = []
        for element in value.elements:
            if isinstance(element, cst.StarredElement):
                return None
            name = string_value(element.value)
            if name is None and _base_name(element.value) == "END":
                name = END
            if name is None or name == START:
                return None
            names.append(name)
        return names
    return False


def find_node_classes(src: ParsedSource) -> dict[str, NodeClass]:
    """Every ``Node`` subclass in the file by name (a later definition replaces an earlier one).

    A class counts as a node when a base is ``Node`` (or ``something.Node``) or another node
    class defined earlier in the same file.
    """
    found: dict[str, NodeClass] = {}
    for located in walk_statements(src.module):
        cls = located.stmt
        if not isinstance(cls, cst.ClassDef):
            continue
        bases = {_base_name(arg.value) for arg in cls.bases if arg.keyword is None}
        if "Node" not in bases and not (bases & found.keys()):
            continue
        in_def = out_def = None
        run = None
        declared: list[str] | bool | None = False
        for stmt in body_statements(cls.body):
            found_here = _destinations(stmt)
            if found_here is not False:
                declared = found_here
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == "In":
                in_def = stmt
            elif isinstance(stmt, cst.ClassDef) and stmt.name.value == "Out":
                out_def = stmt
            elif isinstance(stmt, cst.FunctionDef) and stmt.name.value == "run":
                run = stmt
        has_hole, hole = _hole(src, run)
        if declared is False:  # inherited from a node base in the file, if one declares them
            parents = [found[b] for b in bases if b in found]
            declared = next((p.destinations for p in parents if p.destinations), None)
        found[cls.name.value] = NodeClass(
            name=cls.name.value,
            node=cls,
            inputs=[port for port, _ in schema_fields(src, in_def)],
            outputs=[port for port, _ in schema_fields(src, out_def)],
            has_hole=has_hole,
            hole=hole,
            line=src.class_line(cls),
            in_def=in_def,
            out_def=out_def,
            destinations=list(declared) if isinstance(declared, list) and declared else None,
        )
    return found
