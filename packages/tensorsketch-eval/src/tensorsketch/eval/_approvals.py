"""Approvals inside a trial: ``Case(approve=...)`` plays the reviewer.

A run that stops for a human (a tool with ``requires_approval=True``, or a node's
``interrupt``) suspends; without a reviewer the trial ends there, suspended. With an approval
policy the trial runs on a durable thread, and each time the run suspends the policy decides
what it waits for and the run resumes with those decisions — so graders see the run that
follows a yes or a no. A policy is a dict ``{tool_name: decision}`` (JSON, so it also travels
to a child process) or a function ``policy(pending) -> decision`` (``None``: undecided).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tensorsketch.eval.exceptions import EvalError
from tensorsketch.interrupts import PendingInterrupt, parse_approval, run_info
from tensorsketch.observability.tracing import Tracer
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend

__all__ = ["ApprovalPolicy", "check_policy", "run_with_reviewer", "trial_thread"]

#: ``{tool_name: decision}``, or ``policy(pending) -> decision | None``.
ApprovalPolicy = Mapping[str, Any] | Callable[[PendingInterrupt], Any]

#: Kinds of waiting no reviewer decides: the trial ends at them, suspended.
_NO_DECISION = frozenset({"timer", "breakpoint"})

#: A run that keeps asking is stopped after this many rounds of decisions.
MAX_ROUNDS = 50


def check_policy(case: str, approve: Any) -> None:
    """Refuse a policy that cannot work before any trial runs, naming the case."""
    if approve is None or callable(approve):
        return
    if not isinstance(approve, Mapping):
        msg = (
            f"case {case!r}: approve= takes a dict {{tool_name: decision}} or a function "
            f"policy(pending) -> decision, got {type(approve).__name__}."
        )
        raise EvalError(msg)
    for tool, decision in approve.items():
        try:
            parse_approval(decision)
        except ValueError as exc:
            msg = f"case {case!r}: approve={{{tool!r}: ...}}: {exc}"
            raise EvalError(msg) from None


def trial_thread(case: str, index: int) -> str:
    """A thread id no other trial uses."""
    return f"eval-{case}-{index}-{uuid.uuid4().hex[:10]}"


def _describe(pending: PendingInterrupt) -> str:
    value = pending.value if isinstance(pending.value, Mapping) else {}
    if pending.kind == "approval":
        return f"approval of {value.get('tool')!r} (call {pending.id!r})"
    return f"{pending.kind} {pending.id!r} ({pending.value!r:.80})"


async def _decide(
    policy: ApprovalPolicy, pending: PendingInterrupt, case: str
) -> tuple[Any, str | None]:
    """The policy's answer for one pending wait, and the tool it concerns."""
    value = pending.value if isinstance(pending.value, Mapping) else {}
    tool = str(value["tool"]) if pending.kind == "approval" and "tool" in value else None
    if callable(policy):
        answer = policy(pending)
        if inspect.isawaitable(answer):
            answer = await answer
    else:
        answer = policy.get(tool) if tool is not None else None
    if answer is None:
        how = (
            f"add {{{tool!r}: True}} (or False) to approve="
            if tool is not None
            else "give approve= a function that answers it"
        )
        msg = (
            f"case {case!r}: the run suspended waiting on {_describe(pending)}, which the "
            f"case's approve= does not decide; {how}."
        )
        raise EvalError(msg)
    return answer, tool


async def run_with_reviewer(
    graph: Any,
    start: Callable[[str, Backend], Awaitable[Any]],
    *,
    policy: ApprovalPolicy,
    case: str,
    thread_id: str,
    backend: Backend | None = None,
    tracer: Tracer | None = None,
    deps: Any = None,
    decisions: list[dict[str, Any]],
) -> Any:
    """Start the run with ``start(thread_id, backend)``; while it is suspended on something
    the policy decides, resume it with the decisions. Each decision is appended to
    ``decisions`` as it is made (so a timeout keeps the ones made so far)."""
    store = backend if backend is not None else InMemoryBackend()
    state = await start(thread_id, store)
    for _ in range(MAX_ROUNDS):
        info = run_info(state) if hasattr(state, "__dict__") else None
        if info is None or not info.suspended:
            return state
        waiting = [p for p in info.interrupts if p.kind not in _NO_DECISION]
        if not waiting:
            return state  # a timer or a breakpoint: the trial ends suspended on it
        resume: dict[str, Any] = {}
        for pending in waiting:
            answer, tool = await _decide(policy, pending, case)
            resume[pending.id] = answer
            value = pending.value if isinstance(pending.value, Mapping) else {}
            decisions.append(
                {
                    "id": pending.id,
                    "kind": pending.kind,
                    "tool": tool,
                    "args": value.get("args") if tool is not None else pending.value,
                    "decision": answer,
                }
            )
        state = await graph.invoke(
            thread_id=thread_id, backend=store, resume=resume, tracer=tracer, deps=deps
        )
    msg = (
        f"case {case!r}: the run was still asking for decisions after {MAX_ROUNDS} rounds; "
        "does the policy answer what the run waits for?"
    )
    raise EvalError(msg)
