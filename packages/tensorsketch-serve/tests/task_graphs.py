"""Graphs the task API tests (and their server subprocesses) run: offline, on the fake model.

Side effects are counted in an :class:`~tensorsketch.testing.crash.EffectLedger` named by the
``TS_LEDGER`` environment variable when it is set (the kill tests read it from the parent).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import weakref
from pathlib import Path
from typing import Any

from tensorsketch import Context, Node, Schema
from tensorsketch.agents import create_agent
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.testing.crash import EffectLedger
from tensorsketch.testing.runs import (
    REFUNDS,
    hang_graph,
    listen_graph,
    one_node_graph,
    refund_agent,
)
from tensorsketch.tools import tool

__all__ = [
    "REFUNDS",
    "chatty_graph",
    "configurable_agent",
    "echo_agent",
    "hang_graph",
    "listen_graph",
    "refund_agent",
    "steer_agent",
    "turns",
    "work_graph",
]

#: The effects' turn of each event loop (see ``Work`` and :func:`turns`).
_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def turns() -> asyncio.Lock:
    """One side effect at a time on the running event loop (a server process has one).

    A lock per loop, not one for the module: an asyncio lock binds to the first loop a task
    waits on it in, and every in-process test server runs on a loop of its own, so a run on
    a later server that had to wait for its turn failed with ``RuntimeError`` (and a retry
    with its idempotency key, finding it failed, made a new run)."""
    loop = asyncio.get_running_loop()
    lock = _TURNS.get(loop)
    if lock is None:
        lock = _TURNS[loop] = asyncio.Lock()
    return lock


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


def _maybe_block(ledger: EffectLedger) -> None:
    """``TS_BLOCK_AFTER=n``: block this process's event loop for ``TS_BLOCK_SECONDS`` (once)
    right after the n-th side effect, before its result is recorded — a slow synchronous write
    under load: the run's lease lapses while its effect has happened but is unrecorded."""
    block_after = int(os.environ.get("TS_BLOCK_AFTER", "0"))
    if block_after and not _BLOCKED and ledger.total() >= block_after:
        _BLOCKED.append(True)
        time.sleep(float(os.environ.get("TS_BLOCK_SECONDS", "3")))


_BLOCKED: list[bool] = []
_FROZEN: list[bool] = []


def _maybe_freeze(ledger: EffectLedger | None) -> None:
    """``TS_STOP_AT=n``: SIGSTOP this process (once) before the n-th tool call starts, inside
    the effects' turn — its pid stays alive, so only the lease can hand its runs over, and on
    SIGCONT the stalled run reaches its next effect with the lease gone. ``TS_STOPPED`` names
    a file written just before freezing (the test waits for it)."""
    stop_at = int(os.environ.get("TS_STOP_AT", "0"))
    armed = os.environ.get("TS_KILL_ARMED")
    if not stop_at or ledger is None or _FROZEN or (armed and not os.path.exists(armed)):
        return
    if ledger.total() + 1 >= stop_at:
        _FROZEN.append(True)
        with open(os.environ["TS_STOPPED"], "w", encoding="utf-8") as marker:
            marker.write(ctx_thread[0] if ctx_thread else "")
        os.kill(os.getpid(), signal.SIGSTOP)


ctx_thread: list[str] = []


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
                # Off the event loop: a synchronous commit (fsync) that blocks under load
                # would stall the lease heartbeat inside the effect's unrecorded window.
                await asyncio.to_thread(ledger.hit, ctx.thread_id or "", name)
                _maybe_block(ledger)
            return name

        # Effects take turns (each is journaled before the next calls out), as in the crash
        # harness: a kill inside one call then never lands while another run's call has
        # completed but is not yet recorded — the window no journal closes.
        async with turns():
            ctx_thread[:] = [ctx.thread_id or ""]
            _maybe_freeze(ledger)
            first = await ctx.step("charge", lambda: effect("charge"))
        await ctx.emit("progress", {"done": first})
        if inp.n % 2:
            await ctx.sleep(float(os.environ.get("TS_NAP", "0.5")))
        async with turns():
            ctx_thread[:] = [ctx.thread_id or ""]
            _maybe_freeze(ledger)
            second = await ctx.step("ship", lambda: effect("ship"))
        return self.Out(out=f"{first}+{second} {inp.n}")


def work_graph() -> Any:
    return one_node_graph(Work, "work")


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
    return one_node_graph(Chatty, "chatty")


def echo_agent() -> Any:
    """A small agent that answers at once (the load test's)."""
    return create_agent(FakeProvider(), name="echo")


def steer_agent(gates: Path | str) -> Any:
    """An agent that waits at two gates (tool ``wait_gate``: it writes ``started-<gate>`` in
    ``gates``, then blocks until the file ``<gate>`` appears), then answers with the user
    messages it saw: ``"saw: <first> | <second> | ..."``. What steering tests send a message
    into while a tool runs."""
    folder = Path(gates)

    @tool
    async def wait_gate(gate: str) -> str:
        """Wait until the gate opens."""
        (folder / f"started-{gate}").touch()
        while not (folder / gate).exists():  # noqa: ASYNC110 - another process opens it
            await asyncio.sleep(0.02)
        return f"gate {gate} open"

    def decide(messages: list[Message], tools: Any) -> Message:
        passed = sum(1 for m in messages if m.role == "tool")
        if passed < 2:
            gate = ("one", "two")[passed]
            return assistant(
                tool_calls=[ToolCall(id=f"call_{gate}", name="wait_gate", args={"gate": gate})]
            )
        seen = [m.text for m in messages if m.role == "user"]
        return assistant("saw: " + " | ".join(seen))

    return create_agent(FakeProvider(policy=decide), [wait_gate], name="steered")


@tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: found"


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def configurable_agent() -> Any:
    """An agent (system prompt ``"default prompt"``, tools ``lookup`` and ``weather``) that
    answers with what it was configured with: ``"system=<prompt> tools=<names offered>"`` —
    what assistant tests read back."""

    def decide(messages: list[Message], tools: Any) -> Message:
        prompt = next((m.text for m in messages if m.role == "system"), "-")
        return assistant(f"system={prompt} tools={','.join(sorted(t.name for t in tools))}")

    return create_agent(
        FakeProvider(policy=decide), [lookup, weather], name="helper", system="default prompt"
    )
