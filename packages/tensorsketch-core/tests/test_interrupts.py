from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Interrupt,
    Node,
    Schema,
    create_agent,
    interrupt,
    tool,
)
from tensorsketch.errors import DecisionConflictError
from tensorsketch.interrupts import RetryLater, RunInfo, run_info
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.provider import Usage
from tensorsketch.runs import AsyncRunner
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("tensorsketch.suspension.now", fake)
    return fake


# -- interrupt() in a plain graph ---------------------------------------------------------------


class Form(Schema):
    question: str
    prepared: int = 0
    answer: str = ""


def ask_graph(effects: list[str]) -> Any:
    class Ask(Node):
        class In(Schema):
            question: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            await ctx.step("prepare", lambda: effects.append("prepared"))
            answer = await interrupt(ctx, {"question": inp.question})
            return self.Out(answer=f"user said {answer}")

    class Prepare(Node):
        class In(Schema):
            question: str

        class Out(Schema):
            prepared: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            count = await ctx.step("count", lambda: effects.append("counted") or len(effects))
            return self.Out(prepared=count)

    return (
        Graph(Form)
        .add(Ask)
        .add(Prepare)
        .edge(START, "Ask")
        .edge(START, "Prepare")
        .edge("Ask", END)
        .edge("Prepare", END)
        .compile()
    )


async def test_interrupt_suspends_returns_and_resumes_with_the_answer() -> None:
    effects: list[str] = []
    app = ask_graph(effects)
    backend = InMemoryBackend()
    out = await app.invoke({"question": "Favourite colour?"}, thread_id="t", backend=backend)
    info = run_info(out)
    assert info.suspended and out.__tensorsketch_run__ is info  # type: ignore[attr-defined]
    [pending] = info.interrupts
    assert (pending.kind, pending.value, pending.node) == (
        "interrupt",
        {"question": "Favourite colour?"},
        "Ask",
    )
    assert info.awaiting == [pending.id]
    assert out.answer == "" and out.prepared == 0  # the superstep did not complete
    assert sorted(effects) == ["counted", "prepared"]  # the parallel node finished its work

    out = await app.invoke(thread_id="t", backend=backend, resume={pending.id: "blue"})
    assert run_info(out) == RunInfo(
        status="completed", thread_id="t", checkpoint_id=run_info(out).checkpoint_id
    )
    assert out.answer == "user said blue" and out.prepared == 2
    assert sorted(effects) == ["counted", "prepared"]  # journaled work was replayed, not redone


async def test_resuming_without_a_decision_suspends_again() -> None:
    effects: list[str] = []
    app = ask_graph(effects)
    backend = InMemoryBackend()
    first = await app.invoke({"question": "?"}, thread_id="t", backend=backend)
    again = await app.invoke(thread_id="t", backend=backend)
    assert run_info(again).interrupts == run_info(first).interrupts
    assert len(effects) == 2


async def test_stream_shows_the_interrupt_and_no_run_end() -> None:
    app = ask_graph([])
    backend = InMemoryBackend()
    events = [e async for e in app.stream({"question": "?"}, thread_id="t", backend=backend)]
    assert events[-1].type == "interrupt"
    assert events[-1].data["interrupts"][0]["kind"] == "interrupt"
    assert "run_end" not in [e.type for e in events]
    pending = events[-1].data["interrupts"][0]["id"]
    types = [
        e.type async for e in app.stream(thread_id="t", backend=backend, resume={pending: "ok"})
    ]
    assert types[-1] == "run_end"
    history = await app.aget_history("t", backend)
    assert [c.source for c in history] == ["input", "interrupt", "loop"]
    assert history[1].metadata["interrupts"][0]["id"] == pending


async def test_resume_is_checked_against_what_the_run_waits_on() -> None:
    app = ask_graph([])
    backend = InMemoryBackend()
    with pytest.raises(ValueError, match="is not suspended"):
        await app.invoke({"question": "?"}, thread_id="new", backend=backend, resume={"x": 1})
    out = await app.invoke({"question": "?"}, thread_id="t", backend=backend)
    [pending] = run_info(out).interrupts
    with pytest.raises(ValueError, match=r"names \['nope'\], which the run is not waiting on"):
        await app.invoke(thread_id="t", backend=backend, resume={"nope": 1})
    with pytest.raises(TypeError, match="takes a dict of decisions"):
        await app.invoke(thread_id="t", backend=backend, resume=[pending.id])  # type: ignore[arg-type]


