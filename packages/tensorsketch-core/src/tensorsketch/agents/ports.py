"""Per-instance ``In`` / ``Out`` port schemas (their fields depend on the keys chosen)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from tensorsketch.schema import Schema

__all__ = ["ports"]


def ports(
    owner: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]
) -> tuple[type[Schema], type[Schema]]:
    module = "tensorsketch.agents"  # where these models were always made
    in_model = pydantic.create_model(f"{owner}In", __base__=Schema, __module__=module, **inputs)
    out_model = pydantic.create_model(f"{owner}Out", __base__=Schema, __module__=module, **outputs)
    return in_model, out_model
