"""Renaming a node the Studio created: its stub class follows the new name.

``+ node`` writes a typed-hole stub — ``class Summarize(Node)`` whose ``run`` is
``raise Hole("Summarize needs code")`` — and ``add(Summarize)``. Until that stub has code, the
class is the node's own, so a rename renames it too (as ``edits.rename_node`` does for a node
still in ``GraphIR.added``): ``class Summary``, ``raise Hole("Summary needs code")`` and
``add(Summary)`` rather than ``add(Summarize, name="Summary")`` (in a ``>>`` file,
``nodes(Summary)`` rather than ``nodes(("Summary", Summarize))``).

The rename is made on the text the wiring write-back produced, and only when nothing else can
notice it: the class is defined once at module level, the node's ``add(...)`` argument is the
one reference to it in the whole file, and the new name is free (bound and read nowhere, not
a builtin). Otherwise the class keeps its name, as for any node with code.
"""

from __future__ import annotations

import builtins
import keyword
from collections import Counter

import libcst as cst

from tensorsketch.canvas._classes import string_value
from tensorsketch.canvas.ir import GraphIR

__all__ = ["follows", "renamed_ir", "renamed_text"]


def _message(name: str) -> str:
    return f"{name} needs code"


def follows(ir: GraphIR, old: str, new: str) -> bool:
    """Whether node ``old``'s class should follow a rename to ``new``, as far as the graph
    tells: a hole as ``+ node`` wrote it (its class named after it, defined in the file, its
    message unchanged), used by no other node, and ``new`` a valid class name."""
    node = next((n for n in ir.nodes if n.name == old), None)
    if node is None or node.cls != old or not node.has_hole or node.line is None:
        return False
    if node.hole != _message(old) or any(n.cls == old for n in ir.nodes if n is not node):
        return False
    return new.isidentifier() and not keyword.iskeyword(new) and not hasattr(builtins, new)


def renamed_ir(ir: GraphIR, new: str) -> GraphIR:
    """``ir`` (the wiring already renamed to ``new``) with the node's class renamed too."""
    out = ir.copy()
    node = out.node(new)
    node.cls = new
    node.hole = _message(new)
    return out


class _Names(cst.CSTVisitor):
    """Every ``Name`` of the module read or bound as a name (not an attribute, a keyword of
    a call): how often each occurs, and the nodes spelling ``watch``."""

    def __init__(self, watch: str) -> None:
        self.count: Counter[str] = Counter()
        self.watch = watch
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.count[node.value] += 1
        if node.value == self.watch:
            self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


class _Rename(cst.CSTTransformer):
    def __init__(self, cls: cst.ClassDef, use: cst.Name, old: str, new: str) -> None:
        self.cls = cls
        self.use = use
        self.old = old
        self.new = new
        self.inside = 0

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if node is self.cls:
            self.inside += 1

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        if original is not self.cls:
            return updated
        self.inside -= 1
        return updated.with_changes(name=updated.name.with_changes(value=self.new))

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.SimpleString:
        if self.inside and string_value(original) == _message(self.old):
            prefix = original.prefix
            quote = original.quote
            return updated.with_changes(value=f"{prefix}{quote}{_message(self.new)}{quote}")
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if original is self.use else updated

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        # `nodes(("Summary", Summary))`: the pair says nothing the class does not
        value = original.value
        if (
            isinstance(value, cst.Tuple)
            and len(value.elements) == 2
            and value.elements[1].value is self.use
            and string_value(value.elements[0].value) == self.new
        ):
            return updated.with_changes(value=cst.Name(self.new))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not any(arg.value is self.use for arg in original.args):
            return updated
        # `add(Summary, name="Summary")`: the alias says nothing the class does not
        args = list(updated.args)
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "name":
                if string_value(arg.value) == self.new:
                    del args[i]
                    if i == len(args) and args:
                        args[-1] = args[-1].with_changes(comma=arg.comma)
                break
        return updated.with_changes(args=args)


def renamed_text(text: str, old: str, new: str) -> str | None:
    """``text`` with class ``old`` renamed ``new`` (its definition, its Hole message, its one
    use), or ``None`` when that is not safe to do."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return None
    names = _Names(old)
    module.visit(names)
    if names.count[new]:
        return None  # the new name means something already
    classes = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == old]
    if len(classes) != 1 or len(names.found) != 2:
        return None  # the class is defined elsewhere, twice, or named by more than its node
    cls = classes[0]
    use = next(n for n in names.found if n is not cls.name)
    return module.visit(_Rename(cls, use, old, new)).code
