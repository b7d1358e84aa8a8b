"""``fast_constructor``: build a pydantic model from trusted values ~4x faster than
``model_construct``. The engine builds a node's ``In`` and the routing view of the state on
every task, so this is on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pydantic

from tensorsketch.schema import Schema

__all__ = ["fast_constructor"]

M = TypeVar("M", bound=Schema)


def _slot_setter(name: str) -> Callable[[Any, Any], None] | None:
    descriptor = pydantic.BaseModel.__dict__.get(name)
    setter = getattr(descriptor, "__set__", None)
    return setter if callable(setter) else None


_SET_FIELDS_SET = _slot_setter("__pydantic_fields_set__")
_SET_EXTRA = _slot_setter("__pydantic_extra__")
_SET_PRIVATE = _slot_setter("__pydantic_private__")
_new_object = object.__new__
_object_setattr = object.__setattr__


def fast_constructor(schema: type[M]) -> Callable[[dict[str, Any]], M]:
    """An equivalent of ``schema.model_construct(**values)`` for trusted values, ~4x faster.

    The engine builds a node's ``In`` and the routing view of the state on every task; pydantic's
    ``model_construct`` spends most of its time on generality those values never need. When
    ``values`` holds every field (in declaration order, as the engine builds them), the instance
    is assembled from pydantic's own slots; anything else — missing fields that need defaults, a
    model with private attributes, ``model_post_init``, ``extra="allow"``, or a pydantic whose
    slots look different — goes through ``model_construct``. The fast path is checked against
    ``model_construct`` once, when it is made.
    """

    def slow(values: dict[str, Any]) -> M:
        return schema.model_construct(**values)  # type: ignore[return-value]

    if (
        _SET_FIELDS_SET is None
        or _SET_EXTRA is None
        or _SET_PRIVATE is None
        or schema.__pydantic_post_init__ is not None
        or schema.__private_attributes__
        or schema.__pydantic_root_model__
        or schema.model_config.get("extra") == "allow"
    ):
        return slow
    n_fields = len(schema.model_fields)
    set_fields, set_extra, set_private = _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE
    new, setattr_ = _new_object, _object_setattr

    def fast(values: dict[str, Any]) -> M:
        if len(values) != n_fields:
            return slow(values)
        obj = new(schema)
        setattr_(obj, "__dict__", values)
        set_fields(obj, set(values))
        set_extra(obj, None)
        set_private(obj, None)
        return obj

    # Model the slots on what ``model_construct`` does for this very schema; any difference
    # (a future pydantic) falls back to it. Values are not validated, so ``None`` will do.
    probe = dict.fromkeys(schema.model_fields)
    expected, got = slow(dict(probe)), fast(dict(probe))
    same = (
        list(got.__dict__.items()) == list(expected.__dict__.items())
        and got.__pydantic_fields_set__ == expected.__pydantic_fields_set__
        and got.__pydantic_extra__ == expected.__pydantic_extra__
        and got.__pydantic_private__ == expected.__pydantic_private__
    )
    return fast if same else slow
