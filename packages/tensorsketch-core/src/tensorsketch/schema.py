"""``Schema``: the one type abstraction for state, node ports, tool arguments and model output."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Schema"]


class Schema(BaseModel):
    """A pydantic v2 model with TensorSketch's defaults.

    Unknown fields are rejected (a typo in an input key fails loudly instead of being dropped),
    and arbitrary Python types are allowed as field types.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
