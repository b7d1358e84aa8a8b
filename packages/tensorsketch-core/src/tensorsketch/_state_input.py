"""State values from a caller (``invoke`` input, ``update_state`` values), checked once.

Both take a dict of state fields or an instance of the state schema, validate each value as
its field, and fold the result through the channels like a node's writes. One function does
the checking, so both refuse the same mistakes with the same teaching messages.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pydantic

from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.pregel import GraphSpec

__all__ = ["state_writes"]


def state_writes(spec: GraphSpec, data: object, where: str, example: str) -> dict[str, Any]:
    """``data`` as validated writes by field name.

    :param where: the call, for messages (``"invoke()"``, ``"update_state()"``).
    :param example: a call that shows the right shape, for the message about a wrong type.
    :raises TypeError: ``data`` is neither a mapping nor this graph's state schema.
    :raises ValueError: naming every unknown field (with the closest one) and invalid value.
    """
    schema = spec.state_schema
    if isinstance(data, Schema):
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
    fields = list(schema.model_fields)
    writes: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in raw.items():
        if key not in spec.field_set:
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
