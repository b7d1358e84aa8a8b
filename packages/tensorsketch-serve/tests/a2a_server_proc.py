"""An A2A server process for the push kill test: ``python a2a_server_proc.py SPEC PORT``.

``SPEC`` is JSON ``{"target": "sqlite" | "postgres" | "redis", "kwargs": {...}, "push":
{...}}`` (a crash harness :class:`BackendSpec`, and ``PushNotifications(**push)``). The graph
echoes the message (``"graph": "ask"``: it first asks the user's name, then greets them).
``"die_at"``: SIGKILL this process when a task's ``completed`` notification (``"die_on"``: the
text in the body that marks the one to die on) is about to be POSTed (``push_sending``) or was
POSTed, before its outcome is recorded (``push_sent``), once the file ``TS_KILL_ARMED`` names
exists. ``TS_SWEEPS``: a file that gets a line after each sweep of owed notifications
(:func:`count_sweeps`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import uvicorn

from tensorsketch import END, START, Context, Graph, Node, Schema, interrupt
from tensorsketch.serve.a2a import AgentCard, PushNotifications, a2a_app
from tensorsketch.testing import tally
from tensorsketch.testing.crash import BackendSpec


class State(Schema):
    prompt: str = ""
    answer: str = ""


class Echo(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=f"echo: {inp.prompt}")


class Ask(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        name = await interrupt(ctx, "What is your name?")
        return self.Out(answer=f"Hello {name}.")


def _die_at(point: str, marker: bytes = b"TASK_STATE_COMPLETED") -> None:
    from tensorsketch.serve.a2a import _push

    deliver = _push.deliver

    def armed() -> bool:
        flag = os.environ.get("TS_KILL_ARMED")
        return flag is None or os.path.exists(flag)

    async def deliver_and_die(*args: Any, **kwargs: Any) -> Any:
        final = marker in kwargs.get("content", b"")
        if final and point == "push_sending" and armed():
            os.kill(os.getpid(), signal.SIGKILL)
        done = await deliver(*args, **kwargs)
        if final and armed():
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    _push.deliver = deliver_and_die  # type: ignore[assignment]


def count_sweeps(path: str) -> None:
    """Append a line to ``path`` after every sweep of owed notifications, so a test waits for
    the sweeps that would send a notification again instead of sleeping."""
    from tensorsketch.serve.a2a._tasks import TaskService

    sweep = TaskService.sweep_push

    async def sweep_and_count(self: TaskService) -> int:
        tried = await sweep(self)
        tally.mark(path, tried)
        return tried

    TaskService.sweep_push = sweep_and_count  # type: ignore[method-assign]


def main() -> None:
    raw = json.loads(sys.argv[1])
    port = int(sys.argv[2])
    backend = BackendSpec(raw["target"], raw.get("kwargs", {})).create()
    if raw.get("die_at"):
        _die_at(raw["die_at"], raw.get("die_on", "TASK_STATE_COMPLETED").encode())
    if os.environ.get("TS_SWEEPS"):
        count_sweeps(os.environ["TS_SWEEPS"])
    node = Ask if raw.get("graph") == "ask" else Echo
    graph = Graph(State).add(node).edge(START, node.__name__).edge(node.__name__, END).compile()
    app = a2a_app(
        graph,
        card=AgentCard(name="echo", description="Echoes."),
        backend=backend,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
        push=PushNotifications(**raw.get("push", {})),
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