async def test_an_in_memory_run_reports_the_suspension_too() -> None:
    out = await ask_graph([]).invoke({"question": "?"})
    assert run_info(out).suspended and run_info(out).thread_id is None


def test_interrupt_needs_an_id_when_raised_by_hand() -> None:
    with pytest.raises(ValueError, match="needs an `id=`"):
        Interrupt("why?")
    assert Interrupt("why?", id="q1").pending[0].id == "q1"


# -- durable timers ---------------------------------------------------------------------------


class Timed(Schema):
    done: str = ""


def timer_graph(effects: list[str], wait: Any) -> Any:
    class Wait(Node):
        class Out(Schema):
            done: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            await ctx.step("before", lambda: effects.append("before"))
            await wait(ctx)
            await ctx.step("after", lambda: effects.append("after"))
            return self.Out(done="woke")

    return Graph(Timed).add(Wait).edge(START, "Wait").edge("Wait", END).compile()


async def test_sleep_until_suspends_and_continues_after_the_time(clock: Clock) -> None:
    effects: list[str] = []
    app = timer_graph(effects, lambda ctx: ctx.sleep_until(clock.now + 60))
    backend = InMemoryBackend()
    out = await app.invoke({}, thread_id="t", backend=backend)
    info = run_info(out)
    assert info.suspended and info.wake_at == 1_000_060.0 and info.awaiting == []
    assert info.interrupts[0].kind == "timer"
    clock.now += 30  # too early: still asleep (the wake time was journaled, not recomputed)
    assert run_info(await app.invoke(thread_id="t", backend=backend)).wake_at == 1_000_060.0
    clock.now += 31
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.done == "woke" and not run_info(out).suspended
    assert effects == ["before", "after"]


async def test_sleep_takes_seconds_and_aware_datetimes(clock: Clock) -> None:
    backend = InMemoryBackend()
    app = timer_graph([], lambda ctx: ctx.sleep(5))
    assert run_info(await app.invoke({}, thread_id="a", backend=backend)).wake_at == clock.now + 5
    when = dt.datetime.fromtimestamp(clock.now + 90, tz=dt.UTC)
    app = timer_graph([], lambda ctx: ctx.sleep_until(when))
    out = await app.invoke({}, thread_id="b", backend=backend)
    assert run_info(out).wake_at == pytest.approx(clock.now + 90)
    naive = timer_graph([], lambda ctx: ctx.sleep_until(dt.datetime(2030, 1, 1)))
    with pytest.raises(ValueError, match="aware datetime"):
        await naive.invoke({})


# -- tool approval ----------------------------------------------------------------------------


def refund_agent(log: list[str], provider: FakeProvider, **options: Any) -> Any:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        log.append(f"refund {order}")
        return f"refunded #{order}"

    @tool
    def lookup(order: int) -> str:
        """Look an order up."""
        log.append(f"lookup {order}")
        return f"#{order}: $40"

    return create_agent(provider, tools=[refund, lookup], **options)


def two_refunds() -> Message:
    return assistant(
        "Refunding.",
        tool_calls=[
            ToolCall(id="r7", name="refund", args={"order": 7}),
            ToolCall(id="l7", name="lookup", args={"order": 7}),
            ToolCall(id="r8", name="refund", args={"order": 8}),
        ],
    )


async def test_approval_suspends_the_whole_turn_then_runs_approved_calls_once() -> None:
    log: list[str] = []
    provider = FakeProvider([two_refunds(), assistant("All done.")])
    agent = refund_agent(log, provider)
    backend = InMemoryBackend()
    out = await agent.invoke({"query": "refund 7 and 8"}, thread_id="t", backend=backend)
    assert out.status == "suspended"
    assert [(p.id, p.kind, p.value["args"]) for p in out.pending] == [
        ("r7", "approval", {"order": 7}),
        ("r8", "approval", {"order": 8}),
    ]
    assert log == []  # nothing of the turn ran, not even the harmless lookup

    out = await agent.invoke(thread_id="t", backend=backend, resume={"r7": True})
    assert out.status == "suspended" and [p.id for p in out.pending] == ["r8"]
    assert log == []

    out = await agent.invoke(
        thread_id="t",
        backend=backend,
        resume={"r8": {"approved": False, "reason": "order 8 was never paid"}},
    )
    assert out.status == "completed" and out.output == "All done." and out.pending == []
    assert log == ["refund 7", "lookup 7"]
    results = {m.tool_call_id: m.text for m in out.messages if m.role == "tool"}
    assert results["r7"] == "refunded #7"
    assert "rejected this call to 'refund'" in results["r8"]
    assert "order 8 was never paid" in results["r8"]
    assert len(provider.calls) == 2  # the first turn was replayed from the journal

    again = await agent.invoke(thread_id="t", backend=backend)
    assert again.output == "All done." and log == ["refund 7", "lookup 7"]


