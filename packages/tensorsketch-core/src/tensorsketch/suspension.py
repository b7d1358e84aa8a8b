"""Why a run stops to wait, and on what: the exceptions a node raises to suspend
(:class:`Interrupt`) or to be tried again later (:class:`RetryLater`), and the record of one
pending wait (:class:`PendingInterrupt`). :mod:`tensorsketch.interrupts` is where users import
them from, with the helpers that raise them."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tensorsketch.errors import TensorSketchError

__all__ = ["Interrupt", "InterruptKind", "PendingInterrupt", "RetryLater", "now", "wake_time"]

InterruptKind = Literal["approval", "interrupt", "timer", "breakpoint", "in_doubt"]


def now() -> float:
    """The clock timers read (one place, so tests can move time instead of waiting)."""
    return time.time()


class PendingInterrupt(BaseModel):
    """One thing a suspended run waits for.

    :ivar id: what to key the decision by in ``resume={id: decision}`` (for a tool approval,
        the model's tool-call id).
    :ivar kind: ``approval`` (a tool call needs a yes/no), ``interrupt`` (a node asked a
        question with :func:`interrupt`), ``timer`` (waiting until ``wake_at``) or
        ``breakpoint`` (a static ``interrupt_before`` / ``interrupt_after`` stop) or
        ``in_doubt`` (an effect started before a crash and never recorded, whose policy is
        ``"ask"``: ``value`` shows the call and its arguments).
    :ivar value: what the waiter showed: the tool call (``{"tool", "args", ...}``), the
        question, ``{"when": "before" | "after", "nodes": [...]}`` for a breakpoint, or
        ``None``.
    :ivar node: the node that suspended.
    :ivar wake_at: for a timer, the Unix time after which invoking continues the run.
    :ivar path: the subgraph nodes ``node`` sits in, outermost first (empty: this graph's
        own node); the ``id`` of such an interrupt starts with them (``"Research/..."``).
    :ivar tool_call: for an :func:`interrupt` raised inside an agent's tool, the call it
        suspended: ``{"id", "name", "args"}`` (resuming answers the interrupt and the tool
        goes on from there).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: InterruptKind = "interrupt"
    value: Any = None
    node: str | None = None
    wake_at: float | None = None
    path: tuple[str, ...] = ()
    tool_call: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (how checkpoints and events carry it)."""
        return self.model_dump()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PendingInterrupt:
        return cls.model_validate(dict(raw))


class Interrupt(TensorSketchError):
    """Raised to suspend the run until a decision (or a time) arrives.

    Prefer the helpers — :func:`interrupt`, ``ctx.sleep_until`` and approval tools — which
    give the interrupt a deterministic id and read the decision on resume. Do not swallow it
    with a broad ``except Exception`` in a node body: the engine needs to see it.
    """

    def __init__(
        self,
        value: Any = None,
        *,
        id: str | None = None,
        kind: InterruptKind = "interrupt",
        wake_at: float | None = None,
        pending: list[PendingInterrupt] | tuple[PendingInterrupt, ...] | None = None,
        writes: Mapping[str, Any] | None = None,
    ) -> None:
        if pending is None:
            if id is None:
                msg = (
                    "Interrupt(...) needs an `id=` to key the decision by; use "
                    "`await interrupt(ctx, value)` to get a deterministic one."
                )
                raise ValueError(msg)
            pending = (PendingInterrupt(id=id, kind=kind, value=value, wake_at=wake_at),)
        self.pending: tuple[PendingInterrupt, ...] = tuple(pending)
        #: State writes the suspending node makes anyway (e.g. an agent's ``status``); the
        #: engine folds them at the suspension barrier, validated against the node's ``Out``.
        self.writes: dict[str, Any] = dict(writes or {})
        #: ``(task, writes)`` per suspended task of the superstep (filled by the engine).
        self.parts: list[tuple[Any, dict[str, Any]]] = []
        ids = ", ".join(repr(p.id) for p in self.pending)
        super().__init__(f"run suspended, waiting on {ids}")

    @classmethod
    def merge(cls, interrupts: list[Interrupt]) -> Interrupt:
        """One interrupt waiting on everything several others wait on (ids deduplicated)."""
        seen: dict[str, PendingInterrupt] = {}
        writes: dict[str, Any] = {}
        parts: list[tuple[Any, dict[str, Any]]] = []
        for item in interrupts:
            for p in item.pending:
                seen.setdefault(p.id, p)
            writes.update(item.writes)
            parts.extend(item.parts)
        merged = cls(pending=list(seen.values()), writes=writes)
        merged.parts = parts
        return merged


class RetryLater(TensorSketchError):
    """Raised by a tool that cannot answer yet: "ask me again after ``at`` (or ``delay``)".

    Inside an agent, the turn's other tool calls finish (and are journaled); the run then
    suspends as a durable timer and, when invoked after the time, runs this call again.
    """

    def __init__(
        self,
        reason: str = "",
        *,
        delay: float | None = None,
        at: float | _dt.datetime | None = None,
    ) -> None:
        if (delay is None) == (at is None):
            msg = "RetryLater needs exactly one of `delay=` (seconds) or `at=` (a time)."
            raise ValueError(msg)
        self.wake_at = wake_time(at) if at is not None else now() + float(delay or 0.0)
        self.reason = reason
        super().__init__(reason or f"retry after {self.wake_at:.0f}")


def wake_time(when: float | _dt.datetime) -> float:
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            msg = (
                f"sleep_until() needs an aware datetime (with a timezone), got naive {when!r}; "
                "use `datetime.now(timezone.utc) + ...`."
            )
            raise ValueError(msg)
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool):
        return float(when)
    msg = f"a wake-up time must be a Unix timestamp or an aware datetime, got {when!r}."
    raise TypeError(msg)
