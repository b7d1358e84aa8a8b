"""The A2A task lifecycle over a graph: messages in, durable runs, task states out.

This module speaks A2A 1.0's JSON (camelCase, ``TASK_STATE_*``); the JSON-RPC layer turns 0.3
requests into it and its answers back. How a run maps to a task:

=================================  ===========================================================
the run                            the task
=================================  ===========================================================
created, not started               ``submitted``
running                            ``working`` (token deltas stream as an artifact's chunks)
finished                           ``completed``: the reply as the ``answer`` artifact (an
                                   agent's structured output as ``output``, and the app's
                                   ``to_artifacts``; see :mod:`._parts`) and an agent message
suspended on an approval or a      ``input-required``: the status message says what is asked;
question (``interrupt()``)         the next message on the task is the answer and resumes it
suspended at a static breakpoint   ``input-required``, saying where; any next message on the
(``interrupt_before/after``)       task continues the run (it is not read as an answer)
suspended on a durable timer       ``working``, with a status message naming the wake-up time
raised                             ``failed``: the status message carries the error
``CancelTask``                     ``canceled`` (the run is stopped; its thread stays readable)
=================================  ===========================================================

A streaming client that disconnects does not cancel the task (A2A tasks outlive connections:
``SubscribeToTask`` picks it up again, ``CancelTask`` stops it). Status changes and finished
artifacts also go to the task's push notification webhooks (see :mod:`._push`): the terminal
status and each ``input-required`` at least once, recorded as owed before the status is
written and swept by every server (:meth:`TaskService.sweep_push`); the rest best-effort.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorsketch.errors import ApprovalMismatchError, ThreadBusyError
from tensorsketch.interrupts import PendingInterrupt, bind_approval, parse_approval
from tensorsketch.messages import Message
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.serve._adapter import ChatAdapter
from tensorsketch.serve._threads import thread_info
from tensorsketch.serve.a2a import _errors as errors
from tensorsketch.serve.a2a._parts import (
    ANSWER,
    OUTPUT,
    ToArtifacts,
    artifacts_for,
    message_text,
    to_chat,
)
from tensorsketch.serve.a2a._push import PushSender, PushTarget, task_as_v03
from tensorsketch.serve.a2a._store import TERMINAL, TaskRecord, TaskStore
from tensorsketch.serve.events import RunFailed, RunFinished, RunSuspended, TextDelta, run_events

__all__ = ["TaskService"]

log = logging.getLogger("tensorsketch.serve.a2a")

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
_STATES = {
    SUBMITTED,
    WORKING,
    COMPLETED,
    FAILED,
    CANCELED,
    INPUT_REQUIRED,
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
}
_MAX_PAGE = 100
#: Seconds past a task's timer before a subscriber's server wakes a task it did not run
TIMER_GRACE = 2.0
#: States in which a task waits for the client (a subscription following it ends there).
_INTERRUPTED = {INPUT_REQUIRED, "TASK_STATE_AUTH_REQUIRED"}
_DEFAULT_PAGE = 50
#: States whose push notification is owed durably (the rest are best-effort).
_OWED = TERMINAL | {INPUT_REQUIRED}


@dataclass
class _Live:
    """A run going on in this process: its task, and the streams listening to it."""

    task: TaskRecord
    #: what the run starts with: the graph input for a new task, decisions for a resumed one
    input: Any = None
    resume: dict[str, Any] | None = None
    listeners: list[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None
    cancel_requested: bool = False

    def listen(self) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.listeners.append(queue)
        return queue

    def publish(self, item: dict[str, Any] | None) -> None:
        for queue in self.listeners:
            queue.put_nowait(item)


def agent_message(text: str, data: Any = None) -> dict[str, Any]:
    """An A2A 1.0 message from the agent: a text part, and a data part when ``data`` is set."""
    parts: list[dict[str, Any]] = [{"text": text}]
    if data is not None:
        parts.append({"data": data, "mediaType": "application/json"})
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_AGENT", "parts": parts}


class TaskService:
    """A2A's task operations for one graph, its tasks kept in ``backend``."""

    def __init__(
        self,
        graph: CompiledGraph[Any],
        backend: Backend,
        adapter: ChatAdapter,
        *,
        namespace: str,
        max_steps: int = 25,
        poll_interval: float = 0.25,
        push: PushSender | None = None,
        to_artifacts: ToArtifacts | None = None,
        message_replies: bool = False,
        deps: Any = None,
    ) -> None:
        self.graph = graph
        #: what every task's run reads as ``ctx.deps``
        self.deps = deps
        #: ``state -> {name: value}``: a finished task's artifacts besides its answer
        self.to_artifacts = to_artifacts
        #: answer a blocking SendMessage that starts and completes a task with the agent's
        #: Message rather than the Task
        self.message_replies = message_replies
        #: delivers push notifications (``None``: the agent offers none)
        self.push = push
        self.store = TaskStore(backend, namespace)
        if push is not None:
            push.store = self.store
        self.adapter = adapter
        self.max_steps = max_steps
        self._live: dict[str, _Live] = {}
        #: tasks a request is about to continue (claimed before its first await, so two
        #: messages racing on one input-required task cannot both resume it)
        self._claimed: set[str] = set()
        #: timer wake-ups scheduled in this process, by task id
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[None]] = set()
        #: subscribers of tasks with no run in this process, joined to the next one started
        self._waiting: dict[str, list[asyncio.Queue[dict[str, Any] | None]]] = {}
        #: how often a subscriber re-reads a task nothing here is running (another process
        #: may be running it, or it waits for a timer or an answer)
        self.poll_interval = poll_interval

    # -- SendMessage / SendStreamingMessage ------------------------------------------------

    async def send(self, params: dict[str, Any], *, surface: str = "1.0") -> dict[str, Any]:
        """``SendMessage``: start or continue a task; by default wait until it stops."""
        live, config = await self._begin(params, listening=False, surface=surface)
        if not config.get("returnImmediately") and live.runner is not None:
            # wait() neither cancels the run if this request goes away, nor raises when a
            # CancelTask stops the run (the answer is then the canceled task)
            await asyncio.wait([live.runner])
        task = live.task
        message = task.status.get("message")
        if (
            self.message_replies
            and task.state == COMPLETED
            and not params["message"].get("taskId")
            and message is not None
        ):
            return {"message": message}  # it names its taskId: GetTask still finds the task
        return {"task": task.to_json(history_length=config.get("historyLength"))}

    async def send_stream(
        self, params: dict[str, Any], *, surface: str = "1.0"
    ) -> AsyncIterator[dict[str, Any]]:
        """``SendStreamingMessage``: the task, then its status and artifact updates live.

        Validation happens before the first item, so a bad request is a plain JSON-RPC error
        rather than a stream that fails.
        """
        live, _config = await self._begin(params, listening=True, surface=surface)
        return self._follow(live, live.listeners[-1])

    async def _begin(
        self, params: dict[str, Any], *, listening: bool, surface: str = "1.0"
    ) -> tuple[_Live, dict[str, Any]]:
        message = params.get("message")
        if not isinstance(message, dict) or not message.get("parts"):
            msg = "`message` with at least one part is required, e.g. {'parts': [{'text': 'hi'}]}."
            raise errors.invalid_params(msg)
        for number, part in enumerate(message["parts"], 1):
            if not ("text" in part or "data" in part or part.get("raw") or part.get("url")):
                msg = (
                    f"part {number} of the message has no content; give it `text`, `data`, "
                    "`url` or `raw` (base64)."
                )
                raise errors.invalid_params(msg)
        if not message.get("messageId"):
            msg = "`message.messageId` is required: a unique id the client gives each message."
            raise errors.invalid_params(msg)
        if message.get("role") != "ROLE_USER":
            role = message.get("role") or "none"
            msg = f'a message sent to an agent needs `message.role` "ROLE_USER", got {role}.'
            raise errors.invalid_params(msg)
        config = params.get("configuration") or {}
        _check_output_modes(config.get("acceptedOutputModes"))
        _check_history_length(config.get("historyLength"), "configuration.historyLength")
        webhook = config.get("taskPushNotificationConfig")
        if webhook is not None:  # checked before a task exists, so a refusal leaves none
            await self._push_sender().check(str(webhook.get("url", "")))
        task_id = message.get("taskId") or ""
        context_id = message.get("contextId") or None
        if context_id is not None and len(context_id) > 128:
            raise errors.invalid_params("`contextId` is longer than 128 characters.")
        if task_id:
            if task_id in self._live or task_id in self._claimed:
                msg = (
                    f"task {task_id!r} is still working; wait for it (SubscribeToTask) or "
                    "cancel it (CancelTask) before sending it another message."
                )
                raise errors.unsupported(msg)
            self._claimed.add(task_id)
            try:
                live = await self._continue(task_id, context_id, message)
            finally:
                self._claimed.discard(task_id)
        else:
            live = await self._start(context_id, message)
        if webhook is not None:
            target = PushTarget(_push_config(webhook, live.task.id), surface)
            await self.store.set_push(live.task, target)
        if listening:
            live.listen()
        live.runner = asyncio.get_running_loop().create_task(self._drive(live))
        return live, config

    async def _start(self, context_id: str | None, message: dict[str, Any]) -> _Live:
        earlier: list[Message] = []
        if context_id is not None:
            for task in await self.store.in_context(context_id):
                earlier.extend(to_chat(m) for m in task.history)
        graph_input = self._input([*earlier, to_chat(message)])
        task = await self.store.create(context_id, message)
        live = _Live(task, input=graph_input)
        self._live[task.id] = live
        return live

    def _input(self, messages: list[Message]) -> Any:
        try:
            return self.adapter.input_for(messages)
        except Exception as exc:
            msg = f"the agent could not read this message ({type(exc).__name__}: {exc})."
            raise errors.invalid_params(msg) from exc

    async def _continue(
        self, task_id: str, context_id: str | None, message: dict[str, Any]
    ) -> _Live:
        task = await self.store.get(task_id)
        if task is None:
            raise errors.task_not_found(task_id)
        await self._reconcile(task)
        if context_id is not None and context_id != task.context_id:
            msg = f"task {task_id!r} belongs to context {task.context_id!r}, not {context_id!r}."
            raise errors.invalid_params(msg)
        if task.terminal:
            msg = (
                f"task {task_id!r} is {errors.state_word(task.state)}; send the message "
                f"without `taskId` (and with contextId {task.context_id!r}) to start a new task "
                "in the same conversation."
            )
            raise errors.unsupported(msg)
        found = await thread_info(self.graph, task.thread_id, self.store.backend)
        pending = found[1].interrupts if found is not None else ()
        resume = _decisions(task_id, pending, message) if pending else None
        # A run that never reached its first checkpoint starts over from the task's messages.
        start = None
        if found is None:
            start = self._input([*map(to_chat, task.history), to_chat(message)])
        await self.store.add_message(task, message)
        live = _Live(task, input=start, resume=resume)
        self._register(live)
        return live

    def _register(self, live: _Live) -> None:
        """Make ``live`` the task's run in this process; subscribers waiting on the task
        (see :meth:`_watch`) listen to it from its first event."""
        self._live[live.task.id] = live
        live.listeners.extend(self._waiting.pop(live.task.id, ()))

    def _wake(self, task: TaskRecord) -> None:
        """Continue a task whose run sleeps on a durable timer that is now due."""
        live = _Live(task)
        self._register(live)
        live.runner = asyncio.get_running_loop().create_task(self._drive(live))

    async def _drive(self, live: _Live) -> None:
        """Run (or resume) the task's graph thread and record every state it passes through."""
        task = live.task
        try:
            self._emit(live, {"task": task.to_json()})
            await self._status(live, WORKING)
            streamed = False
            events = run_events(
                self.graph,
                self.adapter,
                input=live.input,
                resume=live.resume,
                thread_id=task.thread_id,
                backend=self.store.backend,
                max_steps=self.max_steps,
                deps=self.deps,
            )
            try:
                async for event in events:
                    if isinstance(event, TextDelta) and not event.namespace and event.text:
                        self._emit(
                            live, _artifact_update(task, event.text, append=streamed, last=False)
                        )
                        streamed = True
                    elif isinstance(event, RunFinished):
                        await self._finish(live, event.reply, event.state)
                    elif isinstance(event, RunSuspended):
                        await self._suspend(live, event.interrupts)
                    elif isinstance(event, RunFailed) and isinstance(event.error, ThreadBusyError):
                        text = (
                            "Another process is still running this task; send the message "
                            "again shortly to continue it."
                        )
                        await self._status(live, WORKING, agent_message(text))
                    elif isinstance(event, RunFailed):
                        log.warning("a2a task %s failed: %s", task.id, event.error)
                        await self._status(
                            live, FAILED, agent_message(f"The agent failed: {event.message}")
                        )
            finally:  # a canceled task stops its run now, not when the generator is collected
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()
        except asyncio.CancelledError:
            if live.cancel_requested:
                await self._status(live, CANCELED, agent_message("The task was canceled."))
            raise
        except Exception:  # the store failed under us: the run's thread keeps its checkpoint
            log.exception("a2a task %s: recording its progress failed", task.id)
            with contextlib.suppress(Exception):
                text = "The server could not record this task's progress; send the message again."
                await self._status(live, FAILED, agent_message(text))
        finally:
            self._live.pop(task.id, None)
            live.publish(None)
            if not live.cancel_requested:
                self._wake_later(task)

    def _wake_later(self, task: TaskRecord) -> None:
        """A task whose run sleeps on a durable timer goes on by itself when the timer is due
        (scheduled in the process that ran it; after a restart a subscriber, or the next
        message, wakes it)."""
        wake_at = _wake_at(task.status)
        if wake_at is None:
            return
        loop = asyncio.get_running_loop()
        old = self._timers.pop(task.id, None)
        if old is not None:
            old.cancel()

        def due() -> None:
            self._timers.pop(task.id, None)
            waking = loop.create_task(self._wake_if_due(task.id))
            self._background.add(waking)
            waking.add_done_callback(self._background.discard)

        self._timers[task.id] = loop.call_later(max(0.0, wake_at - time.time()), due)

    async def _wake_if_due(self, task_id: str) -> None:
        if task_id in self._live or task_id in self._claimed:
            return  # a message or a subscriber got there first
        try:
            fresh = await self.store.get(task_id)
        except Exception:  # the store is away: a subscriber or the next message wakes it
            log.exception("a2a task %s: reading it to wake its timer failed", task_id)
            return
        if fresh is None or task_id in self._live or task_id in self._claimed:
            return
        wake_at = _wake_at(fresh.status)
        if wake_at is None:
            return  # it moved on (canceled, continued elsewhere)
        if time.time() < wake_at:
            self._wake_later(fresh)
            return
        self._wake(fresh)

    def close(self) -> None:
        """Forget scheduled timer wake-ups (the app is shutting down)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    async def _suspend(self, live: _Live, interrupts: tuple[PendingInterrupt, ...]) -> None:
        waiting = _asking(interrupts)
        if waiting:
            await self._status(live, INPUT_REQUIRED, _question(waiting))
            return
        stops = [p for p in interrupts if p.kind == "breakpoint"]
        if stops:
            await self._status(live, INPUT_REQUIRED, _paused(stops))
            return
        wakes = [p.wake_at for p in interrupts if p.wake_at is not None]
        wake_at = min(wakes) if wakes else time.time()
        wake = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wake_at))
        text = f"Waiting until {wake}; send any message on this task after then to go on."
        await self._status(live, WORKING, agent_message(text, {"wakeAt": wake_at}))

    async def _finish(self, live: _Live, reply: str, state: Any) -> None:
        """The run completed: its artifacts, then the agent's message saying the same."""
        task = live.task
        try:
            artifacts = artifacts_for(state, reply, self.to_artifacts)
        except Exception as exc:  # the app's to_artifacts: the task fails, saying why
            log.warning("a2a task %s: to_artifacts failed: %s", task.id, exc)
            text = f"The agent finished, but to_artifacts failed ({type(exc).__name__}: {exc})."
            await self._status(live, FAILED, agent_message(text))
            return
        for artifact in artifacts:
            await self.store.set_artifact(task, artifact)
            self._emit(live, _artifact_event(task, artifact))
        answer = agent_message(reply)
        # the message carries the reply's parts and the structured output, as the artifacts do
        answer["parts"] = [
            part for a in artifacts if a["artifactId"] in (ANSWER, OUTPUT) for part in a["parts"]
        ]
        await self.store.add_message(task, answer)
        await self._status(live, COMPLETED, answer)

    async def _status(self, live: _Live, state: str, message: dict[str, Any] | None = None) -> None:
        task = live.task
        if message is not None and state != COMPLETED:
            await self.store.add_message(task, message)
        delivery = await self._owe(task, state)
        status = await self.store.set_status(task, state, message)
        item = {"statusUpdate": {"taskId": task.id, "contextId": task.context_id, "status": status}}
        live.publish(item)
        self._notify(task, item, delivery)

    async def _owe(self, task: TaskRecord, state: str) -> str | None:
        """Before a status whose notification is owed is written, record it as owed (so a
        server killed before delivering it leaves it to the sweep); return its delivery id."""
        if self.push is None or not task.push or state not in _OWED:
            return None
        delivery = _delivery_id(task.id, state, len(task.history))
        await self.store.owe(delivery, task.id, state, len(task.history), list(task.push))
        return delivery

    def _emit(self, live: _Live, item: dict[str, Any]) -> None:
        live.publish(item)
        self._notify(live.task, item)

    def _notify(self, task: TaskRecord, item: dict[str, Any], delivery: str | None = None) -> None:
        """Push a status change or a finished artifact to the task's webhooks (``delivery``:
        the owed notification's id, claimed and recorded as it is sent)."""
        if self.push is None or not task.push:
            return
        status = "statusUpdate" in item
        if not status and not item.get("artifactUpdate", {}).get("lastChunk"):
            return  # the task itself, and token chunks: a webhook gets what is settled
        for target in list(task.push.values()):
            if target.surface == "0.3":
                if status:  # a 0.3 webhook gets the whole task, once per status change
                    self.push.send(task.id, target, task_as_v03(task.to_json()), delivery)
            else:
                self.push.send(task.id, target, item, delivery)

    async def sweep_push(self) -> int:
        """Deliver the owed notifications no server has delivered (the one that owed them died
        first); drop those no longer due. Reads only what is still owed. Returns how many
        POSTs were tried."""
        sender = self.push
        if sender is None:
            return 0
        tried = 0
        for delivery, (entry, configs) in (await self.store.owed()).items():
            task_id = str(entry["task"])
            if task_id in self._live:
                continue  # its run is in this process, which sends it
            task = await self.store.get(task_id)
            if task is None:
                await self.store.delivered(delivery, configs)  # nobody left to tell about it
                continue
            await self._reconcile(task)  # a run that ended unrecorded gets its status now
            position = int(entry["position"])
            if task.state == entry["state"] and len(task.history) == position:
                targets = [task.push[c] for c in configs if c in task.push]
                gone = [c for c in configs if c not in task.push]
                if gone:  # their configs were deleted since
                    await self.store.delivered(delivery, gone)
                jobs = [sender.deliver_owed(delivery, t, _push_payload(task, t)) for t in targets]
                tried += len(jobs)
                await asyncio.gather(*jobs)
            elif len(task.history) > position or task.terminal:
                await self.store.delivered(delivery, configs)  # superseded by a later status
            # else its status is not written yet (being written, or its writer died first)
        return tried

    async def sweeping(self, every: float) -> None:
        """:meth:`sweep_push` now and every ``every`` seconds, until cancelled."""
        while True:
            try:
                await self.sweep_push()
            except Exception as exc:  # the store may be away a while: the next sweep retries
                log.warning("sweeping owed push notifications failed: %s", exc)
            await asyncio.sleep(every)

    def _push_sender(self) -> PushSender:
        if self.push is None:
            raise errors.A2AError(-32003, "push notifications are not supported by this agent.")
        return self.push

    # -- push notification configs -----------------------------------------------------------

    async def create_push(self, params: dict[str, Any], *, surface: str = "1.0") -> dict[str, Any]:
        """``CreateTaskPushNotificationConfig``: register a webhook for a task's updates."""
        sender = self._push_sender()
        task = await self._task(params.get("taskId"), "taskId")
        config = _push_config(params, task.id)
        await sender.check(str(config["url"]))
        await self.store.set_push(task, PushTarget(config, surface))
        return config

    async def get_push(self, params: dict[str, Any]) -> dict[str, Any]:
        self._push_sender()
        task = await self._task(params.get("taskId"), "taskId")
        config_id = params.get("id") or task.id
        target = task.push.get(config_id)
        if target is None:
            msg = f"task {task.id!r} has no push notification config {config_id!r}."
            raise errors.A2AError(-32001, msg, {"taskId": task.id, "configId": config_id})
        return target.config

    async def list_push(self, params: dict[str, Any]) -> dict[str, Any]:
        self._push_sender()
        task = await self._task(params.get("taskId"), "taskId")
        return {"configs": [t.config for t in task.push.values()], "nextPageToken": ""}

    async def delete_push(self, params: dict[str, Any]) -> None:
        """Forget a webhook (forgetting one the task does not have is not an error)."""
        self._push_sender()
        task = await self._task(params.get("taskId"), "taskId")
        config_id = params.get("id") or task.id
        if config_id in task.push:
            await self.store.delete_push(task, config_id)

    async def _follow(
        self, live: _Live, queue: asyncio.Queue[dict[str, Any] | None]
    ) -> AsyncIterator[dict[str, Any]]:
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield item
        finally:
            with contextlib.suppress(ValueError):
                live.listeners.remove(queue)

    # -- GetTask / ListTasks / CancelTask / SubscribeToTask --------------------------------

    async def _task(self, task_id: Any, field: str = "id") -> TaskRecord:
        if not isinstance(task_id, str) or not task_id:
            raise errors.invalid_params(f"`{field}` (the task id) is required.")
        live = self._live.get(task_id)
        if live is not None:
            return live.task
        task = await self.store.get(task_id)
        if task is None:
            raise errors.task_not_found(task_id)
        await self._reconcile(task)
        return task

    async def _reconcile(self, task: TaskRecord) -> None:
        """Catch a task's record up with its run when the process that ran it stopped
        between the run's last checkpoint and the record's update (a restart mid-task).

        A run that is still unfinished stays ``working``: the next message on the task
        continues it from its last checkpoint.
        """
        if task.id in self._live or task.state not in (SUBMITTED, WORKING):
            return
        found = await thread_info(self.graph, task.thread_id, self.store.backend)
        if found is None:
            return
        state, info = found
        live = _Live(task)
        if info.status == "completed":
            await self._finish(live, self.adapter.reply_for(state), state)
        elif info.suspended and info.awaiting:
            await self._suspend(live, info.interrupts)
        elif info.failed:
            detail = (info.error or {}).get("message", "")
            await self._status(live, FAILED, agent_message(f"The agent failed: {detail}"))

    async def get(self, params: dict[str, Any]) -> dict[str, Any]:
        task = await self._task(params.get("id"))
        length = params.get("historyLength")
        _check_history_length(length, "historyLength")
        return task.to_json(history_length=length)

    async def list(self, params: dict[str, Any]) -> dict[str, Any]:
        size = params.get("pageSize", _DEFAULT_PAGE)  # it has presence: 0 is not "unset"
        if size < 1 or size > _MAX_PAGE:
            raise errors.invalid_params(
                f"`pageSize` must be between 1 and {_MAX_PAGE}, got {size}."
            )
        token = params.get("pageToken") or ""
        try:
            offset = int(token) if token else 0
        except ValueError:
            raise errors.invalid_params(
                f"`pageToken` {token!r} is not one this server issued."
            ) from None
        if offset < 0:
            raise errors.invalid_params(f"`pageToken` {token!r} is not one this server issued.")
        _check_history_length(params.get("historyLength"), "historyLength")
        state = params.get("status")
        if state is not None and state != "TASK_STATE_UNSPECIFIED" and state not in _STATES:
            raise errors.invalid_params(f"`status` {state!r} is not a task state.")
        context = params.get("contextId")
        lines = await self.store.index()
        if context:
            lines = [line for line in lines if line["contextId"] == context]
        tasks: list[TaskRecord] = []
        for line in lines:
            task = self._live[line["id"]].task if line["id"] in self._live else None
            task = task or await self.store.get(line["id"])
            if task is None:
                continue
            await self._reconcile(task)
            if state and state != "TASK_STATE_UNSPECIFIED" and task.state != state:
                continue
            tasks.append(task)
        page = tasks[offset : offset + size]
        more = offset + size < len(tasks)
        length = params.get("historyLength")
        artifacts = bool(params.get("includeArtifacts"))
        return {
            "tasks": [t.to_json(history_length=length, artifacts=artifacts) for t in page],
            "nextPageToken": str(offset + size) if more else "",
            "pageSize": size,
            "totalSize": len(tasks),
        }

    async def cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        task = await self._task(params.get("id"))
        if task.terminal:
            raise errors.task_not_cancelable(task.id, task.state)
        timer = self._timers.pop(task.id, None)
        if timer is not None:
            timer.cancel()
        live = self._live.get(task.id)
        if live is not None and live.runner is not None:
            live.cancel_requested = True
            live.runner.cancel()
            await asyncio.wait([live.runner])
        else:
            await self.store.add_message(task, agent_message("The task was canceled."))
            delivery = await self._owe(task, CANCELED)
            status = await self.store.set_status(
                task, CANCELED, agent_message("The task was canceled.")
            )
            update = {"taskId": task.id, "contextId": task.context_id, "status": status}
            self._notify(task, {"statusUpdate": update}, delivery)
        return task.to_json()

    async def subscribe(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``SubscribeToTask``: the task, then its updates until it ends or stops to wait
        for input again — whether its run is live here, in another process sharing the
        store, or not running at all (waiting for an answer, or for a timer this process
        then wakes)."""
        task = await self._task(params.get("id"))
        if task.terminal:
            msg = f"task {task.id!r} is {errors.state_word(task.state)}; read it with GetTask."
            raise errors.unsupported(msg)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        live = self._live.get(task.id)
        if live is not None:  # listen now: nothing the run emits from here on is missed
            live.listeners.append(queue)
        return self._watch(task, queue)

    async def _watch(
        self, task: TaskRecord, queue: asyncio.Queue[dict[str, Any] | None]
    ) -> AsyncIterator[dict[str, Any]]:
        start = task.status
        last = start
        seen = {a.get("artifactId"): a for a in task.artifacts}
        yield {"task": task.to_json()}
        try:
            while True:
                live = self._live.get(task.id)
                attached = live is not None
                if live is not None and queue not in live.listeners:
                    live.listeners.append(queue)  # a run that started here meanwhile
                elif live is None and queue not in self._waiting.setdefault(task.id, []):
                    self._waiting[task.id].append(queue)
                try:
                    timeout = None if attached else self._poll_delay(last, task.id)
                    item = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    item = None
                if item is not None:  # an update from a run in this process
                    if "task" in item:
                        continue
                    if "artifactUpdate" in item:
                        artifact = item["artifactUpdate"]["artifact"]
                        seen[artifact.get("artifactId")] = artifact
                    yield item
                    if "statusUpdate" in item:
                        last = item["statusUpdate"]["status"]
                        if _settled(last, start):
                            return
                    continue
                # the run here ended, or there is none: read the task as the store has it
                fresh = await self.store.get(task.id)
                if fresh is None:
                    return
                for item in _changes(fresh, seen, last):
                    yield item
                if fresh.status != last:
                    last = fresh.status
                    if _settled(last, start):
                        return
                # a timer nobody woke: the server that ran the task has it scheduled, so
                # a subscriber elsewhere waits a moment longer (two servers must not both
                # run it); past that, the run's server is gone (a restart) and this one wakes it
                wake_at = _wake_at(last)
                if (
                    wake_at is not None
                    and time.time() >= wake_at + self._wake_grace(task.id)
                    and task.id not in self._live
                    and task.id not in self._claimed
                ):
                    self._wake(fresh)
        finally:
            self._unwatch(task.id, queue)

    def _unwatch(self, task_id: str, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        waiting = self._waiting.get(task_id, [])
        with contextlib.suppress(ValueError):
            waiting.remove(queue)
        if not waiting:
            self._waiting.pop(task_id, None)
        live = self._live.get(task_id)
        if live is not None:
            with contextlib.suppress(ValueError):
                live.listeners.remove(queue)

    def _poll_delay(self, status: dict[str, Any], task_id: str) -> float:
        """Until the next look at the store: the poll interval, or less when the task's
        timer is to be woken sooner."""
        wake_at = _wake_at(status)
        if wake_at is None:
            return self.poll_interval
        due = wake_at + self._wake_grace(task_id) - time.time()
        return max(0.01, min(self.poll_interval, due))

    def _wake_grace(self, task_id: str) -> float:
        """How long past its timer a subscriber waits before waking a task: none when this
        process has the wake-up scheduled itself, else ``TIMER_GRACE``."""
        return 0.0 if task_id in self._timers else TIMER_GRACE


def _settled(status: dict[str, Any], start: dict[str, Any]) -> bool:
    """Whether a subscription that began at ``start`` is over: the task ended, or came to
    wait for input again (not the wait it was already in)."""
    state = status.get("state")
    return state in TERMINAL or (state in _INTERRUPTED and status != start)


def _wake_at(status: dict[str, Any]) -> float | None:
    """When a ``working`` task's durable timer is due (its status message says), if it
    sleeps on one."""
    if status.get("state") != WORKING:
        return None
    for part in (status.get("message") or {}).get("parts") or ():
        data = part.get("data")
        if isinstance(data, dict) and isinstance(data.get("wakeAt"), int | float):
            return float(data["wakeAt"])
    return None


def _changes(
    task: TaskRecord, seen: dict[Any, dict[str, Any]], last: dict[str, Any]
) -> list[dict[str, Any]]:
    """The updates a subscriber has not had yet, read off the stored task: its new or
    changed artifacts (``seen`` is brought up to date), then its status if it moved."""
    out = []
    for artifact in task.artifacts:
        if seen.get(artifact.get("artifactId")) != artifact:
            seen[artifact.get("artifactId")] = artifact
            out.append(_artifact_event(task, artifact))
    if task.status != last:
        update = {"taskId": task.id, "contextId": task.context_id, "status": task.status}
        out.append({"statusUpdate": update})
    return out


def _delivery_id(task_id: str, state: str, position: int) -> str:
    """An owed notification's ``X-TensorSketch-Delivery``: the task and its state (a task
    reaches one terminal state), and for ``input-required`` (which may come again) its place
    in the history."""
    if state == INPUT_REQUIRED:
        return f"{task_id}:{state}:{position}"
    return f"{task_id}:{state}"


def _push_payload(task: TaskRecord, target: PushTarget) -> dict[str, Any]:
    """What ``target`` is sent for the task's current status (as :meth:`_notify` sends it)."""
    if target.surface == "0.3":
        return dict(task_as_v03(task.to_json()))
    update = {"taskId": task.id, "contextId": task.context_id, "status": task.status}
    return {"statusUpdate": update}


