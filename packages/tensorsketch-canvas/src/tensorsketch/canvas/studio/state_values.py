"""State values typed on the page (a run's input, a debugger edit or fork), checked against
the graph's state fields before anything runs or is written: the value is data, validated as
its field's type, never code."""

from __future__ import annotations

from typing import Any

import pydantic

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.pregel.compiled import CompiledGraph

__all__ = ["checked_values"]


def checked_values(
    graph: CompiledGraph[Any], values: Any, *, body_key: str, name_key: str, require: bool = False
) -> dict[str, Any]:
    """``values`` (state field -> value), each validated as its field.

    A body that is not an object is a 400 naming ``body_key``; an unknown field or a value that
    does not validate is a 422 naming the field (under ``name_key`` in the answer). ``require``
    (a run on a new thread): every field without a default must be given.
    """
    if not isinstance(values, dict):
        raise ApiError(400, f"{body_key!r} must be an object of state field -> value.")
    fields = graph.state_schema.model_fields
    checked: dict[str, Any] = {}
    for name, value in values.items():
        if name not in fields:
            raise ApiError(
                422,
                f"{name!r} is not a field of {graph.state_schema.__name__} "
                f"(fields: {', '.join(sorted(fields))}).",
                **{name_key: name},
            )
        try:
            checked[name] = graph.spec.adapter(name).validate_python(value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()) if p != name)
            detail = f" at {where}" if where else ""
            raise ApiError(422, f"{name}{detail}: {first['msg']}", **{name_key: name}) from None
    missing = [n for n, f in fields.items() if f.is_required() and n not in checked]
    if require and missing:
        raise ApiError(
            422, f"missing required field(s): {', '.join(missing)}.", **{name_key: missing[0]}
        )
    return checked
