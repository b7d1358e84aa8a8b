"""The generation spec of a hole: everything the model is told about the node it fills.

Read from the file's CST, never by importing it: the node class as written (its ``In``/``Out``
ports, docstring and ``Hole(...)`` message), the schemas defined beside it (the state among
them), the file's imports (the tools and providers it can call) and its ``@tool`` functions,
plus any input/output examples the user gave. The same spec drives the contract tests.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from tensorsketch.canvas.exceptions import CanvasError

__all__ = ["Example", "HoleSpec", "NotAHoleError", "build_spec", "find_run", "node_class"]


class NotAHoleError(CanvasError):
    """The node named for filling is missing, or its ``run`` is not ``raise Hole(...)``."""


@dataclass(frozen=True)
class Example:
    """One input the node must map to (at least) the given output fields."""

    inputs: dict[str, Any]
    outputs: dict[str, Any]

    @classmethod
    def parse(cls, raw: str | dict[str, Any]) -> Example:
        """From ``{"in": {...}, "out": {...}}`` (a dict or its JSON text)."""
        data: Any = raw
        if isinstance(raw, str):
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                msg = f'an example must be JSON like {{"in": {{...}}, "out": {{...}}}}: {exc}'
                raise ValueError(msg) from None
        if (
            not isinstance(data, dict)
            or set(data) != {"in", "out"}
            or not isinstance(data["in"], dict)
            or not isinstance(data["out"], dict)
        ):
            msg = (
                f'an example must be an object with exactly an "in" and an "out" object '
                f"(the node's input fields and the output fields it must produce), got {raw!r}"
            )
            raise ValueError(msg)
        return cls(dict(data["in"]), dict(data["out"]))

    def to_dict(self) -> dict[str, Any]:
        return {"in": self.inputs, "out": self.outputs}


@dataclass(frozen=True)
class HoleSpec:
    """What a body for ``node`` in ``file`` must satisfy, and where it goes."""

    file: Path
    node: str
    source: str
    hole: str | None
    node_source: str
    signature: str
    docstring: str | None
    inputs: list[tuple[str, str]]
    outputs: list[tuple[str, str]]
    schemas: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)

    @property
    def source_sha(self) -> str:
        """The hash of the file the spec was read from (a write checks it is unchanged)."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def prompt(self) -> str:
        """The spec as the model reads it."""
        parts = [
            f"Write the body of `{self.node}.run` in the file {self.file.name}.",
            f"What it must do (its Hole message): {self.hole or '(none given)'}",
        ]
        if self.docstring:
            parts.append(f"The node's docstring:\n{self.docstring}")
        ports_in = ", ".join(f"{n}: {t}" for n, t in self.inputs) or "(none)"
        ports_out = ", ".join(f"{n}: {t}" for n, t in self.outputs) or "(none)"
        parts.append(f"Input ports (In): {ports_in}\nOutput ports (Out): {ports_out}")
        parts.append(f"The node class as it is now:\n```python\n{self.node_source}\n```")
        if self.schemas:
            joined = "\n\n".join(self.schemas)
            parts.append(
                "Schemas defined in the file (the graph state among them):\n"
                f"```python\n{joined}\n```"
            )
        if self.imports:
            parts.append(
                "The file's imports (use only these, or import inside the body):\n```python\n"
                + "\n".join(self.imports)
                + "\n```"
            )
        if self.tools:
            parts.append(
                "Tools defined in the file:\n```python\n" + "\n\n".join(self.tools) + "\n```"
            )
        if self.examples:
            lines = [
                f"- in {json.dumps(e.inputs)} -> out {json.dumps(e.outputs)}" for e in self.examples
            ]
            parts.append("Examples it must satisfy:\n" + "\n".join(lines))
        parts.append(
            "Reply with one ```python block holding the whole method, its signature exactly as "
            f"written:\n```python\n{self.signature}\n    ...\n```"
        )
        return "\n\n".join(parts)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def node_class(module: cst.Module, name: str) -> cst.ClassDef | None:
    """The top-level class ``name`` (the last definition wins, as at runtime)."""
    found = None
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
            found = stmt
    return found


def find_run(cls: cst.ClassDef) -> cst.FunctionDef | None:
    """The ``run`` method defined in the class body."""
    if not isinstance(cls.body, cst.IndentedBlock):
        return None
    found = None
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "run":
            found = stmt
    return found