def _artifact_event(task: TaskRecord, artifact: dict[str, Any]) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": task.id,
            "contextId": task.context_id,
            "artifact": artifact,
            "append": False,
            "lastChunk": True,
        }
    }


def _push_config(params: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    """A webhook config as stored and answered: the task's id filled in, the config's id
    defaulting to the task's (as the a2a-sdk does), the tenant left out."""
    url = params.get("url")
    if not isinstance(url, str) or not url:
        msg = "a push notification config needs `url`, the webhook to POST the task's updates to."
        raise errors.invalid_params(msg)
    config = {k: v for k, v in params.items() if k != "tenant"}
    config["taskId"] = task_id
    config["id"] = str(params.get("id") or task_id)
    return config


def _check_history_length(length: Any, where: str) -> None:
    if length is not None and length < 0:
        msg = f"`{where}` must not be negative, got {length} (0 leaves the history out)."
        raise errors.invalid_params(msg)


def _check_output_modes(modes: Any) -> None:
    if not modes:
        return
    ours = {"text/plain", "application/json", "text/*", "*/*", "text", "application/*"}
    if not any(mode in ours for mode in modes):
        msg = (
            f"this agent answers in text/plain or application/json, not {', '.join(modes)}; "
            "add one of those to `acceptedOutputModes`."
        )
        raise errors.A2AError(-32005, f"incompatible content types: {msg}")


def _artifact_update(task: TaskRecord, text: str, *, append: bool, last: bool) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": task.id,
            "contextId": task.context_id,
            "artifact": {"artifactId": ANSWER, "name": ANSWER, "parts": [{"text": text}]},
            "append": append,
            "lastChunk": last,
        }
    }


