"""``Send``: the instruction a router returns for dynamic fan-out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorsketch.errors import RoutingError
from tensorsketch.schema import Schema

__all__ = ["Send", "send_payload"]


@dataclass(frozen=True, slots=True)
class Send:
    """Run ``node`` once more in the next superstep, with ``payload`` overlaid on the state.

    Returned (usually in a list) from a router's path function. ``payload`` is a dict of state
    fields, or an instance of the target node's ``In`` schema; fields it omits are read from
    the shared state as usual. Each Send is its own task and journals its effects under its
    own key, so a crash halfway through a fan-out replays only the finished workers.
    """

    node: str
    payload: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.node, str) or not self.node:
            msg = f"Send(node=...) needs a node name (a non-empty str), got {self.node!r}."
            raise TypeError(msg)


def send_payload(send: Send) -> dict[str, Any]:
    """The state fields a ``Send`` overrides, as a fresh dict (``None``: none)."""
    payload = send.payload
    if type(payload) is dict:
        return payload.copy()
    if payload is None:
        return {}
    if isinstance(payload, Schema):
        return {k: getattr(payload, k) for k in payload.model_fields_set}
    if isinstance(payload, Mapping):
        return dict(payload)
    msg = (
        f"Send({send.node!r}, payload) needs a dict of state fields or a Schema "
        f"instance, got {type(payload).__name__}."
    )
    raise RoutingError(msg)
