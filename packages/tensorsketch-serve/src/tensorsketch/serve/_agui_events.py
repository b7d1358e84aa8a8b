"""A run's protocol-neutral events (:mod:`tensorsketch.serve.events`), as AG-UI events.

:class:`AguiRun` turns each :data:`~tensorsketch.serve.events.ServeEvent` into the
``ag_ui.core`` events it stands for:

====================================  ======================================================
serve event                           AG-UI
====================================  ======================================================
``RunStarted``                        ``RUN_STARTED`` (the client's thread and run ids)
``StepStarted`` / ``StepFinished``    ``STEP_STARTED`` / ``STEP_FINISHED``, named by node
``TextStarted`` / ``Delta`` / ``End``  ``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``
``ReasoningStarted``                  ``REASONING_START``, ``REASONING_MESSAGE_START``
``ReasoningDelta``                    ``REASONING_MESSAGE_CONTENT``
``ReasoningEnded``                    ``REASONING_MESSAGE_END``, ``REASONING_END``
``ToolCallStarted`` ... ``Result``    ``TOOL_CALL_START`` / ``_ARGS`` / ``_END`` / ``_RESULT``
``StateUpdated``                      ``STATE_SNAPSHOT`` the first time, then ``STATE_DELTA``
``Custom`` (``ctx.emit``)             ``CUSTOM`` (``name``, ``value``)
``RunSuspended``                      the tool calls awaiting approval, then ``RUN_FINISHED``
                                      with the ``interrupt`` outcome
``RunFinished``                       ``MESSAGES_SNAPSHOT``, then ``RUN_FINISHED``
``RunFailed``                         ``RUN_ERROR``
====================================  ======================================================

Every step still open is closed before the run ends, as AG-UI clients verify. On a resume, a
tool call the client already knows (one the run waited on, or one in the messages it sent) is
not announced again when the resumed run executes it: only its ``TOOL_CALL_RESULT`` is sent.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ag_ui import core as agui

from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.messages import Message
from tensorsketch.serve._agui_messages import args_json, to_agui
from tensorsketch.serve._agui_state import StateTracker
from tensorsketch.serve._agui_tools import FRONTEND_TOOL, frontend_call
from tensorsketch.serve.events import (
    Custom,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    ServeEvent,
    StateUpdated,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallArgs,
    ToolCallEnded,
    ToolCallResult,
    ToolCallStarted,
)

__all__ = ["APPROVAL_SCHEMA", "AguiRun", "to_interrupt"]

#: What a client answers an approval with (``resume[].payload``); ``true``/``false`` and
#: ``"approve"``/``"reject"`` are accepted as well, and no payload approves.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the tool call (true) or not."},
        "reason": {"type": "string", "description": "Why, for the model to read."},
    },
    "required": ["approved"],
}


def tool_result_id(call_id: str) -> str:
    """The id of the tool message a call's result becomes (in the stream and the snapshot)."""
    return f"{call_id}-result"


def to_interrupt(pending: PendingInterrupt) -> agui.Interrupt:
    """One thing a suspended run waits on, as an AG-UI interrupt (``metadata.kind`` keeps
    TensorSketch's own kind: ``approval``, ``interrupt`` or ``timer``)."""
    value = pending.value
    meta: dict[str, Any] = {"kind": pending.kind}
    if pending.node is not None:
        meta["node"] = pending.node
    if pending.kind == "approval" and isinstance(value, Mapping):
        tool, args = value.get("tool"), value.get("args")
        meta.update(tool=tool, args=args)
        return agui.Interrupt(
            id=pending.id,
            reason="tool_approval",
            message=f"Approve the call to {tool!r} with {args_json(args)}?",
            tool_call_id=str(value.get("call_id") or pending.id),
            response_schema=APPROVAL_SCHEMA,
            metadata=meta,
        )
    if pending.kind == "timer":
        when = datetime.fromtimestamp(pending.wake_at or 0.0, UTC).isoformat()
        return agui.Interrupt(
            id=pending.id,
            reason="timer",
            message=f"The run continues after {when}; start a run on this thread then.",
            expires_at=None,
            metadata={**meta, "wakeAt": when},
        )
    call = frontend_call(pending)
    if call is not None:
        tool, args = call[FRONTEND_TOOL], call.get("args")
        meta.update(tool=tool, args=args)
        return agui.Interrupt(
            id=pending.id,
            reason="tool_call",
            message=f"Run {tool!r} with {args_json(args)}; resume with its result.",
            tool_call_id=str(call.get("call_id") or pending.id),
            metadata=meta,
        )
    meta["value"] = value
    return agui.Interrupt(
        id=pending.id,
        reason="input",
        message=value if isinstance(value, str) else None,
        metadata=meta,
    )