def _asking(pending: tuple[PendingInterrupt, ...]) -> list[PendingInterrupt]:
    """The interrupts that wait for an answer: not a timer (time answers it) and not a static
    breakpoint (``interrupt_before`` / ``interrupt_after``: any message continues the run)."""
    return [p for p in pending if p.kind not in ("timer", "breakpoint")]


def _paused(stops: list[PendingInterrupt]) -> dict[str, Any]:
    """The input-required status message of a run stopped at a static breakpoint."""
    where = []
    for p in stops:
        value = p.value if isinstance(p.value, dict) else {}
        nodes = ", ".join(str(n) for n in value.get("nodes", ())) or "?"
        where.append(f"{value.get('when', 'at')} {nodes}")
    text = f"Paused at a breakpoint ({'; '.join(where)}); send any message to continue."
    data = {"interrupts": [{"id": p.id, "kind": p.kind, "value": p.value} for p in stops]}
    return agent_message(text, data)


def _question(waiting: list[PendingInterrupt]) -> dict[str, Any]:
    """The input-required status message: what each interrupt asks, in words and as data."""
    lines = []
    for p in waiting:
        if p.kind == "approval":
            value = p.value if isinstance(p.value, dict) else {}
            args = json.dumps(value.get("args", {}), sort_keys=True)
            lines.append(
                f"Approve the call to {value.get('tool', '?')}({args})? Reply 'approve' or "
                '\'reject\' (or a data part {"approved": true|false, "reason": "..."}).'
            )
        else:
            asked = p.value if isinstance(p.value, str) else json.dumps(p.value, sort_keys=True)
            lines.append(str(asked))
    data = {"interrupts": [{"id": p.id, "kind": p.kind, "value": p.value} for p in waiting]}
    return agent_message("\n".join(lines), data)


