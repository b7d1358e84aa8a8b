"""A compiled graph added to another as a node (``Graph.add(child_app, name="Research")``).

The child's ports come from its state schema: the fields it shares with the parent by name,
plus those an ``inputs=``/``outputs=`` mapping names, are read in and written back through
the parent's channels; its other fields stay inside it. It runs as supersteps of its own on a
child thread of the parent's (``<thread>/<step>:<node>...``), so it checkpoints, resumes after
a crash without repeating an effect, and suspends the parent when it waits for a decision.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import pydantic
from pydantic.fields import FieldInfo

from tensorsketch.channels import LastValue, channel_for
from tensorsketch.command import ParentCommand
from tensorsketch.context import Context
from tensorsketch.effects import INSIDE
from tensorsketch.errors import NodeError
from tensorsketch.node import Node
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph

__all__ = ["SUBGRAPH_CALL", "SubgraphNode"]

#: The key of a journaled child result that is a ``Command(graph=Command.PARENT)`` (no
#: state field can be named so).
HANDED_BACK: Final = "__parent_command__"

#: The name of the one journaled call a subgraph node makes (its child thread's key ends so).
SUBGRAPH_CALL = "subgraph"


class SubgraphNode(Node):
    """A compiled graph as a node of another graph.

    :param graph: the child graph.
    :param inputs: ``{child_field: parent_field}`` for child fields read from a parent field
        of another name (fields of the same name in both are shared without it).
    :param outputs: ``{child_field: parent_field}`` for child fields written back to a parent
        field of another name.
    :param max_steps: the child's superstep limit per run.
    :param destinations: the parent's nodes (or ``END``) a child node may send the run to
        with ``Command(graph=Command.PARENT, goto=...)``.
    """

    def __init__(
        self,
        graph: CompiledGraph[Any],
        *,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        max_steps: int = 25,
        destinations: tuple[str, ...] = (),
    ) -> None:
        self.graph = graph
        self.destinations = destinations  # type: ignore[misc]  # per instance
        self.inputs = dict(inputs or {})
        self.outputs = dict(outputs or {})
        self.max_steps = max_steps
        #: Set by :meth:`bind`: child field -> parent port, for what flows in and back out.
        self.reads: dict[str, str] = {}
        self.writes: dict[str, str] = {}
        #: Parent fields whose channel folds writes (a reducer or topic): the child's
        #: additions are written back, not its whole value.
        self.folding: frozenset[str] = frozenset()

    def default_name(self) -> str:
        return self.graph.name

    def bind(self, state: type[Schema], name: str, problems: list[str]) -> Node:
        """A copy of this node with ports for the parent ``state`` (what ``compile`` runs)."""
        child = self.graph.state_schema.model_fields
        parent = state.model_fields
        for label, mapping in (("inputs", self.inputs), ("outputs", self.outputs)):
            for child_field, parent_field in mapping.items():
                if child_field not in child:
                    problems.append(
                        f"subgraph node {name!r}: {label}= maps {child_field!r}, which is not a "
                        f"field of {self.graph.state_schema.__name__}"
                        f"{_close(child_field, child)}; the keys of {label}= are the child "
                        "graph's fields, the values the parent's."
                    )
                elif parent_field not in parent:
                    problems.append(
                        f"subgraph node {name!r}: {label}= maps {child_field!r} to "
                        f"{parent_field!r}, which is not a field of {state.__name__}"
                        f"{_close(parent_field, parent)}."
                    )
        shared = {f: f for f in child if f in parent}
        bound = SubgraphNode(
            self.graph,
            inputs=self.inputs,
            outputs=self.outputs,
            max_steps=self.max_steps,
            destinations=self.destinations,
        )
        bound.reads = {**shared, **{c: p for c, p in self.inputs.items() if c in child}}
        bound.writes = {**shared, **{c: p for c, p in self.outputs.items() if c in child}}
        bound.folding = frozenset(
            p
            for p in bound.writes.values()
            if p in parent and not isinstance(channel_for(p, parent[p].metadata), LastValue)
        )
        in_fields: dict[str, Any] = {}
        for child_field, port in bound.reads.items():
            info = child[child_field]
            in_fields[port] = (info.annotation, _optional(info))
        out_fields: dict[str, Any] = {
            port: (child[child_field].annotation, None)
            for child_field, port in bound.writes.items()
        }
        owner = f"{name}Subgraph"
        in_model = pydantic.create_model(f"{owner}In", __base__=Schema, **in_fields)
        out_model = pydantic.create_model(f"{owner}Out", __base__=Schema, **out_fields)
        bound.In, bound.Out = in_model, out_model  # type: ignore[misc]  # per instance
        return bound

    async def run(self, ctx: Context, inp: Any) -> Any:
        given = inp.model_fields_set
        child_input = {c: getattr(inp, p) for c, p in self.reads.items() if p in given}
        key = ctx.next_key(SUBGRAPH_CALL)

        async def call() -> dict[str, Any]:
            try:
                final = await ctx.run_nested(
                    self.graph,
                    child_input,
                    key=key,
                    label=SUBGRAPH_CALL,
                    max_steps=self.max_steps,
                    qualify=True,
                    on_executor=True,
                )
            except ParentCommand as handed:
                # The child handed the run back: journaled like a result, so a resumed
                # parent takes the same Command without entering the child again.
                return {HANDED_BACK: handed.plain()}
            # Journaled as plain values (what the checkpoints already store), not as the
            # child's state object, whose class a resumed process may not find by name.
            return {c: getattr(final, c) for c in self.writes if c in final.model_fields_set}

        # No outside effect of its own: the child journals its effects in its own thread.
        final: dict[str, Any] = await ctx.effects.once(key, call, INSIDE)
        if HANDED_BACK in final:
            raise ParentCommand.from_plain(final[HANDED_BACK])  # this node's Command now
        out: dict[str, Any] = {}
        for child_field, port in self.writes.items():
            if child_field not in final:
                continue
            value = final[child_field]
            if child_field not in child_input:
                out[port] = value
                continue
            before = child_input[child_field]
            if value == before:
                continue
            if port not in self.folding:
                out[port] = value
            elif (
                isinstance(value, list)
                and isinstance(before, list)
                and (value[: len(before)] == before)
            ):
                out[port] = value[len(before) :]
            else:
                msg = (
                    f"subgraph node {ctx.node!r}: the child changed {child_field!r} in a way "
                    f"that is not an append, and the parent's {port!r} folds writes (a reducer "
                    f"or topic), so it cannot be written back without repeating what was "
                    f"there; map it to a plain field with outputs={{{child_field!r}: ...}}."
                )
                raise NodeError(msg)
        return self.Out(**out) if out else None


def _optional(info: FieldInfo) -> Any:
    """The port's default: required where the child requires the field, else optional (the
    child applies its own default when the parent has no value)."""
    return ... if info.is_required() else None


def _close(name: str, known: Mapping[str, Any]) -> str:
    found = difflib.get_close_matches(name, list(known), n=1)
    return f" — did you mean {found[0]!r}?" if found else f" (fields: {', '.join(known)})"
