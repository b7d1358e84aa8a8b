"""A tracer and a channel type contributed through the plugin hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorsketch.channels import Channel, ChannelMarker
from tensorsketch.observability.memory import InMemoryTracer


class AcmeTracer(InMemoryTracer):
    """An in-memory tracer that says where it came from."""

    vendor = "acme"


class _Unique(Channel):
    """A list channel that keeps each item once, in first-seen order."""

    kind = "acme-unique"

    def apply(
        self, current: Any, writes: Sequence[Any], writers: Sequence[str]
    ) -> tuple[Any, list[Any] | None]:
        seen = list(current) if isinstance(current, list) else []
        for batch in writes:
            seen.extend(item for item in batch if item not in seen)
        return seen, None


class Unique(ChannelMarker):
    def create(self, field: str) -> Channel:
        return _Unique(field)