def _decisions(
    task_id: str, pending: tuple[PendingInterrupt, ...], message: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Read the answer to an input-required task from the message that continues it.

    A data part ``{"resume": {interrupt_id: decision}}`` decides each interrupt by id;
    otherwise the message's data part (or its text) answers every one the task waits on.
    """
    waiting = _asking(pending)
    if not waiting:
        return None  # a timer or a static breakpoint: the message just lets the run go on
    parts = message.get("parts") or ()
    data = [p["data"] for p in parts if "data" in p]
    by_id = data[0].get("resume") if data and isinstance(data[0], dict) else None
    if isinstance(by_id, dict):
        ids = {p.id for p in waiting}
        unknown = sorted(set(by_id) - ids)
        if unknown:
            msg = f"task {task_id!r} waits on {sorted(ids)}, not {unknown}."
            raise errors.invalid_params(msg)
        decisions = dict(by_id)
    else:
        answer = data[0] if data else message_text(message).strip()
        decisions = {p.id: answer for p in waiting}
    for p in waiting:
        if p.kind == "approval" and p.id in decisions:
            try:
                parse_approval(decisions[p.id])
            except ValueError as exc:
                msg = (
                    f"task {task_id!r} waits for approval of {p.id!r} ({exc}); answer "
                    "'approve' or 'reject', or send a data part {\"approved\": true|false, "
                    '"reason": "..."}.'
                )
                raise errors.invalid_params(msg) from None
            try:  # bound to the call it was given for (its `digest`, `call_id`, `args`)
                bind_approval(p, decisions[p.id])
            except ApprovalMismatchError as exc:
                raise errors.invalid_params(str(exc)) from None
    return decisions