def signature_of(fn: cst.FunctionDef) -> str:
    """``async def run(self, ctx: Context, inp: In) -> Out:`` as written, whitespace normalized."""
    params = " ".join(_code(fn.params).split()).rstrip(",").replace("( ", "(").replace(" )", ")")
    returns = f" -> {' '.join(_code(fn.returns.annotation).split())}" if fn.returns else ""
    prefix = "async " if fn.asynchronous else ""
    return f"{prefix}def {fn.name.value}({params}){returns}:"


def _docstring(body: cst.BaseSuite) -> str | None:
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None
    first = body.body[0]
    if isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1:
        expr = first.body[0]
        if isinstance(expr, cst.Expr) and isinstance(
            expr.value, cst.SimpleString | cst.ConcatenatedString
        ):
            value = expr.value.evaluated_value
            return inspect.cleandoc(value) if isinstance(value, str) else None
    return None


def _fields(cls: cst.ClassDef | None) -> list[tuple[str, str]]:
    if cls is None or not isinstance(cls.body, cst.IndentedBlock):
        return []
    out: list[tuple[str, str]] = []
    for stmt in cls.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    out.append((small.target.value, _code(small.annotation.annotation)))
    return out


def _inner(cls: cst.ClassDef, name: str) -> cst.ClassDef | None:
    if not isinstance(cls.body, cst.IndentedBlock):
        return None
    for stmt in cls.body.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
            return stmt
    return None


def _base_names(cls: cst.ClassDef) -> set[str]:
    names = set()
    for arg in cls.bases:
        value = arg.value
        if isinstance(value, cst.Attribute):
            names.add(value.attr.value)
        elif isinstance(value, cst.Name):
            names.add(value.value)
    return names


def _hole_message(run: cst.FunctionDef) -> tuple[bool, str | None]:
    if not isinstance(run.body, cst.IndentedBlock):
        return False, None
    stmts = list(run.body.body)
    if stmts and _docstring(run.body) is not None:
        stmts = stmts[1:]
    if not stmts or not isinstance(stmts[0], cst.SimpleStatementLine):
        return False, None
    small = stmts[0].body[0]
    if not isinstance(small, cst.Raise) or small.exc is None:
        return False, None
    exc = small.exc
    func = exc.func if isinstance(exc, cst.Call) else exc
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    if name != "Hole":
        return False, None
    if not isinstance(exc, cst.Call) or not exc.args:
        return True, None
    first = exc.args[0].value
    if isinstance(first, cst.SimpleString | cst.ConcatenatedString):
        value = first.evaluated_value
        if isinstance(value, str):
            return True, value
    return True, _code(first)


def build_spec(
    file: str | Path, node: str, examples: list[Example] | None = None, *, source: str | None = None
) -> HoleSpec:
    """Read the spec of hole ``node`` in ``file``.

    :raises NotAHoleError: the file has no node class ``node``, or its ``run`` is not a hole.
    :raises CanvasError: the file does not parse.
    """
    path = Path(file)
    text = path.read_bytes().decode("utf-8") if source is None else source
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        msg = (
            f"{path}: cannot parse it ({exc.message} at line {exc.raw_line}); fix the syntax first."
        )
        raise CanvasError(msg) from None
    cls = node_class(module, node)
    if cls is None:
        known = [s.name.value for s in module.body if isinstance(s, cst.ClassDef)]
        msg = f"{path} has no class {node!r}; its classes are: {', '.join(known) or '(none)'}."
        raise NotAHoleError(msg)
    run = find_run(cls)
    is_hole, message = _hole_message(run) if run is not None else (False, None)
    if run is None or not is_hole:
        msg = (
            f"{node} in {path} is not a hole: its `run` is not `raise Hole(...)`, so there is "
            "nothing to fill (list the holes with `tensorsketch holes`)."
        )
        raise NotAHoleError(msg)
    schemas: list[str] = []
    tools: list[str] = []
    imports: list[str] = []
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt is not cls and "Schema" in _base_names(stmt):
            schemas.append(_code(stmt).strip())
        elif isinstance(stmt, cst.FunctionDef) and any(
            "tool" in _code(d.decorator) for d in stmt.decorators
        ):
            tools.append(_code(stmt).strip())
        elif isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[0], cst.Import | cst.ImportFrom
        ):
            imports.append(_code(stmt).strip())
    return HoleSpec(
        file=path,
        node=node,
        source=text,
        hole=message,
        node_source=_code(cls).strip(),
        signature=signature_of(run),
        docstring=_docstring(cls.body),
        inputs=_fields(_inner(cls, "In")),
        outputs=_fields(_inner(cls, "Out")),
        schemas=schemas,
        imports=imports,
        tools=tools,
        examples=list(examples or []),
    )
