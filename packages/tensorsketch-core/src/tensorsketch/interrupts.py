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
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tensorsketch.context import Context
from tensorsketch.errors import ApprovalMismatchError
from tensorsketch.schema import Schema
from tensorsketch.suspension import (
    Interrupt,
    InterruptKind,
    PendingInterrupt,
    RetryLater,
)

__all__ = [
    "Interrupt",
    "InterruptKind",
    "PendingInterrupt",
    "RetryLater",
    "RunInfo",
    "approval_digest",
    "bind_approval",
    "interrupt",
    "parse_approval",
    "run_info",
    "sleep",
    "sleep_until",
    "tool_call_digest",
]

RunStatus = Literal["completed", "suspended", "failed", "pending"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """How a run ended: completed, or suspended waiting on ``interrupts``.

    On a state read back with ``get_state`` it can also be ``"failed"`` (``error`` says which
    task raised what: ``{"node", "instance", "step", "type", "message"}``) or ``"pending"``
    (tasks are planned: the run is going on, or its process stopped); invoking the thread
    again continues either.

    ``decisions`` holds the decisions already recorded for ``interrupts`` (read back with
    ``get_state``): a run resumed with them that stopped before its next checkpoint (a crash)
    still lists what it waited on, but a decided interrupt is no longer ``awaiting``, and a
    thread whose every interrupt is decided is ``"pending"``: invoke it (without
    ``resume=``) to finish with those decisions. A different decision for a decided id is
    refused (:class:`~tensorsketch.errors.DecisionConflictError`).
    """

    status: RunStatus = "completed"
    interrupts: tuple[PendingInterrupt, ...] = field(default_factory=tuple)
    thread_id: str | None = None
    checkpoint_id: str | None = None
    error: dict[str, Any] | None = None
    decisions: Mapping[str, Any] = field(default_factory=dict)
    #: ``get_state(..., subgraphs=True)``: the state of each subgraph node the thread's next
    #: superstep runs and that has started (running, suspended or failed inside), by task
    #: (``"Research"``, ``"Research#0"`` for a ``Send`` instance); each carries its own
    #: ``run_info`` with its own ``subgraphs``.
    subgraphs: Mapping[str, Any] = field(default_factory=dict)

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
        decided = self.decisions
        return [p.id for p in self.interrupts if p.kind not in _NO_DECISION and p.id not in decided]

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


# -- decisions --------------------------------------------------------------------------------


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
        _check_decision_fields(decision)
        reason = decision.get("reason")
        return bool(decision["approved"]), reason
    msg = (
        f"an approval decision must be True/False, 'approve'/'reject', or "
        f"{{'approved': bool, 'reason': str}}, got {decision!r:.80}."
    )
    raise ValueError(msg)


#: What a decision given as a mapping may hold besides ``approved`` (a bool), and the type of
#: each: a ``reason`` the agent is told, and what binds it to one call (``call_id``,
#: ``digest``, ``args``: see :func:`bind_approval`).
_DECISION_FIELDS: dict[str, tuple[type, ...]] = {
    "approved": (bool,),
    "reason": (str,),
    "call_id": (str,),
    "digest": (str,),
    "args": (Mapping,),
}


def _check_decision_fields(decision: Mapping[str, Any]) -> None:
    """Refuse a key a decision does not have, or a value of the wrong type: a recorded
    decision is final, so a typo (``"reasn"``) or a wrong type must not be stored as given."""
    for key, value in decision.items():
        kinds = _DECISION_FIELDS.get(key) if isinstance(key, str) else None
        if kinds is None:
            known = ", ".join(_DECISION_FIELDS)
            msg = f"an approval decision has no field {key!r} (it takes {known})."
            raise ValueError(msg)
        if value is not None and not isinstance(value, kinds):
            want = "an object" if kinds == (Mapping,) else kinds[0].__name__
            msg = f"an approval decision's {key!r} must be {want}, got {value!r:.40}."
            raise ValueError(msg)


def tool_call_digest(name: str, args: Any) -> str:
    """A digest of one tool call (its tool's name and arguments): what an approval is bound
    to, so it cannot approve the same call id with other arguments. Key order is ignored."""
    text = json.dumps(
        {"tool": name, "args": args}, sort_keys=True, separators=(",", ":"), default=repr
    )
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def bind_approval(pending: PendingInterrupt, decision: Any) -> Any:
    """The approval ``decision`` bound to the call ``pending`` asks about, as it is recorded:
    ``{"approved", "reason", "digest"}`` with the pending call's digest.

    A decision may name what it was given for — ``call_id``, ``digest`` (from the pending
    approval's value) and/or ``args`` — and is refused (:class:`ApprovalMismatchError`,
    nothing recorded) when any of them differs from the pending call. A decision naming
    none of them (``True``, ``"approve"``) binds to the call pending when it arrives: the
    call shown to whoever decides at that moment, never a later edit of it.
    """
    approved, reason = parse_approval(decision)
    value = pending.value if isinstance(pending.value, Mapping) else {}
    digest = value.get("digest")
    if not isinstance(digest, str):
        return decision  # asked before approvals carried a digest: nothing to bind to
    if isinstance(decision, Mapping):
        differs = _approval_differs(value, decision, digest)
        if differs is not None:
            shown = json.dumps(value.get("args"), sort_keys=True, default=repr)
            msg = (
                f"the approval for {pending.id!r} does not match the call the run waits on "
                f"({value.get('tool')}({shown:.200}), digest {digest}): {differs}. The call "
                "changed since the approval was asked (an edit, a fork or a re-plan); read the "
                "pending approval again and decide on the call it shows. Nothing was recorded."
            )
            raise ApprovalMismatchError(msg, interrupt_id=pending.id, differs=differs)
    return {"approved": approved, "reason": reason, "digest": digest}


def _approval_differs(
    value: Mapping[str, Any], decision: Mapping[str, Any], digest: str
) -> str | None:
    """What the decision names that the pending call (``value``) is not, or ``None``."""
    call_id = decision.get("call_id")
    if call_id is not None and call_id != value.get("call_id"):
        return f"it names call {call_id!r}, the pending call is {value.get('call_id')!r}"
    args = decision.get("args")
    if args is not None:
        current = value.get("args")
        if isinstance(args, Mapping) and isinstance(current, Mapping):
            keys = sorted(
                (k for k in {*args, *current} if args.get(k, _MISSING) != current.get(k, _MISSING)),
                key=str,
            )
            if keys:
                parts = [
                    f"{k}: {_shown(args.get(k, _MISSING))} approved, "
                    f"{_shown(current.get(k, _MISSING))} pending"
                    for k in keys
                ]
                return "arguments differ (" + "; ".join(parts) + ")"
        elif args != current:
            return f"arguments differ ({_shown(args)} approved, {_shown(current)} pending)"
    given = decision.get("digest")
    if given is not None and given != digest:
        return f"it was given for arguments with digest {given!r}, the pending call's is {digest!r}"
    return None


_MISSING = object()


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    return json.dumps(value, sort_keys=True, default=repr)[:80]


def approval_digest(decision: Any) -> str | None:
    """The digest a recorded approval is bound to (``None``: recorded unbound, by a version
    before approvals carried one)."""
    if isinstance(decision, Mapping):
        digest = decision.get("digest")
        return digest if isinstance(digest, str) else None
    return None


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


async def sleep_until(ctx: Context, when: float | _dt.datetime) -> None:
    """A durable timer: suspend the run until ``when`` instead of holding a process.

    The wake-up time is journaled the first time, so a re-run computes nothing new; invoking
    the thread after that time continues past this line. The same as ``ctx.sleep_until``.
    """
    await ctx.sleep_until(when)


async def sleep(ctx: Context, seconds: float) -> None:
    """A durable ``asyncio.sleep``: suspend the run for ``seconds`` (see :func:`sleep_until`).
    The same as ``ctx.sleep``."""
    await ctx.sleep(seconds)
