"""``CachePolicy``: which runs of a node may reuse an earlier run's writes, and for how long."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticSerializationError

from tensorsketch.schema import Schema

__all__ = ["CachePolicy"]


class CachePolicy:
    """Reuse a node's writes for an input seen within ``ttl`` seconds.

    :param key: ``key(inp) -> str`` for the node's validated input; the default is a digest
        of the input's fields, so two runs with equal inputs share an entry. Give one when the
        input holds something that has no JSON form, or to ignore fields that do not change
        the result (a request id).
    :param ttl: seconds an entry lives (``None``: until cleared).
    """

    __slots__ = ("key", "ttl")

    def __init__(
        self, *, key: Callable[[Any], str] | None = None, ttl: float | None = None
    ) -> None:
        if key is not None and not callable(key):
            msg = f"CachePolicy(key=...) must be a function of the node's input, got {key!r}."
            raise TypeError(msg)
        if ttl is not None and not (isinstance(ttl, int | float) and ttl > 0):
            msg = f"CachePolicy(ttl=...) must be a positive number of seconds or None, got {ttl!r}."
            raise ValueError(msg)
        self.key = key
        self.ttl = float(ttl) if ttl is not None else None

    def key_for(self, node: str, inp: Schema) -> str:
        """The entry's key for this input of ``node``."""
        if self.key is not None:
            found = self.key(inp)
            if not isinstance(found, str):
                msg = (
                    f"the CachePolicy key function of node {node!r} returned "
                    f"{type(found).__name__}; return a str."
                )
                raise TypeError(msg)
            return found
        try:
            data = inp.model_dump_json(round_trip=True).encode()
        except PydanticSerializationError as exc:
            msg = (
                f"node {node!r} is cached by its input, but the input has no JSON form "
                f"({exc}); give the policy a key: CachePolicy(key=lambda inp: ...)."
            )
            raise TypeError(msg) from exc
        return hashlib.sha256(data).hexdigest()

    def __repr__(self) -> str:
        key = getattr(self.key, "__name__", None) if self.key is not None else None
        return f"CachePolicy(key={key}, ttl={self.ttl})"
