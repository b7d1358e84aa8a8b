"""The run's state: seeded from defaults, input folded in, writes folded at each barrier."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import pydantic

from tensorsketch.channels import MISSING
from tensorsketch.command import GOTO_KEY
from tensorsketch.errors import EmptyChannelError, MissingInputError, NodeError
from tensorsketch.pregel.spec import GraphSpec, Task
from tensorsketch.schema import Schema
from tensorsketch.serializers import Serializer, UnstorableValueError, refused_field

__all__ = ["RunState", "state_writes", "unstorable_field"]


class RunState:
    """The state half of a :class:`~tensorsketch.pregel.loop.Run`: its values and the
    channel folds that change them (the only code that writes ``values``)."""

    spec: GraphSpec
    values: dict[str, Any]
    arrived: dict[int, set[str]]
    routed: dict[int, list[Any]]

    def seed(self) -> None:
        """Start from the state's defaults (before the input is applied)."""
        values = self.values
        for name, channel in self.spec.channels.items():
            make = self.spec.defaults.get(name)
            value = channel.initial(make() if make is not None else MISSING)
            if value is not MISSING:
                values[name] = value

    def apply_input(self, data: Any) -> dict[str, list[Any] | None]:
        """Validate the caller's input and fold it into the channels like a node's writes."""
        if data is None:
            return {}
        writes = state_writes(self.spec, data, "invoke()", "invoke({'query': ...})")
        return self._fold({k: [v] for k, v in writes.items()}, {k: ["input"] for k in writes})

    def check_input(self) -> None:
        """Refuse a new thread's input that lacks a field the run cannot get otherwise
        (before any node runs, so no side effect happens first)."""
        values = self.values
        missing = {n: why for n, why in self.spec.must_input.items() if n not in values}
        if missing:
            schema = self.spec.state_schema.__name__
            names = ", ".join(repr(m) for m in missing)
            reasons = "; ".join(f"{n!r}: {why}" for n, why in missing.items())
            msg = (
                f"the input lacks required field(s) {names} of {schema} ({reasons}): no "
                f"default covers them, so the run would fail after earlier nodes ran. Pass "
                f"{names} in invoke()'s input (or give them defaults in {schema}); nothing ran."
            )
            raise MissingInputError(msg)

    def _fold(
        self, pending: dict[str, list[Any]], writers: dict[str, list[str]]
    ) -> dict[str, list[Any] | None]:
        """Apply grouped writes through the channels; return what changed (with appends)."""
        values = self.values
        channels = self.spec.channels
        changed: dict[str, list[Any] | None] = {}
        for name, writes in pending.items():
            channel = channels[name]
            new, appended = channel.apply(values.get(name, MISSING), writes, writers[name])
            if new is not MISSING:
                values[name] = new
            changed[name] = appended
        return changed

    def state_view(self) -> Schema:
        """The current values as a state instance (unvalidated; for routing functions)."""
        values = self.values
        spec = self.spec
        if len(values) == len(spec.field_names):
            # A copy in declaration order, so the view never aliases the live channels.
            return spec.make_state({name: values[name] for name in spec.field_names})
        return spec.state_schema.model_construct(**values)

    def final_state(self) -> Schema:
        """The validated state returned by ``invoke``."""
        schema = self.spec.state_schema
        missing = [name for name in self.spec.required if name not in self.values]
        if missing:
            names = ", ".join(repr(m) for m in missing)
            msg = (
                f"the run finished but required state field(s) {names} of {schema.__name__} "
                "were never set; pass them in the input, give them defaults, or make sure a "
                "node writes them."
            )
            raise EmptyChannelError(msg)
        try:
            return schema.model_validate(self.values)
        except pydantic.ValidationError as exc:
            msg = f"the final state does not validate as {schema.__name__}: {exc}"
            raise NodeError(msg) from exc

    def barrier(
        self, tasks: list[Task], results: list[dict[str, Any]]
    ) -> dict[str, list[Any] | None]:
        """Fold all writes of a superstep into the channels, in task order."""
        pending: dict[str, list[Any]] = {}
        writers: dict[str, list[str]] = {}
        routed: dict[int, list[Any]] = {}
        for index, (task, writes) in enumerate(zip(tasks, results)):
            if GOTO_KEY in writes:
                writes = dict(writes)
                routed[index] = writes.pop(GOTO_KEY)
            for name, value in writes.items():
                bucket = pending.get(name)
                if bucket is None:
                    pending[name] = [value]
                    writers[name] = [task.spec.name]
                else:
                    bucket.append(value)
                    writers[name].append(task.spec.name)
        for name in self.spec.clearing:
            if name not in pending:
                pending[name] = []
                writers[name] = []
        self.routed = routed
        return self._fold(pending, writers)


def state_writes(spec: GraphSpec, data: object, where: str, example: str) -> dict[str, Any]:
    """``data`` as validated writes by field name.

    :param where: the call, for messages (``"invoke()"``, ``"update_state()"``).
    :param example: a call that shows the right shape, for the message about a wrong type.
    :raises TypeError: ``data`` is neither a mapping nor this graph's state schema.
    :raises ValueError: naming every unknown field (with the closest one) and invalid value.
    """
    schema = spec.state_schema
    if type(data) is dict:  # the commonest input, told apart without the ABC's check
        raw = dict(data)
    elif isinstance(data, Schema):
        if not isinstance(data, schema):
            msg = (
                f"{where} got a {type(data).__name__} instance, but this graph's state is "
                f"{schema.__name__}; pass a dict of its fields or a {schema.__name__}."
            )
            raise TypeError(msg)
        raw = {k: getattr(data, k) for k in data.model_fields_set}
    elif isinstance(data, Mapping):
        raw = dict(data)
    else:
        msg = (
            f"{where} takes a dict of {schema.__name__} fields or a {schema.__name__} "
            f"instance, got {type(data).__name__}; e.g. {example}."
        )
        raise TypeError(msg)
    writes: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in raw.items():
        if key not in spec.field_set:
            fields = list(schema.model_fields)
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" — did you mean {close[0]!r}?" if close else f" (fields: {fields})"
            errors.append(f"{key!r} is not a field of {schema.__name__}{hint}")
            continue
        try:
            writes[key] = spec.adapter(key).validate_python(value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            errors.append(f"{key!r}: {first['msg']} (got {value!r:.80})")
    if errors:
        msg = f"{where} got invalid values: " + "; ".join(errors)
        raise ValueError(msg)
    return writes


def unstorable_field(
    spec: GraphSpec,
    values: Mapping[str, Any],
    serializer: Serializer,
    by: str | None = None,
) -> UnstorableValueError | None:
    """After a checkpoint or a task's journaled writes failed to encode: the error naming the
    state field the serializer refuses and what wrote it (``by``, else the nodes that write
    that field), or ``None`` when no single field is the cause."""
    found = refused_field(serializer, values)
    if found is None:
        return None
    name, refused = found
    if by is None:
        writers = [n.name for n in spec.nodes.values() if name in n.writes]
        if not writers:
            by = "the run's input or update_state()"
        elif len(writers) == 1:
            by = f"node {writers[0]!r}"
        else:
            by = "one of the nodes " + ", ".join(repr(w) for w in writers)
    msg = (
        f"state field {spec.state_schema.__name__}.{name} (written by {by}) cannot be "
        f"checkpointed: {refused}"
    )
    return UnstorableValueError(msg)
