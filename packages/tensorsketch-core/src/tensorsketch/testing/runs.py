"""Small graphs for testing code built on ``AsyncRunner``: each one exercises one way a run
stops — it hangs (cancel, timeouts), waits for an event (signals), needs an approval (an
agent on the fake model whose tool requires one), or stops at static breakpoints. Offline and
deterministic.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import time
from typing import Annotated, Any, ClassVar

from tensorsketch.agents import create_agent
from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.fake import FakeProvider
from tensorsketch.graph import Graph
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.provider import ChatProvider, Completion
from tensorsketch.runs import AsyncRunner, RunRecord, run_store, wait_for_event
from tensorsketch.schema import Schema
from tensorsketch.tools import tool

__all__ = [
    "REFUNDS",
    "Io",
    "breakpoint_graph",
    "check_double_texting",
    "check_run_durability",
    "durability_graph",
    "hang_graph",
    "listen_graph",
    "multitask_graph",
    "one_node_graph",
    "refund_agent",
    "settle_agent",
    "ticks_of",
]

#: Orders the refund agent's tool refunded, in order (clear it in a test's setup).
REFUNDS: list[str] = []


class Io(Schema):
    """The state of the one-node graphs: ``n`` in, ``out`` / ``event`` out."""

    n: int = 0
    out: str = ""
    event: dict[str, Any] = {}


def one_node_graph(node: type[Node], name: str) -> CompiledGraph[Io]:
    """``START -> node -> END`` over :class:`Io`."""
    g = Graph(Io, name=name)
    g.add(node)
    g.edge(START, node.__name__)
    g.edge(node.__name__, END)
    return g.compile()


class Hang(Node):
    """Sleeps ``n`` seconds (not durably): a run to cancel or time out."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await asyncio.sleep(inp.n)
        return self.Out(out="late")


class Listen(Node):
    """Suspends until an event is signalled, and returns it."""

    class In(Schema):
        n: int

    class Out(Schema):
        event: dict[str, Any]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(event=await wait_for_event(ctx))


def hang_graph() -> CompiledGraph[Io]:
    return one_node_graph(Hang, "hang")


def listen_graph() -> CompiledGraph[Io]:
    return one_node_graph(Listen, "listen")


class Draft(Node):
    """Writes ``out = "draft <n>"``."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(out=f"draft {inp.n}")


def _appending(name: str, word: str) -> type[Node]:
    class Append(Node):
        class In(Schema):
            out: str

        class Out(Schema):
            out: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(out=f"{inp.out} {word}")

    Append.__name__ = Append.__qualname__ = name
    Append.__doc__ = f"Appends {word!r} to ``out``."
    return Append


def breakpoint_graph() -> CompiledGraph[Io]:
    """``Draft -> Review -> Publish`` stopping after ``Draft`` (``out == "draft <n>"``) and
    before ``Publish`` (``"draft <n> reviewed"``); it ends with ``"draft <n> reviewed
    published"``."""
    g = Graph(Io, name="publish")
    g.add(Draft).add(_appending("Review", "reviewed")).add(_appending("Publish", "published"))
    g.edge(START, "Draft").edge("Draft", "Review").edge("Review", "Publish")
    g.edge("Publish", END)
    return g.compile(interrupt_after=["Draft"], interrupt_before=["Publish"])


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    REFUNDS.append(order)
    return f"refunded {order}"


def _refund_policy(messages: list[Message], tools: Any) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"done: {last.text}")
    if last.role == "user" and last.text.startswith("[event"):
        return assistant(f"noted {last.text}")
    return assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": last.text})])


def refund_agent() -> CompiledGraph[Any]:
    """An agent that asks to refund the order in its query (call id ``call_1``, which needs
    an approval), then reports the tool's answer: ``"done: refunded <order>"``."""
    return create_agent(FakeProvider(policy=_refund_policy), [refund], name="refunds")


class _Settling(ChatProvider):
    """Asks for ``settle`` once, then answers ``settled``: a provider that only implements
    ``complete``, as scripted and test models do."""

    model = "scripted"
    provider_name = "scripted"

    async def complete(self, messages: Any, **_: Any) -> Completion:
        if any(m.role == "tool" for m in messages):
            return Completion(message=assistant("settled"), model="scripted")
        call = ToolCall(id="c1", name="settle", args={})
        return Completion(message=assistant(tool_calls=[call]), model="scripted")


