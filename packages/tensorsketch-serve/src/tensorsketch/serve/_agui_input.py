"""Reading an AG-UI ``RunAgentInput``: what the graph gets, and what a resume decides.

Everything here runs before the response starts, so a request that cannot run is answered
with a 4xx naming what to change, never with a stream that fails halfway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui import core as agui
from pydantic import ValidationError

from tensorsketch.interrupts import PendingInterrupt, bind_approval, parse_approval
from tensorsketch.messages import Message
from tensorsketch.serve._agui_tools import frontend_call, frontend_decision
from tensorsketch.serve._http import ServeError

__all__ = ["new_messages", "parse_input", "resume_decisions", "state_input"]


def parse_input(body: Any) -> agui.RunAgentInput:
    """Validate the decoded JSON body as a ``RunAgentInput`` (a 422 naming the first problem
    and its field, and how many more there are)."""
    if not isinstance(body, dict):
        msg = (
            f"the body must be a JSON object (an AG-UI RunAgentInput), got "
            f'{type(body).__name__}; send {{"threadId", "runId", "messages", ...}}.'
        )
        raise ServeError(422, msg)
    try:
        return agui.RunAgentInput.model_validate(body)
    except ValidationError as exc:
        problems = [
            {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        first = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        msg = (
            f"the body is not a valid AG-UI RunAgentInput: `{first['loc'] or 'body'}`: "
            f"{first['msg']}{more}. Send threadId, runId and messages as the AG-UI spec "
            "describes."
        )
        raise ServeError(422, msg, param=first["loc"] or None, code=first["type"]) from None


def state_input(state: Any, fields: Mapping[str, Any], messages_key: str | None) -> dict[str, Any]:
    """The client's shared state as graph input: the keys that are state fields.

    The transcript field is left out (messages travel as ``messages``). A key the graph's
    state does not have is refused, so a typo does not vanish silently.
    """
    if state is None:
        return {}
    if not isinstance(state, dict):
        msg = (
            f"`state` must be a JSON object of the graph's state fields, got "
            f'{type(state).__name__}; send {{}} or e.g. {{"{next(iter(fields), "x")}": ...}}.'
        )
        raise ServeError(422, msg, param="state")
    unknown = sorted(k for k in state if k not in fields)
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        msg = (
            f"`state` has {unknown!r}, which the graph's state does not have; its fields are: "
            f"{known}."
        )
        raise ServeError(422, msg, param="state")
    return {k: v for k, v in state.items() if k != messages_key}


def new_messages(messages: Sequence[Message], thread_exists: bool) -> list[Message]:
    """The messages to add to the thread.

    A new (or non-durable) thread gets the whole conversation. A thread the server already
    holds keeps its own transcript — the client's copy of the agent's turns is not written
    back — and gets the messages after the client's last assistant or tool message (the new
    turn). Messages keep their ids, so a resent one replaces itself instead of repeating.
    """
    if not thread_exists:
        return list(messages)
    last = max((i for i, m in enumerate(messages) if m.role in ("assistant", "tool")), default=-1)
    return [m for m in messages[last + 1 :] if m.role not in ("assistant", "tool")]


def resume_decisions(
    entries: Sequence[agui.ResumeEntry], pending: Sequence[PendingInterrupt]
) -> dict[str, Any]:
    """``resume[]`` entries as the engine's decisions, checked against what the thread waits on.

    ``resolved`` passes the payload (for an approval: ``true``/``false``, ``"approve"`` /
    ``"reject"`` or ``{"approved", "reason"}``; no payload approves; for a frontend tool call:
    the tool's result); ``cancelled`` rejects an approval, makes a frontend tool call an error
    result and answers a question with ``null``. A timer needs no decision, so its entry
    is accepted and dropped.
    """
    if not pending:
        msg = (
            "`resume` was sent, but the thread is not waiting on anything; start a run "
            "without `resume`."
        )
        raise ServeError(409, msg, param="resume", code="thread_not_suspended")
    waiting = {p.id: p for p in pending}
    decisions: dict[str, Any] = {}
    for entry in entries:
        found = waiting.get(entry.interrupt_id)
        if found is None:
            listed = ", ".join(repr(k) for k in waiting)
            msg = (
                f"`resume` answers interrupt {entry.interrupt_id!r}, which the thread is not "
                f"waiting on; it waits on {listed}."
            )
            raise ServeError(422, msg, param="resume")
        if found.kind == "timer":
            continue
        decisions[found.id] = _decision(entry, found)
    return decisions


def _decision(entry: agui.ResumeEntry, pending: PendingInterrupt) -> Any:
    if frontend_call(pending) is not None:
        return frontend_decision(entry.status, entry.payload)
    if pending.kind != "approval":
        return entry.payload if entry.status == "resolved" else None
    if entry.status == "cancelled":
        return {"approved": False, "reason": "the user cancelled the request"}
    if entry.payload is None:
        return True
    try:  # a decision, bound to the call it was given for (its `digest`, `call_id`, `args`)
        parse_approval(entry.payload)
        bind_approval(pending, entry.payload)
    except ValueError as exc:  # ApprovalMismatchError included: the call changed since
        msg = f"`resume` entry for {entry.interrupt_id!r}: {exc}"
        raise ServeError(422, msg, param="resume") from None
    return entry.payload
