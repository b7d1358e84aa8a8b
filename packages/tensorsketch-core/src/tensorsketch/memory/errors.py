"""Why a memory write was refused."""

from __future__ import annotations

from tensorsketch.errors import TensorSketchError

__all__ = ["MemoryConflictError"]


class MemoryConflictError(TensorSketchError, RuntimeError):
    """A conditional write (``put(..., if_rev=...)``, ``delete(..., if_rev=...)``) found
    another revision: nothing of the call was written.

    :ivar namespace: the item's namespace.
    :ivar key: the item's key.
    :ivar expected: the revision the caller passed as ``if_rev`` (``0``: "must not exist").
    :ivar current: the revision stored now (``None``: there is no such item).
    """

    def __init__(
        self, namespace: tuple[str, ...], key: str, expected: int, current: int | None
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.expected = expected
        self.current = current
        now = "no such item" if current is None else f"the current revision is {current}"
        wanted = "that it does not exist yet" if expected == 0 else f"revision {expected}"
        super().__init__(
            f"memory item {namespace!r}/{key!r}: the write expected {wanted}, but {now}; "
            "nothing was written. Read the item again (get) and retry with its rev as if_rev."
        )