@tool
async def settle(ctx: Context) -> str:
    """Settle the order: the turn's one side effect."""
    return f"order of {ctx.thread_id} settled"


def settle_agent() -> CompiledGraph[Any]:
    """One durable agent turn, the one issue 49's run-cost tests and benchmarks measure: the
    model asks for ``settle`` (call id ``c1``), the tool answers ``"order of <thread>
    settled"``, the model answers ``"settled"``."""
    return create_agent(_Settling(), tools=[settle])


class Ticks(Schema):
    """The state of :func:`multitask_graph`: the input's ``tag``, and every tick so far."""

    tag: str = ""
    ticks: Annotated[list[str], Reducer(operator.add)] = []


class Tick(Node):
    """One superstep: sleeps ``pause`` seconds, then appends ``<tag><k>`` (the tag's k-th
    tick)."""

    pause: ClassVar[float] = 0.05

    class In(Schema):
        tag: str
        ticks: list[str]

    class Out(Schema):
        ticks: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        await asyncio.sleep(self.pause)
        done = sum(1 for t in inp.ticks if t[:-1] == inp.tag)
        return self.Out(ticks=[f"{inp.tag}{done}"])


def _ticked(state: Any) -> bool:
    return sum(1 for t in state.ticks if t[:-1] == state.tag) >= 3


def multitask_graph(pause: float = 0.05) -> CompiledGraph[Ticks]:
    """Each input ``{"tag": "a"}`` ticks three supersteps (``a0``, ``a1``, ``a2``) on top
    of the thread's ticks: what double-texting tests stop, queue and roll back.

    ``pause`` is each tick's sleep: a test that must act while a run is still between two
    ticks (an interrupt or rollback sent after it saw a tick) takes a longer one, so a
    loaded machine cannot finish the run before the request lands."""
    g = Graph(Ticks, name="ticks")
    tick = Tick
    if pause != Tick.pause:

        class Paced(Tick):
            __doc__ = Tick.__doc__

        Paced.pause = pause
        tick = Paced
    g.add(tick, name="Tick")
    g.edge(START, "Tick")
    g.loop("Tick", until=_ticked)
    return g.compile()


def ticks_of(state: Any) -> list[str]:
    """The ticks of a :func:`multitask_graph` state (a model or a plain dict)."""
    if state is None:
        return []
    raw = state.get("ticks") if isinstance(state, dict) else getattr(state, "ticks", None)
    return list(raw or [])


def check_double_texting(strategy: str, runs: list[dict[str, Any]], ticks: list[str]) -> None:
    """Assert that one thread's runs (records as dicts, any order) and its final ``ticks``
    (:func:`multitask_graph`) are what ``strategy`` promises; raise ``AssertionError``
    naming what broke it.

    Every policy: no two runs of the thread executed at once. ``reject`` and ``enqueue``:
    every run succeeded, in submit order, each adding its three ticks. ``interrupt``: the
    last run succeeded; an earlier one either finished before the next was submitted or was
    stopped (``Interrupted``) leaving a prefix of its ticks. ``rollback``: likewise, but a
    stopped run leaves none.
    """
    ordered = sorted(runs, key=lambda r: (r["created_at"], r.get("id") or r.get("run_id")))
    spans = sorted((r["started_at"], r["finished_at"]) for r in ordered if r.get("started_at"))
    for before, after in itertools.pairwise(spans):
        assert before[1] is not None and before[1] <= after[0], f"runs overlapped: {spans}"
    expected: list[str] = []
    rest = list(ticks)
    for index, run in enumerate(ordered):
        tag = run["input"]["tag"]
        own = [f"{tag}{i}" for i in range(3)]
        last = index == len(ordered) - 1
        if run["status"] == "succeeded":
            if strategy in ("interrupt", "rollback") and not last:
                nxt = ordered[index + 1]
                assert run["finished_at"] <= nxt["created_at"], (
                    f"{strategy}: run {tag!r} finished after a later input came, unstopped"
                )
            assert rest[: len(own)] == own, f"{strategy}: expected {own} next in {ticks}"
            expected += own
            rest = rest[len(own) :]
            continue
        assert strategy in ("interrupt", "rollback") and not last, (
            f"{strategy}: run {tag!r} ended {run['status']} ({run.get('error')})"
        )
        kind = "RolledBack" if strategy == "rollback" else "Interrupted"
        assert run["status"] == "cancelled" and (run.get("error") or {}).get("type") == kind, run
        kept = 0
        while kept < len(own) and rest[kept : kept + 1] == [own[kept]]:
            kept += 1
        assert strategy == "interrupt" or kept == 0, f"rollback kept {own[:kept]} in {ticks}"
        expected += own[:kept]
        rest = rest[kept:]
    assert not rest and ticks == expected, f"{strategy}: ticks {ticks}, expected {expected}"