class AguiRun:
    """The translation state of one AG-UI run.

    :param thread_id: / :param run_id: the client's ids, echoed on the run events.
    :param messages_key: the state field that holds the transcript (sent as messages, so it
        is left out of the shared state); ``None`` when the graph keeps none.
    :param client_messages: the conversation as the client sent it: the ids it already uses
        for messages the thread holds without an id of their own are kept in the snapshot.
    :param announced: ids of tool calls the client has already seen announced (on a resume:
        the calls the run waited on, and those in the client's messages).
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        messages_key: str | None,
        client_messages: Sequence[Message] = (),
        announced: Collection[str] = (),
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.messages_key = messages_key
        self._client: dict[tuple[str, Any], list[str]] = {}
        for message in client_messages:
            if message.id is not None:
                self._client.setdefault(_identity(message), []).append(message.id)
        self._state = StateTracker(exclude=(messages_key,) if messages_key else ())
        self._steps: list[tuple[tuple[str, ...], str, str]] = []  # (namespace, node, name)
        self._parent: dict[tuple[tuple[str, ...], str | None], str] = {}
        self._texts: dict[str, list[str]] = {}  # message id -> text pieces
        self._calls: set[str] = set()
        #: Calls the client knows already: their start/args/end are not sent again.
        self._known = set(announced)

    def feed(self, event: ServeEvent) -> list[Any]:
        """The AG-UI events one serve event becomes."""
        match event:
            case TextStarted() | TextDelta() | TextEnded():
                return self._text(event)
            case ReasoningStarted() | ReasoningDelta() | ReasoningEnded():
                return _reasoning(event)
            case ToolCallStarted() | ToolCallArgs() | ToolCallEnded():
                return self._tool_call(event)
            case ToolCallResult():
                self._parent.clear()  # the next model turn's calls belong to its own text
                return [self._result(event.id, event.content)]
            case StepStarted():
                return [agui.StepStartedEvent(step_name=self._step_open(event))]
            case StepFinished():
                name = self._step_close(event)
                return [agui.StepFinishedEvent(step_name=name)] if name else []
            case StateUpdated():
                return self.state(event.values)
            case Custom():
                return [agui.CustomEvent(name=event.name, value=event.value)]
            case RunStarted():
                return [
                    agui.RunStartedEvent(
                        thread_id=self.thread_id,
                        run_id=self.run_id,
                        protocol_version=agui.PROTOCOL_VERSION,
                    )
                ]
            case RunSuspended():
                return self._suspended(event)
            case RunFinished():
                return self._finished(event)
            case RunFailed():
                return [
                    *self._close_steps(),
                    agui.RunErrorEvent(message=event.message, code=_error_code(event)),
                ]
        return []  # pragma: no cover - every serve event is matched above

    def _text(self, event: TextStarted | TextDelta | TextEnded) -> list[Any]:
        if isinstance(event, TextDelta):
            self._texts.setdefault(event.message_id, []).append(event.text)
            return [agui.TextMessageContentEvent(message_id=event.message_id, delta=event.text)]
        if isinstance(event, TextStarted):
            self._parent[(event.namespace, event.node)] = event.message_id
            return [agui.TextMessageStartEvent(message_id=event.message_id, role="assistant")]
        return [agui.TextMessageEndEvent(message_id=event.message_id)]

    def state(self, values: Mapping[str, Any]) -> list[Any]:
        """A snapshot the first time, then the patch from the state last sent (if any)."""
        update = self._state.update(values)
        if update is None:
            return []
        kind, body = update
        if kind == "snapshot":
            return [agui.StateSnapshotEvent(snapshot=body)]
        return [agui.StateDeltaEvent.model_validate({"delta": body})]

    def snapshot(self, messages: Sequence[Message]) -> list[Any]:
        """The transcript as AG-UI messages, under ids that stay put from run to run.

        In order of preference: the message's own id; the id the client already uses for it
        (matched by role and text, or by tool calls); the stream's message id, for an
        assistant message streamed in this run (matched from the end, by text); its call's
        result id, for a tool result; else its place in the thread, which stays put because
        a transcript only grows.
        """
        client = {key: list(ids) for key, ids in self._client.items()}
        ids: list[str | None] = []
        for message in messages:
            known = client.get(_identity(message))
            ids.append(message.id if message.id is not None else known.pop(0) if known else None)
        streamed = [(mid, "".join(parts)) for mid, parts in self._texts.items()]
        for i in range(len(messages) - 1, -1, -1):
            if not streamed:
                break
            message = messages[i]
            if ids[i] is None and message.role == "assistant" and message.text == streamed[-1][1]:
                ids[i] = streamed.pop()[0]
        named = [
            found
            if found is not None
            else tool_result_id(m.tool_call_id)
            if m.role == "tool" and m.tool_call_id
            else f"{self.thread_id}:{i}"
            for i, (m, found) in enumerate(zip(messages, ids))
        ]
        return to_agui(messages, named)

    # -- pieces -----------------------------------------------------------------------------

    def _step_open(self, event: StepStarted) -> str:
        base = "/".join((*event.namespace, event.node))
        active = {name for _, _, name in self._steps}
        name, n = base, 1
        while name in active:  # the same node fanned out: each task its own step
            n += 1
            name = f"{base}#{n}"
        self._steps.append((event.namespace, event.node, name))
        return name

    def _step_close(self, event: StepFinished) -> str | None:
        for index, (namespace, node, name) in enumerate(self._steps):
            if namespace == event.namespace and node == event.node:
                del self._steps[index]
                return name
        return None

    def _close_steps(self) -> list[Any]:
        closing = [agui.StepFinishedEvent(step_name=name) for *_, name in reversed(self._steps)]
        self._steps.clear()
        return closing

    def _tool_call(self, event: ToolCallStarted | ToolCallArgs | ToolCallEnded) -> list[Any]:
        """A call's start/args/end, unless the client knows the call already (a resume)."""
        if event.id in self._known:
            return []
        if isinstance(event, ToolCallArgs):
            return [agui.ToolCallArgsEvent(tool_call_id=event.id, delta=event.delta)]
        if isinstance(event, ToolCallEnded):
            return [agui.ToolCallEndEvent(tool_call_id=event.id)]
        parent = self._parent.get((event.namespace, event.node))
        return self._call_started(event.id, event.name, parent)

    def _call_started(self, call_id: str, name: str, parent: str | None) -> list[Any]:
        self._calls.add(call_id)
        return [
            agui.ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=name, parent_message_id=parent
            )
        ]

    def _result(self, call_id: str, content: str) -> Any:
        return agui.ToolCallResultEvent(
            message_id=tool_result_id(call_id), tool_call_id=call_id, content=content, role="tool"
        )

    def _suspended(self, event: RunSuspended) -> list[Any]:
        out: list[Any] = []
        for pending in event.approvals:  # show what the approval is about
            value = pending.value if isinstance(pending.value, Mapping) else {}
            call_id = str(value.get("call_id") or pending.id)
            if call_id in self._calls or call_id in self._known:
                continue
            parent = self._parent.get(((), pending.node))
            out += self._call_started(call_id, str(value.get("tool", "")), parent)
            out.append(
                agui.ToolCallArgsEvent(tool_call_id=call_id, delta=args_json(value.get("args")))
            )
            out.append(agui.ToolCallEndEvent(tool_call_id=call_id))
        out += self.state(event.values)
        out += self._close_steps()
        outcome = agui.RunFinishedInterruptOutcome(
            interrupts=[to_interrupt(p) for p in event.interrupts]
        )
        out.append(
            agui.RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)
        )
        return out

    def _finished(self, event: RunFinished) -> list[Any]:
        values = dict(event.state)
        out = self.state(values)
        out += self._close_steps()
        transcript = values.get(self.messages_key) if self.messages_key else None
        if isinstance(transcript, list):
            out.append(agui.MessagesSnapshotEvent(messages=self.snapshot(transcript)))
        out.append(
            agui.RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=event.reply or None,
                outcome=agui.RunFinishedSuccessOutcome(),
            )
        )
        return out


