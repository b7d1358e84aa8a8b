"""Graphs the task API tests (and their server subprocesses) run: offline, on the fake model.

Side effects are counted in an :class:`~tensorsketch.testing.crash.EffectLedger` named by the
``TS_LEDGER`` environment variable when it is set (the kill tests read it from the parent).
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.agents import create_agent
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runs import wait_for_event
from tensorsketch.testing.crash import EffectLedger
from tensorsketch.tools import tool

REFUNDS: list[str] = []
#: One side effect at a time in this process (see ``Work``).
TURNS = asyncio.Lock()


def _ledger() -> EffectLedger | None:
    path = os.environ.get("TS_LEDGER")
    return EffectLedger(path) if path else None


def _maybe_die(ledger: EffectLedger) -> None:
    """``TS_KILL_AT=n``: SIGKILL this process inside the n-th tool call (counted across the
    ledger; not before the file ``TS_KILL_ARMED`` names exists), before its side effect —
    mid-call, outside the one window no journal closes."""
    kill_at = int(os.environ.get("TS_KILL_AT", "0"))
    armed = os.environ.get("TS_KILL_ARMED")  # a file the test creates once it has submitted
    if armed is not None and not os.path.exists(armed):
        return
    if kill_at and ledger.total() + 1 >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


class Io(Schema):
    n: int = 0
    out: str = ""
    event: dict[str, Any] = {}


class Work(Node):
    """Two journaled effects with a pause between them (a kill lands mid-run), then a
    durable nap when ``n`` is odd (a kill lands while the timer is pending)."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        ledger = _ledger()
        pause = float(os.environ.get("TS_PAUSE", "0"))

        async def effect(name: str) -> str:
            await asyncio.sleep(pause)  # the call is in flight; its side effect not yet made
            if ledger is not None:
                _maybe_die(ledger)
                ledger.hit(ctx.thread_id or "", name)
            return name

        # Effects take turns (each is journaled before the next calls out), as in the crash
        # harness: a kill inside one call then never lands while another run's call has
        # completed but is not yet recorded — the window no journal closes.
        async with TURNS:
            first = await ctx.step("charge", lambda: effect("charge"))
        await ctx.emit("progress", {"done": first})
        if inp.n % 2:
            await ctx.sleep(float(os.environ.get("TS_NAP", "0.5")))
        async with TURNS:
            second = await ctx.step("ship", lambda: effect("ship"))
        return self.Out(out=f"{first}+{second} {inp.n}")


def work_graph() -> Any:
    g = Graph(Io, name="work")
    g.add(Work)
    g.edge(START, "Work")
    g.edge("Work", END)
    return g.compile()


class Hang(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await asyncio.sleep(inp.n)
        return self.Out(out="late")


def hang_graph() -> Any:
    g = Graph(Io, name="hang")
    g.add(Hang)
    g.edge(START, "Hang")
    g.edge("Hang", END)
    return g.compile()


class Chatty(Node):
    """Emits ``n`` events of 50 kB each (for the slow-reader cap)."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        for k in range(inp.n):
            await ctx.emit("blob", {"k": k, "text": "x" * 50_000})
        return self.Out(out="said a lot")


def chatty_graph() -> Any:
    g = Graph(Io, name="chatty")
    g.add(Chatty)
    g.edge(START, "Chatty")
    g.edge("Chatty", END)
    return g.compile()


class Listen(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        event: dict[str, Any]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(event=await wait_for_event(ctx))


def listen_graph() -> Any:
    g = Graph(Io, name="listen")
    g.add(Listen)
    g.edge(START, "Listen")
    g.edge("Listen", END)
    return g.compile()


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    REFUNDS.append(order)
    return f"refunded {order}"


def _policy(messages: list[Message], tools: Any) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"done: {last.text}")
    return assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": last.text})])


def refund_agent() -> Any:
    return create_agent(FakeProvider(policy=_policy), [refund], name="refunds")


def echo_agent() -> Any:
    """A small agent that answers at once (the load test's)."""
    return create_agent(FakeProvider(), name="echo")