async def test_bad_approval_decisions_are_refused() -> None:
    provider = FakeProvider([two_refunds(), assistant("ok")])
    agent = refund_agent([], provider)
    backend = InMemoryBackend()
    await agent.invoke({"query": "q"}, thread_id="t", backend=backend)
    with pytest.raises(ValueError, match="approval decision must be"):
        await agent.invoke(thread_id="t", backend=backend, resume={"r7": "maybe"})
    with pytest.raises(ValueError, match="has no field 'reasn'"):
        await agent.invoke(
            thread_id="t", backend=backend, resume={"r7": {"approved": False, "reasn": "no"}}
        )
    with pytest.raises(ValueError, match="'reason' must be str, got 5"):
        await agent.invoke(
            thread_id="t", backend=backend, resume={"r7": {"approved": True, "reason": 5}}
        )
    with pytest.raises(ValueError, match="waits on 'r7', 'r8'"):
        await agent.invoke(thread_id="t", backend=backend, resume={"l7": True})


async def test_a_recorded_decision_cannot_be_changed() -> None:
    log: list[str] = []
    provider = FakeProvider([two_refunds(), assistant("ok")])
    agent = refund_agent(log, provider)
    backend = InMemoryBackend()
    await agent.invoke({"query": "q"}, thread_id="t", backend=backend)
    await agent.invoke(thread_id="t", backend=backend, resume={"r7": "reject"})
    with pytest.raises(ValueError, match=r"names \['r7'\], which the run is not waiting on"):
        await agent.invoke(thread_id="t", backend=backend, resume={"r7": True, "r8": True})
    out = await agent.invoke(thread_id="t", backend=backend, resume={"r8": True})
    assert log == ["lookup 7", "refund 8"]
    assert out.status == "completed"


def lookup_then_refund() -> list[Message]:
    return [
        assistant("Looking.", tool_calls=[ToolCall(id="l7", name="lookup", args={"order": 7})]),
        assistant("Refunding.", tool_calls=[ToolCall(id="r7", name="refund", args={"order": 7})]),
        assistant("Refunded."),
    ]