def _reasoning(event: ReasoningStarted | ReasoningDelta | ReasoningEnded) -> list[Any]:
    """A run of the model's reasoning as one AG-UI reasoning message."""
    if isinstance(event, ReasoningDelta):
        return [agui.ReasoningMessageContentEvent(message_id=event.message_id, delta=event.text)]
    if isinstance(event, ReasoningStarted):
        return [
            agui.ReasoningStartEvent(message_id=event.message_id),
            agui.ReasoningMessageStartEvent(message_id=event.message_id),
        ]
    return [
        agui.ReasoningMessageEndEvent(message_id=event.message_id),
        agui.ReasoningEndEvent(message_id=event.message_id),
    ]


def _identity(message: Message) -> tuple[str, Any]:
    """What makes two copies of a message the same message: its role and text, or (for a
    turn without text) its tool calls, or (for a tool result) the call it answers."""
    if message.role == "tool":
        return ("tool", message.tool_call_id)
    if message.text:
        return (message.role, message.text)
    return (message.role, tuple(call.id for call in message.tool_calls))


def _error_code(event: RunFailed) -> str:
    """A machine-readable code for a failed run: what kind of failure, by HTTP status."""
    return {
        400: "bad_input",
        409: "thread_busy",
        429: "rate_limited",
        502: "provider_error",
    }.get(event.status, "internal_error")