# -- durability modes kept by the run record ----------------------------------------------------


def durability_graph() -> CompiledGraph[Io]:
    """``Listen -> Draft -> Review -> Publish``: suspends for an event first, then runs three
    supersteps — what a durability mode changes is how many of them leave a checkpoint."""
    g = Graph(Io, name="durable-publish")
    g.add(Listen).add(Draft).add(_appending("Review", "reviewed"))
    g.add(_appending("Publish", "published"))
    g.edge(START, "Listen").edge("Listen", "Draft").edge("Draft", "Review")
    g.edge("Review", "Publish").edge("Publish", END)
    return g.compile()


#: Checkpoints a :func:`durability_graph` thread holds when it waits for its event, and when
#: it has ended, by mode: ``"exit"`` commits only where the run stops (the input, the
#: suspension, the end); ``"sync"`` and ``"async"`` every superstep's barrier.
DURABILITY_CHECKPOINTS: dict[str, tuple[int, int]] = {
    "sync": (2, 6),
    "async": (2, 6),
    "exit": (2, 3),
}


async def check_run_durability(first: AsyncRunner, second: AsyncRunner) -> None:
    """Two runners of :func:`durability_graph` on one store (fresh threads): a run submitted
    with each ``durability`` keeps it in its record, and every segment uses it — the one
    ``first`` runs, the resume ``second`` runs (the event is signalled there), and a
    takeover by ``second`` of a run whose runner died (a record another owner let lapse)."""
    backend = first.backend
    graph = first.graph
    await second.start()
    for mode, (suspended, ended) in DURABILITY_CHECKPOINTS.items():
        record = await first.submit({"n": 1}, durability=mode)  # type: ignore[arg-type]
        assert record.durability == mode, record
        waiting = await first.await_run(record.run_id, timeout=60)
        assert waiting.status == "suspended", waiting
        assert (await second.get(record.run_id)).durability == mode
        history = await graph.aget_history(record.thread_id, backend)
        assert len(history) == suspended, (mode, [c.step for c in history])
        await second.signal(record.run_id, {"type": "go", "event_id": f"go-{mode}"})
        done = await second.await_run(record.run_id, timeout=60)
        assert done.status == "succeeded", done
        assert done.output["out"] == "draft 1 reviewed published"
        history = await graph.aget_history(record.thread_id, backend)
        assert len(history) == ended, (mode, [c.step for c in history])
    # A run whose runner died before it began: the record's mode is what the taker uses.
    store = run_store(backend)
    for mode, (_, ended) in DURABILITY_CHECKPOINTS.items():
        run_id = f"lapsed-{mode}-{id(store)}"
        thread = f"t-{run_id}"
        at = time.time()
        await store.create(
            RunRecord(
                run_id=run_id,
                thread_id=thread,
                graph=graph.name,
                input={"n": 2},
                status="running",
                owner="elsewhere:1:gone",
                lease_expires_at=at - 1,
                started_at=at - 5,
                base_checkpoint="",
                durability=mode,
            )
        )
        assert run_id in await second.resume_pending()
        waiting = await second.await_run(run_id, timeout=60)
        assert waiting.status == "suspended", waiting
        await second.signal(run_id, {"type": "go", "event_id": f"go-{run_id}"})
        done = await second.await_run(run_id, timeout=60)
        assert done.status == "succeeded" and done.durability == mode, done
        history = await graph.aget_history(thread, backend)
        assert len(history) == ended, (mode, [c.step for c in history])
