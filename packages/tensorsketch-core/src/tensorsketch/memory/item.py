"""``Item``: one remembered value, its address, its revision and when it expires."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NAMESPACE_SEPARATOR",
    "Item",
    "Namespace",
    "Page",
    "check_namespace",
    "encode_value",
    "namespace_text",
    "prefix_bounds",
]

#: Where an item lives: ``("users", "u1", "prefs")``. Every label is a non-empty string.
Namespace = tuple[str, ...]

#: Joins a namespace's labels in stores that keep it as one string; it sorts below every
#: printable character, so the joined strings sort as the tuples do.
NAMESPACE_SEPARATOR = "\x1f"


def namespace_text(namespace: Namespace) -> str:
    """A namespace as one string (``("users", "u1")`` -> ``"users\\x1fu1"``)."""
    return NAMESPACE_SEPARATOR.join(namespace)


def prefix_bounds(prefix: Namespace) -> tuple[str, str, str] | None:
    """For a store keeping namespaces as strings: the prefix itself and the half-open range
    of its descendants (``None`` for the empty prefix, which matches everything)."""
    if not prefix:
        return None
    text = namespace_text(prefix)
    return text, text + NAMESPACE_SEPARATOR, text + chr(ord(NAMESPACE_SEPARATOR) + 1)


@dataclass(frozen=True, slots=True)
class Item:
    """A stored value and its bookkeeping, as ``get``/``list``/``search`` return it.

    :ivar namespace: the item's namespace tuple.
    :ivar key: its key inside the namespace.
    :ivar value: the JSON-shaped value (or a validated model, when read with ``schema=``).
    :ivar rev: its revision: 1 on the first write, one more on each write after it; pass it
        as ``put(..., if_rev=rev)`` to write only if nobody wrote in between.
    :ivar created_at: Unix time of the first write.
    :ivar updated_at: Unix time of the latest write.
    :ivar expires_at: Unix time after which the item is gone (``None``: never).
    :ivar score: the cosine similarity to a ``search`` query (``None`` outside a search).
    """

    namespace: Namespace
    key: str
    value: Any
    rev: int
    created_at: float
    updated_at: float
    expires_at: float | None = None
    score: float | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-shaped copy (what a durable run journals)."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "rev": self.rev,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "score": self.score,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Item:
        """The inverse of :meth:`to_json`."""
        return cls(
            namespace=tuple(data["namespace"]),
            key=data["key"],
            value=data["value"],
            rev=int(data["rev"]),
            created_at=float(data["created_at"]),
            updated_at=float(data["updated_at"]),
            expires_at=None if data["expires_at"] is None else float(data["expires_at"]),
            score=data.get("score"),
        )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``list``: the items and the cursor of the next page (``None``: the last).

    :ivar items: the items of this page, ordered by namespace then key.
    :ivar next_cursor: pass it as ``list(..., cursor=...)`` for the next page.
    """

    items: list[Item]
    next_cursor: str | None


def check_namespace(
    namespace: Any, *, what: str = "namespace", allow_empty: bool = False
) -> Namespace:
    """A namespace as a tuple of non-empty strings, or a ``ValueError`` saying what is wrong."""
    if isinstance(namespace, str) or not isinstance(namespace, tuple | list):
        msg = (
            f"{what} must be a tuple of strings such as ('users', 'u1'), got {namespace!r}; "
            f"write a single label as ({namespace!r},)."
        )
        raise TypeError(msg)
    labels = tuple(namespace)
    if not labels and not allow_empty:
        msg = f"{what} must name at least one label, e.g. ('users',); got ()."
        raise ValueError(msg)
    for label in labels:
        if not isinstance(label, str) or not label or "\x1f" in label or "\x1d" in label:
            msg = (
                f"{what} {labels!r}: every label must be a non-empty string without the "
                f"control characters '\\x1d' and '\\x1f', got {label!r}."
            )
            raise ValueError(msg)
    return labels


def encode_value(value: Any, *, where: str) -> Any:
    """A value as plain JSON data: models are dumped, anything JSON cannot hold is refused."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        msg = (
            f"{where}: the value must be JSON-shaped (dicts, lists, strings, numbers, booleans, "
            f"None) or a pydantic model; {exc}. Convert it before storing it."
        )
        raise TypeError(msg) from None
