"""Suspending a run durably: human approval, general interrupts, and durable timers.

A node (or a tool inside an agent) that must wait — for a person to approve a refund, for an
answer to a question, for a point in time — raises :class:`Interrupt`. The engine catches it
at the superstep barrier, saves a checkpoint that plans the same superstep again, and
``invoke`` *returns* (it does not raise): the result's run info says the run is suspended and
lists what it waits for. No process is held while waiting.

Continuing is another ``invoke`` on the same thread::

    out = await app.invoke({"query": "refund order 7"}, thread_id="t", backend=backend)
    run_info(out).interrupts        # (PendingInterrupt(id='call_1', kind='approval', ...),)
    out = await app.invoke(thread_id="t", backend=backend, resume={"call_1": True})

The suspended superstep runs again; everything it journaled before the suspension replays, and
``interrupt()`` / approvals now find their decision. Decisions are recorded in the thread's
effect journal (the first decision for an id wins), so a crash after resuming does not lose
them.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from tensorsketch.effects import decision_key
from tensorsketch.errors import TensorSketchError

if TYPE_CHECKING:
    from tensorsketch.context import Context
    from tensorsketch.durable import Checkpoint
    from tensorsketch.pregel import Run
    from tensorsketch.schema import Schema

__all__ = [
    "Interrupt",
    "InterruptKind",
    "PendingInterrupt",
    "RetryLater",
    "RunInfo",
    "interrupt",
    "parse_approval",
    "run_info",
    "sleep",
    "sleep_until",
]

InterruptKind = Literal["approval", "interrupt", "timer", "breakpoint"]


def _now() -> float:
    """The clock timers read (one place, so tests can move time instead of waiting)."""
    return time.time()


class PendingInterrupt(BaseModel):
    """One thing a suspended run waits for.

    :param id: what to key the decision by in ``resume={id: decision}`` (for a tool approval,
        the model's tool-call id).
    :param kind: ``approval`` (a tool call needs a yes/no), ``interrupt`` (a node asked a
        question with :func:`interrupt`), ``timer`` (waiting until ``wake_at``) or
        ``breakpoint`` (a static ``interrupt_before`` / ``interrupt_after`` stop).
    :param value: what the waiter showed: the tool call (``{"tool", "args", ...}``), the
        question, ``{"when": "before" | "after", "nodes": [...]}`` for a breakpoint, or
        ``None``.
    :param node: the node that suspended.
    :param wake_at: for a timer, the Unix time after which invoking continues the run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: InterruptKind = "interrupt"
    value: Any = None
    node: str | None = None
    wake_at: float | None = None

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
        self.wake_at = _epoch(at) if at is not None else _now() + float(delay or 0.0)
        self.reason = reason
        super().__init__(reason or f"retry after {self.wake_at:.0f}")


RunStatus = Literal["completed", "suspended", "failed", "pending"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """How a run ended: completed, or suspended waiting on ``interrupts``.

    On a state read back with ``get_state`` it can also be ``"failed"`` (``error`` says which
    task raised what: ``{"node", "instance", "step", "type", "message"}``) or ``"pending"``
    (tasks are planned: the run is going on, or its process stopped); invoking the thread
    again continues either.
    """

    status: RunStatus = "completed"
    interrupts: tuple[PendingInterrupt, ...] = field(default_factory=tuple)
    thread_id: str | None = None
    checkpoint_id: str | None = None
    error: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        """Whether the thread's last superstep failed (invoke it again to retry it)."""
        return self.status == "failed"

    @property
    def suspended(self) -> bool:
        """Whether the run stopped to wait (for a decision or a time)."""
        return self.status == "suspended"

    @property
    def wake_at(self) -> float | None:
        """The earliest time a timer waits for, if any."""
        times = [p.wake_at for p in self.interrupts if p.wake_at is not None]
        return min(times) if times else None

    @property
    def awaiting(self) -> list[str]:
        """Ids that need a decision (approvals and questions; timers and breakpoints need
        none)."""
        return [p.id for p in self.interrupts if p.kind not in _NO_DECISION]

    @property
    def breakpoint(self) -> PendingInterrupt | None:
        """The static breakpoint the run stopped at, if it did (``value`` says where)."""
        return next((p for p in self.interrupts if p.kind == "breakpoint"), None)


#: Kinds of waiting that a plain ``invoke`` continues, with no decision to pass.
_NO_DECISION = frozenset({"timer", "breakpoint"})


_COMPLETED = RunInfo()


def run_info(state: Schema) -> RunInfo:
    """The run info ``invoke`` attached to the state it returned (``out.__tensorsketch_run__``)."""
    found = state.__dict__.get("__tensorsketch_run__")
    return found if isinstance(found, RunInfo) else _COMPLETED


def attach_run_info(state: Schema, run: Run) -> None:
    """Record how the run ended on the returned state (engine use)."""
    info = RunInfo(
        status="suspended" if run.interrupts else "completed",
        interrupts=tuple(run.interrupts),
        thread_id=run.thread_id,
        checkpoint_id=run.checkpoint_id,
    )
    object.__setattr__(state, "__tensorsketch_run__", info)


def attach_checkpoint_info(state: Schema, checkpoint: Checkpoint) -> None:
    """Record on a state read back from a checkpoint how the thread stood there."""
    meta = checkpoint.metadata
    error = meta.get("error")
    pending = tuple(PendingInterrupt.from_dict(p) for p in meta.get("interrupts") or ())
    status: RunStatus = (
        "failed"
        if error
        else "suspended"
        if pending
        else "pending"
        if checkpoint.tasks
        else "completed"
    )
    info = RunInfo(
        status=status,
        interrupts=pending,
        thread_id=checkpoint.thread_id,
        checkpoint_id=checkpoint.id,
        error=dict(error) if error else None,
    )
    object.__setattr__(state, "__tensorsketch_run__", info)


# -- decisions --------------------------------------------------------------------------------


async def apply_resume(run: Run, resume: Mapping[str, Any] | None) -> None:
    """Check ``resume=`` decisions against what the restored checkpoint waits for and record
    them in the journal (engine use, after the checkpoint is restored)."""
    if not resume:
        return
    if not isinstance(resume, Mapping):
        msg = (
            f"`resume=` takes a dict of decisions keyed by interrupt id, got "
            f"{type(resume).__name__} ({resume!r:.60})."
        )
        raise TypeError(msg)
    waiting = {p.id: p for p in run.restored_interrupts}
    if not waiting:
        msg = (
            f"thread {run.thread_id!r} is not suspended (nothing awaits a decision), but "
            "`resume=` was passed; invoke without it."
        )
        raise ValueError(msg)
    unknown = [key for key in resume if key not in waiting]
    if unknown:
        listed = ", ".join(repr(k) for k in waiting)
        msg = (
            f"`resume=` names {unknown!r}, which the run is not waiting on; it waits on "
            f"{listed}. Pass decisions only for those ids."
        )
        raise ValueError(msg)
    for key, decision in resume.items():
        if waiting[key].kind == "breakpoint":
            msg = (
                f"{key!r} is a breakpoint; it needs no decision: invoke the thread again "
                "without `resume=` (and without input) to continue past it."
            )
            raise ValueError(msg)
        if waiting[key].kind == "timer":
            msg = (
                f"{key!r} is a timer (it wakes at {waiting[key].wake_at}); it needs no decision, "
                "just invoke again after that time."
            )
            raise ValueError(msg)
        if waiting[key].kind == "approval":
            parse_approval(decision)  # fail now, not deep in the resumed run
    run.resume.clear()
    run.resume.update(resume)
    if run.effects.durable:
        for key, decision in resume.items():
            await run.effects.record(decision_key(run.step, key), _plain_decision(decision))


def _plain_decision(decision: Any) -> Any:
    if isinstance(decision, Mapping):
        return dict(decision)
    return decision


def parse_approval(decision: Any) -> tuple[bool, str | None]:
    """Read an approval decision: ``True``/``False``, ``"approve"``/``"reject"``, or
    ``{"approved": bool, "reason": str}``. Returns ``(approved, reason)``."""
    if isinstance(decision, bool):
        return decision, None
    if isinstance(decision, str):
        word = decision.strip().lower()
        if word in ("approve", "approved", "yes", "allow"):
            return True, None
        if word in ("reject", "rejected", "no", "deny", "denied"):
            return False, None
    if isinstance(decision, Mapping) and isinstance(decision.get("approved"), bool):
        reason = decision.get("reason")
        return bool(decision["approved"]), str(reason) if reason is not None else None
    msg = (
        f"an approval decision must be True/False, 'approve'/'reject', or "
        f"{{'approved': bool, 'reason': str}}, got {decision!r:.80}."
    )
    raise ValueError(msg)


# -- helpers a node body calls ----------------------------------------------------------------


async def interrupt(ctx: Context, value: Any = None, *, id: str | None = None) -> Any:
    """Suspend the run until a human answers; return the answer once resumed.

    The first time this line runs, the run suspends with a pending interrupt carrying
    ``value`` (show it to the person). After ``invoke(..., resume={id: answer})`` the node
    runs again and this call returns ``answer``. ``id`` defaults to a deterministic id built
    from the superstep, node and call order.
    """
    key = id if id is not None else ctx.next_key("interrupt")
    found, decision = await ctx.effects.decision(ctx.superstep, key)
    if found:
        return decision
    raise Interrupt(value, id=key, kind="interrupt")


def _epoch(when: float | _dt.datetime) -> float:
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


async def sleep_until(ctx: Context, when: float | _dt.datetime) -> None:
    """A durable timer: suspend the run until ``when`` instead of holding a process.

    The wake-up time is journaled the first time, so a re-run computes nothing new; invoking
    the thread after that time continues past this line.
    """
    wake = _epoch(when)
    key = ctx.next_key("sleep_until")
    recorded = await ctx.effects.once(key, lambda: wake)
    wake_at = float(recorded)
    if _now() < wake_at:
        raise Interrupt(id=key, kind="timer", wake_at=wake_at)


async def sleep(ctx: Context, seconds: float) -> None:
    """A durable ``asyncio.sleep``: suspend the run for ``seconds`` (see :func:`sleep_until`)."""
    if seconds < 0:
        msg = f"sleep() needs a non-negative number of seconds, got {seconds!r}."
        raise ValueError(msg)
    key = ctx.next_key("sleep")
    wake = await ctx.effects.once(key, lambda: _now() + seconds)
    if _now() < float(wake):
        raise Interrupt(id=key, kind="timer", wake_at=float(wake))
