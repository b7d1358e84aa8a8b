"""A candidate body: read from the model's reply, checked against the hole, spliced in.

The reply must hold one ``run`` method whose signature is the hole's, word for word; the
body replaces the hole's body through the CST, so every other byte of the file — comments,
formatting, the other nodes — is the original's. Nothing here imports or runs the code.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import libcst as cst

from tensorsketch.canvas.fill.spec import HoleSpec, find_run, node_class, signature_of

__all__ = ["Candidate", "parse_reply", "splice"]

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Candidate:
    """The ``run`` method a reply proposes (its text), or why the reply has none usable."""

    code: str
    problems: list[str]


def _method_text(reply: str) -> str | None:
    blocks = _FENCE.findall(reply)
    for block in [*blocks, reply]:
        if re.search(r"\bdef\s+run\b", block):
            return textwrap.dedent(block).strip() + "\n"
    return None


def _run_def(code: str) -> tuple[cst.FunctionDef | None, str | None]:
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as exc:
        return None, f"the method does not parse: {exc.message} (line {exc.raw_line} of the method)"
    defs = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "run"]
    others = [
        s for s in module.body if not (isinstance(s, cst.FunctionDef) and s.name.value == "run")
    ]
    if len(defs) != 1:
        return None, f"the reply must hold exactly one `def run(...)` method (found {len(defs)})"
    if others:
        return None, (
            "the reply must hold only the `run` method; put imports and helpers inside its "
            "body, so nothing else in the file changes"
        )
    return defs[0], None


def _raises_hole(fn: cst.FunctionDef) -> bool:
    code = cst.Module(body=[fn]).code
    return re.search(r"\braise\s+Hole\b", code) is not None


def parse_reply(spec: HoleSpec, reply: str) -> Candidate:
    """The candidate in ``reply``, with what makes it unusable before any check runs: it does
    not parse, holds more than the method, changes ``run``'s signature, or is still a hole."""
    code = _method_text(reply)
    if code is None:
        return Candidate(
            reply, ["the reply holds no `def run(...)` method: answer with it in a ```python block"]
        )
    fn, problem = _run_def(code)
    if fn is None:
        return Candidate(code, [problem or "no `run` method in the reply"])
    problems = []
    got = signature_of(fn)
    if got != spec.signature:
        problems.append(
            f"`run` must keep its signature exactly: expected `{spec.signature}`, got `{got}`"
        )
    if _raises_hole(fn):
        problems.append("the body still raises Hole: write the code that does the work")
    return Candidate(code, problems)


class _Replace(cst.CSTTransformer):
    def __init__(self, target: cst.FunctionDef, body: cst.BaseSuite) -> None:
        self.target = target
        self.body = body

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        if original_node is self.target:
            return updated_node.with_changes(body=self.body)
        return updated_node


def splice(spec: HoleSpec, code: str) -> str:
    """``spec.source`` with the hole's body replaced by the body of ``code``'s ``run``.

    The hole's own docstring stays when the new body has none. Only the body changes.
    """
    module = cst.parse_module(spec.source)
    cls = node_class(module, spec.node)
    assert cls is not None
    target = find_run(cls)
    assert target is not None
    fn, problem = _run_def(code)
    if fn is None:
        raise ValueError(problem)
    new_body = fn.body
    old_body = target.body
    if (
        isinstance(old_body, cst.IndentedBlock)
        and isinstance(new_body, cst.IndentedBlock)
        and _is_docstring(old_body.body[0])
        and not _is_docstring(new_body.body[0])
    ):
        new_body = new_body.with_changes(body=[old_body.body[0], *new_body.body])
    if isinstance(old_body, cst.IndentedBlock) and isinstance(new_body, cst.IndentedBlock):
        # Keep the file's own indentation of the hole's block.
        new_body = new_body.with_changes(indent=old_body.indent, header=old_body.header)
    return module.visit(_Replace(target, new_body)).code


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
