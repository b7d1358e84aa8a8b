"""A checkpoint's stored values back into the state's types, and the codec the journal uses
for it (:class:`~tensorsketch.durable.journal.StateCodec`)."""

from __future__ import annotations

from typing import Any

import pydantic

from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.durable.fingerprint import is_exact, schema_fingerprint
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.serializers import Serializer

__all__ = ["SpecCodec", "validated_values"]


class SpecCodec:
    """The journal's view of a compiled graph's state: its fingerprint, and validation.

    :param serializer: the backend's; values are stamped with the fingerprint only when it
        round-trips exactly (otherwise every read validates).
    """

    __slots__ = ("schema_id", "spec")

    def __init__(self, spec: GraphSpec, serializer: Serializer) -> None:
        self.spec = spec
        self.schema_id = schema_fingerprint(spec.state_schema) if is_exact(serializer) else None

    def values_of(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """``checkpoint``'s values as this state's field values (see :func:`validated_values`)."""
        return validated_values(self.spec, checkpoint)


def validated_values(spec: GraphSpec, checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint's values validated into the state's field types.

    ``compile(migrate=fn)`` maps the stored values first. A stored field the state no longer
    declares, or one that no longer validates, is an error naming the fields: dropping or
    coercing it silently would lose data a renamed field still needs. Fields added since
    (with defaults) simply take their defaults.

    Values that the same state schema wrote (:attr:`Checkpoint.schema_id` is the state's
    :func:`schema_fingerprint`) are taken as decoded: validating them again would rebuild
    every list and dict of the state for nothing (most of reading a long history back).
    """
    if (
        spec.migrate is None
        and checkpoint.schema_id is not None
        and checkpoint.schema_id == schema_fingerprint(spec.state_schema)
    ):
        return dict(checkpoint.values)
    where = f"checkpoint {checkpoint.id!r} of thread {checkpoint.thread_id!r}"
    hint = (
        "If the state changed on purpose, pass graph.compile(migrate=fn), where "
        "fn(values: dict) -> dict maps the stored values onto the current fields (see "
        "'Changing the state' in docs/durability.md)."
    )
    stored = checkpoint.values
    if spec.migrate is not None:
        try:
            stored = spec.migrate(dict(stored))
        except Exception as exc:
            msg = (
                f"{where}: compile(migrate=...) failed on its values ({type(exc).__name__}: {exc})."
            )
            raise CheckpointDecodeError(msg) from exc
        if not isinstance(stored, dict):
            msg = f"{where}: compile(migrate=...) must return a dict, got {type(stored).__name__}."
            raise CheckpointDecodeError(msg)
    fields = spec.state_schema.model_fields
    state = spec.state_schema.__name__
    unknown = sorted(name for name in stored if name not in fields)
    if unknown:
        msg = (
            f"{where} stores field(s) {', '.join(map(repr, unknown))} that the state {state} "
            f"no longer declares (renamed or removed?). {hint}"
        )
        raise CheckpointDecodeError(msg)
    values: dict[str, Any] = {}
    failed: list[str] = []
    for name, value in stored.items():
        try:
            values[name] = spec.adapter(name).validate_python(value)
        except Exception as exc:
            failed.append(f"{name!r} ({_why_invalid(exc)})")
    if failed:
        msg = (
            f"{where}: stored field(s) no longer validate as the state {state}'s types: "
            f"{'; '.join(failed)}. {hint}"
        )
        raise CheckpointDecodeError(msg)
    return values


def _why_invalid(exc: Exception) -> str:
    """What a validation error says, in a line: pydantic's first message and where it is (its
    text ends with a link, not the reason), else the exception's own text."""
    if isinstance(exc, pydantic.ValidationError) and exc.errors():
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{first['msg']}{f' at {at}' if at else ''}, got {first.get('input')!r:.60}{more}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
