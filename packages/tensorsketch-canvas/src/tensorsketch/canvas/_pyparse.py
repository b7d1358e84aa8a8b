"""Python source to ``ast`` trees, one parse at a time in the whole process.

CPython 3.11 keeps the AST converter's recursion depth in state that every thread shares
(cpython issues 95185 and 106905). When a garbage-collector finalizer lets another thread
run in the middle of a parse and that thread parses too, one of the two fails with
``SystemError: AST constructor recursion depth mismatch``. The Studio parses in worker
threads while the app or test that serves it may parse in its own, so every parse the
canvas makes goes through :func:`parse_python`.
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

__all__ = ["parse_python"]

#: Re-entrant: a finalizer that parses, run by the collector inside a parse on its own
#: thread, must not hang that thread (CPython may still fail such a pair with the error
#: above; a lock cannot help a thread against itself).
_ONE_PARSE_AT_A_TIME = threading.RLock()


@overload
def parse_python(text: str, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse_python(text: str, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
def parse_python(
    text: str, filename: str = "<unknown>", mode: Literal["exec", "eval"] = "exec"
) -> ast.Module | ast.Expression:
    """``ast.parse(text, filename, mode)``, never beside another parse in this process."""
    with _ONE_PARSE_AT_A_TIME:
        tree = ast.parse(text, filename=filename, mode=mode)
    assert isinstance(tree, (ast.Module, ast.Expression))
    return tree
