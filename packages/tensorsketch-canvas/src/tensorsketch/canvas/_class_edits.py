"""Write-back: which node classes the IR creates (stubs) or re-ports, and which it may not.

Classes are code the canvas mostly never edits. A node listed in ``added`` whose class is new
gets a stub; a class that is still a hole may change its ports; anything else that differs
from the file (a body, a class from another module) is refused with what to do instead.
"""

from __future__ import annotations

import keyword
from dataclasses import replace

import libcst as cst

from tensorsketch.canvas._annotation import annotation_problem
from tensorsketch.canvas._classes import NodeClass
from tensorsketch.canvas.exceptions import WriteBackError
from tensorsketch.canvas.ir import GraphIR, NodeIR

__all__ = ["class_edits", "class_key", "normalized"]


def class_key(cls: str) -> str:
    """The class name a node's class expression refers to (``pkg.Retry(3)`` -> ``Retry``);
    for a graph compiled in place, the graph (``team.compile()`` -> ``team``)."""
    text = cls.split("(", 1)[0].strip()
    if text.endswith(".compile") and cls.strip().endswith("()"):
        text = text.removesuffix(".compile")
    return text.rsplit(".", 1)[-1]


def normalized(ir: GraphIR, classes: dict[str, NodeClass]) -> GraphIR:
    """The IR as the file will say it: a created node whose class already exists takes that
    class's real interface (classes are never rewritten). A stub says exactly what was sent."""
    target = ir.copy()
    for node in target.nodes:
        if node.name not in target.added:
            continue
        key = class_key(node.cls)
        cls = classes.get(key)
        if cls is None:
            continue
        # A sibling node of the same class carries the class as this IR edits it (its ports
        # may change in the same write-back); otherwise the class stays as the file has it.
        peer = next(
            (n for n in target.nodes if n.name not in target.added and class_key(n.cls) == key),
            None,
        )
        inputs, outputs = (peer.inputs, peer.outputs) if peer else (cls.inputs, cls.outputs)
        node.inputs = [replace(p) for p in inputs]
        node.outputs = [replace(p) for p in outputs]
        node.has_hole, node.hole = cls.has_hole, cls.hole
    return target


def class_edits(
    target: GraphIR, classes: dict[str, NodeClass], bound: set[str]
) -> tuple[list[NodeIR], dict[str, NodeIR]]:
    """Stubs to write and hole classes whose ports change; refuse anything else.

    ``bound`` holds the names the module already binds, which a new class may not take.
    """
    stubs: dict[str, NodeIR] = {}
    port_edits: dict[str, NodeIR] = {}
    for node in target.nodes:
        if node.subgraph is not None and node.name not in target.added:
            continue  # its ports are its graph's state fields: edited in its state classes
        key = class_key(node.cls)
        cls = classes.get(key)
        if cls is not None:
            if _ports_change(node, cls, key):
                other = port_edits.setdefault(key, node)
                if (other.inputs, other.outputs) != (node.inputs, node.outputs):
                    raise WriteBackError(_disagree(other, node, key))
        elif key in stubs:
            if (node.inputs, node.outputs) != (stubs[key].inputs, stubs[key].outputs):
                raise WriteBackError(_disagree(stubs[key], node, key))
        elif node.name in target.added:
            _check_new(node, key, bound)
            stubs[key] = node
        elif node.inputs or node.outputs or node.has_hole or node.hole is not None:
            msg = (
                f"node {node.name!r} uses class {key!r}, which is not defined in this file; "
                "its ports and body live in its own module — edit them there, or list the "
                "node in `added` to create a stub here."
            )
            raise WriteBackError(msg)
    return list(stubs.values()), port_edits


def _check_new(node: NodeIR, key: str, bound: set[str]) -> None:
    """A node the canvas created must be a hole with a free, valid class name."""
    if key in bound:
        msg = (
            f"cannot create node class {key!r}: the name is already used in this file by "
            "something that is not a node class; pick another name."
        )
        raise WriteBackError(msg)
    if not node.cls.isidentifier() or keyword.iskeyword(node.cls):
        msg = (
            f"cannot create node class {node.cls!r}: a new node's class must be a Python "
            "identifier that is not a keyword, such as 'Escalate'."
        )
        raise WriteBackError(msg)
    if not node.has_hole:
        msg = (
            f"new node {node.name!r} must be created as a hole (has_hole=True); its body is "
            "written in code afterwards."
        )
        raise WriteBackError(msg)
    for port in (*node.inputs, *node.outputs):
        _check_port(node.name, port.name, port.type)


def _ports_change(node: NodeIR, cls: NodeClass, key: str) -> bool:
    """Whether an existing class's ports change (allowed only while it is a hole)."""
    if (node.has_hole, node.hole) != (cls.has_hole, cls.hole):
        msg = (
            f"node {node.name!r}: has_hole/hole come from the body of class {key!r}, which "
            "the canvas never edits; implement or stub the body in code."
        )
        raise WriteBackError(msg)
    if (node.inputs, node.outputs) == (cls.inputs, cls.outputs):
        return False
    if not cls.has_hole:
        msg = (
            f"node {node.name!r} already has a body, so its ports cannot change from the "
            f"canvas (its code may use them); edit `{key}.In`/`{key}.Out` in code."
        )
        raise WriteBackError(msg)
    for port in (*node.inputs, *node.outputs):
        _check_port(node.name, port.name, port.type)
    return True


def _disagree(first: NodeIR, second: NodeIR, key: str) -> str:
    return (
        f"nodes {first.name!r} and {second.name!r} share class {key!r} but list different "
        "ports; give both the same inputs and outputs."
    )


def _check_port(node: str, name: str, type_text: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        msg = (
            f"node {node!r}: port name {name!r} is not a Python identifier (or is a keyword); "
            "use e.g. 'query'."
        )
        raise WriteBackError(msg)
    try:
        cst.parse_expression(type_text)
    except cst.ParserSyntaxError:
        msg = (
            f"node {node!r}: the type {type_text!r} of port {name!r} is not a Python expression; "
            "write it as in code, e.g. 'str' or 'list[str]'."
        )
        raise WriteBackError(msg) from None
    problem = annotation_problem(type_text)
    if problem is not None:
        msg = (
            f"node {node!r}: the type {type_text!r} of port {name!r} is not a type annotation "
            f"({problem}); write a type as in code, e.g. 'str', 'list[str]' or 'int | None'."
        )
        raise WriteBackError(msg)
