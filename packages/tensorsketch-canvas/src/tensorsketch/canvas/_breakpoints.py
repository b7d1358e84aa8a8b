"""Static breakpoints in ``compile(interrupt_before=[...], interrupt_after=[...])``.

The canvas shows them read-only, but they name nodes: renaming a node must rename it in
these lists too, and removing one must take it out (``compile`` refuses an unknown name).
Both are done on the compile calls' syntax, so the rest of each call stays as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import libcst as cst

from tensorsketch.canvas._classes import string_value

__all__ = ["BREAKPOINT_ARGS", "read_breakpoints", "rewrite_breakpoints"]

#: The ``compile`` keywords that list node names.
BREAKPOINT_ARGS = ("interrupt_before", "interrupt_after")


def _names(value: cst.BaseExpression) -> list[str] | None:
    """The node names of a literal list or tuple of strings; ``None`` for anything else."""
    if not isinstance(value, cst.List | cst.Tuple):
        return None
    names: list[str] = []
    for element in value.elements:
        if not isinstance(element, cst.Element):
            return None
        text = string_value(element.value)
        if text is None:
            return None
        names.append(text)
    return names


def read_breakpoints(call: cst.Call | None) -> dict[str, list[str] | None]:
    """Each breakpoint keyword of a compile call: its names (``[]`` when not given), or
    ``None`` when the value is not a literal list of strings (a variable, a comprehension)."""
    found: dict[str, list[str] | None] = {key: [] for key in BREAKPOINT_ARGS}
    if call is None:
        return found
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in found:
            found[arg.keyword.value] = _names(arg.value)
    return found


class _Rewrite(cst.CSTTransformer):
    def __init__(self, renames: Mapping[str, str], drops: Set[str]) -> None:
        self.renames = renames
        self.drops = drops

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "compile"):
            return updated
        args = [
            arg.with_changes(value=self._value(arg.value))
            if arg.keyword is not None and arg.keyword.value in BREAKPOINT_ARGS
            else arg
            for arg in updated.args
        ]
        return updated.with_changes(args=args)

    def _value(self, value: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(value, cst.List | cst.Tuple) or _names(value) is None:
            return value
        kept: list[cst.BaseElement] = []
        for element in value.elements:
            assert isinstance(element, cst.Element)
            name = string_value(element.value)
            if name in self.drops:
                continue
            new = self.renames.get(name or "")
            if new is not None and isinstance(element.value, cst.SimpleString):
                element = element.with_changes(value=_string(element.value, new))
            kept.append(element)
        if len(kept) == len(value.elements) and all(
            a is b for a, b in zip(kept, value.elements, strict=True)
        ):
            return value
        last = value.elements[-1] if value.elements else None
        if kept and last is not None and last not in kept:
            # The old last element went: the new last one ends as the old one did.
            assert isinstance(last, cst.Element)
            kept[-1] = kept[-1].with_changes(comma=last.comma)
        if isinstance(value, cst.Tuple) and len(kept) == 1:
            # A one-element tuple needs its comma (``("A")`` is a string).
            only = kept[0]
            assert isinstance(only, cst.Element)
            if not isinstance(only.comma, cst.Comma):
                kept[0] = only.with_changes(comma=cst.Comma())
        return value.with_changes(elements=kept)


def _string(old: cst.SimpleString, name: str) -> cst.SimpleString:
    """``name`` as a string literal in ``old``'s quotes (``repr`` when they cannot hold it)."""
    quote = old.quote
    prefix = old.prefix
    if "\\" in name or quote[0] in name or "\n" in name:
        return cst.SimpleString(repr(name))
    return cst.SimpleString(f"{prefix}{quote}{name}{quote}")


def rewrite_breakpoints(
    node: cst.CSTNode, renames: Mapping[str, str], drops: Set[str]
) -> cst.CSTNode:
    """``node`` with every compile call's breakpoint lists renamed (``renames``: old name ->
    new) and cleared of ``drops`` (``node`` itself when there is nothing to do)."""
    if not renames and not drops:
        return node
    result = node.visit(_Rewrite(renames, drops))
    assert isinstance(result, cst.CSTNode)  # the rewrite never removes a node
    return result