async def test_a_suspended_agent_shows_its_transcript_usage_and_cost() -> None:
    log: list[str] = []
    provider = FakeProvider(lookup_then_refund(), usage=Usage(input_tokens=10, output_tokens=2))
    agent = refund_agent(log, provider, prices={"fake-model": (1.0, 1.0)})
    backend = InMemoryBackend()
    out = await agent.invoke({"query": "refund 7"}, thread_id="t", backend=backend)
    assert run_info(out).suspended and run_info(out).awaiting == ["r7"]
    shown = [(m.role, m.text or m.tool_calls[0].id) for m in out.messages]
    assert shown == [
        ("user", "refund 7"),
        ("assistant", "Looking."),
        ("tool", "#7: $40"),
        ("assistant", "Refunding."),
    ]
    assert out.messages[-1].tool_calls[0].id == "r7"  # the call that waits for approval
    assert out.usage.total_tokens == 24 and out.iterations == 2
    assert out.cost_usd == pytest.approx(24 / 1_000_000)
    stored = await agent.aget_state("t", backend)
    assert stored is not None and stored.messages == out.messages and stored.usage == out.usage

    done = await agent.invoke(thread_id="t", backend=backend, resume={"r7": True})
    roles = [m.role for m in done.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert done.output == "Refunded." and done.usage.total_tokens == 36
    assert log == ["lookup 7", "refund 7"] and len(provider.calls) == 3


async def test_a_transcript_shown_at_two_suspensions_is_written_once_after_earlier_turns() -> None:
    log: list[str] = []
    script = [
        assistant("Hello."),  # an earlier turn of the thread
        assistant("One.", tool_calls=[ToolCall(id="r7", name="refund", args={"order": 7})]),
        assistant("Two.", tool_calls=[ToolCall(id="r8", name="refund", args={"order": 8})]),
        assistant("Both refunded."),
    ]
    agent = refund_agent(log, FakeProvider(script))
    backend = InMemoryBackend()
    await agent.invoke({"query": "hi"}, thread_id="t", backend=backend)
    first = await agent.invoke({"query": "refund 7 and 8"}, thread_id="t", backend=backend)
    second = await agent.invoke(thread_id="t", backend=backend, resume={"r7": True})
    assert run_info(second).awaiting == ["r8"]
    texts = [m.text for m in second.messages]
    assert texts == ["hi", "Hello.", "refund 7 and 8", "One.", "refunded #7", "Two."]
    assert [m.text for m in first.messages] == texts[:4]
    done = await agent.invoke(thread_id="t", backend=backend, resume={"r8": True})
    assert [m.text for m in done.messages] == [*texts, "refunded #8", "Both refunded."]
    assert log == ["refund 7", "refund 8"]


async def test_a_suspended_agent_shows_its_transcript_in_the_task_record() -> None:
    provider = FakeProvider(lookup_then_refund(), usage=Usage(input_tokens=10, output_tokens=2))
    runner = AsyncRunner(refund_agent([], provider), backend=InMemoryBackend())
    try:
        record = await runner.submit({"query": "refund 7"})
        record = await runner.await_run(record.run_id, timeout=30)
    finally:
        await runner.aclose()
    assert record.status == "suspended" and record.waiting_for == "approval"
    roles = [m["role"] for m in record.output["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert record.output["usage"]["input_tokens"] == 20


async def test_a_runner_refuses_a_second_different_decision_naming_the_first() -> None:
    runner = AsyncRunner(refund_agent([], FakeProvider([two_refunds()])), backend=InMemoryBackend())
    try:
        record = await runner.submit({"query": "refund 7 and 8"})
        record = await runner.await_run(record.run_id, timeout=30)
        assert record.status == "suspended"
        await runner.approve(record.run_id, {"r7": True})
        with pytest.raises(DecisionConflictError, match=r"'r7'.*already decided: True"):
            await runner.approve(record.run_id, {"r7": "reject"})
        same = await runner.approve(record.run_id, {"r7": "approve"})  # the same: a no-op
        assert same.decisions == {"r7": True} and same.status == "suspended"
    finally:
        await runner.aclose()


async def approved_then_crashed() -> tuple[Any, InMemoryBackend, list[str]]:
    """A refund approved, run, and the process gone before the run's next checkpoint."""

    async def suspended(store: InMemoryBackend, log: list[str]) -> Any:
        agent = refund_agent(log, FakeProvider(lookup_then_refund()[1:]))
        await agent.invoke({"query": "refund 7"}, thread_id="t", backend=store)
        return agent

    counting = CrashingBackend(InMemoryBackend())
    agent = await suspended(counting.inner, [])  # type: ignore[arg-type]
    await agent.invoke(thread_id="t", backend=counting, resume={"r7": True})
    # The tool's result (its intent, written before it ran, is a boundary of its own).
    tool_boundary = next(
        i for i, b in enumerate(counting.boundaries) if ":tool:" in b and "intent:" not in b
    )

    log: list[str] = []
    store = InMemoryBackend()
    agent = await suspended(store, log)
    # Short enough to wait out, long enough that the living run keeps it on a loaded machine
    # (0.05 s lost to a load of 7 once).
    store.lease_ttl = 0.5
    dying = CrashingBackend(store, crash_at=tool_boundary + 1, mode="raise")
    with pytest.raises(SimulatedCrash):
        await agent.invoke(thread_id="t", backend=dying, resume={"r7": True})
    assert log == ["refund 7"]
    await asyncio.sleep(0.6)  # the dead run's lease lapses
    return agent, store, log


async def test_after_a_crash_a_recorded_decision_shows_as_decided() -> None:
    agent, store, log = await approved_then_crashed()
    state = await agent.aget_state("t", store)
    assert state is not None
    info = run_info(state)
    # Recorded bound to the call it approved: the digest of the pending call's arguments.
    digest = info.interrupts[0].value["digest"]
    assert info.decisions == {"r7": {"approved": True, "reason": None, "digest": digest}}
    assert info.awaiting == [] and info.status == "pending" and not info.suspended
    assert [p.id for p in info.interrupts] == ["r7"]  # what it waited on, now decided
    synced = agent.get_state("t", store)
    assert synced is not None and run_info(synced).decisions == info.decisions

    done = await agent.invoke(thread_id="t", backend=store)  # continue, no decision needed
    assert done.status == "completed" and done.output == "Refunded." and log == ["refund 7"]


async def test_after_a_crash_a_conflicting_decision_is_refused_naming_the_first() -> None:
    agent, store, log = await approved_then_crashed()
    with pytest.raises(
        DecisionConflictError, match=r"'r7'.*already decided: \{'approved': True"
    ) as caught:
        await agent.invoke(thread_id="t", backend=store, resume={"r7": "reject"})
    assert caught.value.first["approved"] is True and caught.value.interrupt_id == "r7"
    assert isinstance(caught.value, ValueError)  # a resume= mistake, as the others are
    out = await agent.invoke(thread_id="t", backend=store, resume={"r7": "approve"})  # same
    assert out.status == "completed" and log == ["refund 7"]


APPROVAL_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from tensorsketch import FakeProvider, SqliteBackend, create_agent, tool
    from tensorsketch.messages import Message, ToolCall, assistant

    db, log = sys.argv[2], sys.argv[3]

    @tool(requires_approval=True)
    def wire(amount: int) -> str:
        "Send money."
        with open(log, "a") as f:
            f.write(f"wired {amount}\\n")
        return f"sent ${amount}"

    def policy(messages, tools):
        last = messages[-1]
        if last.role == "tool":
            return assistant(f"Result: {last.text}")
        return assistant(tool_calls=[ToolCall(id="w1", name="wire", args={"amount": 25})])

    async def main():
        provider = FakeProvider(policy=policy)
        agent = create_agent(provider, tools=[wire])
        backend = SqliteBackend(db)
        if sys.argv[1] == "start":
            out = await agent.invoke({"query": "pay ann"}, thread_id="pay-1", backend=backend)
        else:
            decision = json.loads(sys.argv[4])
            out = await agent.invoke(thread_id="pay-1", backend=backend, resume={"w1": decision})
        print(json.dumps({
            "status": out.status,
            "pending": [p.id for p in out.pending],
            "output": out.output,
            "model_calls": len(provider.calls),
        }))

    asyncio.run(main())
    """
)


def run_process(script: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("decision", "output", "wired"), [(True, "Result: sent $25", 1), (False, None, 0)]
)
def test_approval_survives_a_process_restart_on_sqlite(
    tmp_path: Path, decision: bool, output: str | None, wired: int
) -> None:
    script = tmp_path / "approve.py"
    script.write_text(APPROVAL_SCRIPT)
    db, log = str(tmp_path / "runs.db"), tmp_path / "wired.log"
    first = run_process(script, "start", db, str(log))
    assert first == {"status": "suspended", "pending": ["w1"], "output": "", "model_calls": 1}
    second = run_process(script, "resume", db, str(log), json.dumps(decision))
    assert second["status"] == "completed" and second["pending"] == []
    assert second["model_calls"] == 1  # the first model call was replayed, not repeated
    if output is not None:
        assert second["output"] == output
    else:
        assert second["output"].startswith("Result: A human reviewer rejected this call")
    lines = log.read_text().splitlines() if log.exists() else []
    assert lines == ["wired 25"] * wired


# -- a tool asking to be retried later --------------------------------------------------------


async def test_retry_later_suspends_as_a_timer_and_reruns_only_that_call(clock: Clock) -> None:
    log: list[str] = []
    ready = False

    @tool
    def report(name: str) -> str:
        """Fetch a report that takes a while to be generated."""
        log.append(f"report {name}")
        if not ready:
            raise RetryLater("still generating", delay=120)
        return f"report {name}: 42"

    @tool
    def ping() -> str:
        """Ping."""
        log.append("ping")
        return "pong"

    provider = FakeProvider(
        [
            assistant(
                tool_calls=[
                    ToolCall(id="a", name="ping", args={}),
                    ToolCall(id="b", name="report", args={"name": "q3"}),
                ]
            ),
            assistant("The Q3 report says 42."),
        ]
    )
    agent = create_agent(provider, tools=[ping, report])
    backend = InMemoryBackend()
    out = await agent.invoke({"query": "q3?"}, thread_id="t", backend=backend)
    [pending] = out.pending
    assert out.status == "suspended" and pending.kind == "timer"
    assert pending.wake_at == clock.now + 120 and pending.value["reason"] == "still generating"
    assert sorted(log) == ["ping", "report q3"]

    clock.now += 60  # before the time: nothing is called again
    assert (await agent.invoke(thread_id="t", backend=backend)).status == "suspended"
    assert sorted(log) == ["ping", "report q3"]

    clock.now += 61
    ready = True
    out = await agent.invoke(thread_id="t", backend=backend)
    assert out.status == "completed" and out.output == "The Q3 report says 42."
    assert sorted(log) == ["ping", "report q3", "report q3"]
    assert len(provider.calls) == 2
