"""Writing node interfaces: stubs for nodes the canvas created, ports of unfinished nodes.

These are the only places the engine writes code outside the wiring. A stub is a typed hole;
ports are only ever changed on a node that is still a hole, because an implemented body may
depend on them.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from tensorsketch.canvas._classes import NodeClass, body_statements, schema_fields
from tensorsketch.canvas._render import py_string
from tensorsketch.canvas._source import ParsedSource
from tensorsketch.canvas.ir import NodeIR, Port

__all__ = ["STUB_NAMES", "edit_ports", "stub_text"]

#: Names a generated stub refers to.
STUB_NAMES = ("Context", "Hole", "Node", "Schema")


def _schema_text(name: str, ports: Sequence[Port], indent: str) -> str:
    body = [f"{indent}{p.name}: {p.type}" for p in ports] or [f"{indent}pass"]
    return "\n".join([f"class {name}(Schema):", *body]) + "\n"


def _schema_lines(name: str, ports: Sequence[Port], indent: str) -> list[str]:
    return [indent + line for line in _schema_text(name, ports, indent).splitlines()]


def stub_text(node: NodeIR, indent: str, quote: str) -> str:
    """An idiomatic ``class X(Node)`` whose body is a hole, for a node the canvas created."""
    message = py_string(node.hole, quote) if node.hole is not None else ""
    lines = [
        f"class {node.cls}(Node):",
        *_schema_lines("In", node.inputs, indent),
        "",
        *_schema_lines("Out", node.outputs, indent),
        "",
        f"{indent}async def run(self, ctx: Context, inp: In) -> Out:",
        f"{indent}{indent}raise Hole({message})",
    ]
    return "\n".join(lines) + "\n"


def _field(port: Port, config: cst.PartialParserConfig) -> cst.BaseStatement:
    return cst.parse_statement(f"{port.name}: {port.type}\n", config=config)


def _edit_schema(
    src: ParsedSource,
    schema: cst.ClassDef,
    ports: Sequence[Port],
    config: cst.PartialParserConfig,
) -> cst.ClassDef:
    fields = schema_fields(src, schema)
    by_port = {(p.name, p.type): stmt for p, stmt in fields}
    field_stmts = {id(stmt) for _, stmt in fields}
    statements = body_statements(schema.body)
    first = next((i for i, s in enumerate(statements) if id(s) in field_stmts), None)
    head = statements if first is None else statements[:first]
    tail = [] if first is None else [s for s in statements[first:] if id(s) not in field_stmts]
    placeholder = [
        s
        for s in head
        if isinstance(s, cst.SimpleStatementLine)
        and len(s.body) == 1
        and (
            isinstance(s.body[0], cst.Pass)
            or (isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value, cst.Ellipsis))
        )
    ]
    new_fields: list[cst.BaseStatement] = []
    for port in ports:
        kept = by_port.pop((port.name, port.type), None)
        new_fields.append(kept if isinstance(kept, cst.BaseStatement) else _field(port, config))
    body: list[cst.BaseStatement] = []
    for stmt in [*head, *new_fields, *tail]:
        if not isinstance(stmt, cst.BaseStatement):
            stmt = cst.SimpleStatementLine(body=[stmt])
        if ports and any(stmt is p for p in placeholder):
            continue
        body.append(stmt)
    if not body:
        body = [cst.SimpleStatementLine(body=[cst.Pass()])]
    return schema.with_changes(body=cst.IndentedBlock(body=body))


def edit_ports(
    src: ParsedSource,
    cls: NodeClass,
    node: NodeIR,
    config: cst.PartialParserConfig,
    indent: str,
) -> cst.ClassDef:
    """``cls`` with its ``In``/``Out`` fields set to the node's ports (a hole node only)."""
    replacements: dict[int, cst.BaseStatement] = {}
    additions: list[cst.BaseStatement] = []
    for name, schema, ports, current in (
        ("In", cls.in_def, node.inputs, cls.inputs),
        ("Out", cls.out_def, node.outputs, cls.outputs),
    ):
        if ports == current:
            continue
        if schema is None:
            text = _schema_text(name, ports, indent)
            additions.append(cst.parse_statement(text, config=config))
        else:
            replacements[id(schema)] = _edit_schema(src, schema, ports, config)
    statements = list(body_statements(cls.node.body))
    new_body: list[cst.BaseStatement] = []
    for stmt in statements:
        if not isinstance(stmt, cst.BaseStatement):
            stmt = cst.SimpleStatementLine(body=[stmt])
        new_body.append(replacements.get(id(stmt), stmt))
    if additions:
        at = next(
            (i for i, s in enumerate(new_body) if isinstance(s, cst.FunctionDef)), len(new_body)
        )
        new_body[at:at] = additions
        # A blank line between the new classes and whatever follows them, as in a stub.
        for i in range(max(at, 1), min(at + len(additions) + 1, len(new_body))):
            stmt = new_body[i]
            if isinstance(stmt, cst.SimpleStatementLine | cst.BaseCompoundStatement) and not (
                stmt.leading_lines
            ):
                new_body[i] = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    if isinstance(cls.node.body, cst.IndentedBlock):
        return cls.node.with_changes(body=cls.node.body.with_changes(body=new_body))
    return cls.node.with_changes(body=cst.IndentedBlock(body=new_body))
