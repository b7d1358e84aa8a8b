"""Holes to code: fill a hole from its typed contract, verified before it lands.

:func:`fill_hole` reads the hole's spec (:func:`build_spec`), asks a model for ``run``'s body,
checks it in subprocesses — mypy, contract tests generated from the ports, the user's own
tests — and repairs it with the failures shown, as a durable, traced, budgeted run. A body
that passes is spliced into the file (nothing else changes); one that does not is kept as a
draft (:func:`read_drafts`), and the node stays a hole, shown as *unverified*.
"""

from tensorsketch.canvas.drafts import draft_path, read_drafts
from tensorsketch.canvas.fill.contract import contract_tests
from tensorsketch.canvas.fill.run import FillError, FillResult, fill_hole
from tensorsketch.canvas.fill.spec import Example, HoleSpec, NotAHoleError, build_spec

__all__ = [
    "Example",
    "FillError",
    "FillResult",
    "HoleSpec",
    "NotAHoleError",
    "build_spec",
    "contract_tests",
    "draft_path",
    "fill_hole",
    "read_drafts",
]
