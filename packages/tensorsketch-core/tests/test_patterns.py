from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Node,
    Schema,
    as_tool,
    create_agent,
    gather_map,
    interrupt,
    parallel,
    run_subgraph,
    tool,
)
from tensorsketch.interrupts import run_info
from tensorsketch.messages import Message, ToolCall, assistant


class Docs(Schema):
    docs: list[str]
    out: list[str] = []


def map_graph(fn: Any, **kwargs: Any) -> Any:
    class Map(Node):
        class In(Schema):
            docs: list[str]

        class Out(Schema):
            out: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(out=await gather_map(ctx, inp.docs, fn, **kwargs))

    return Graph(Docs).add(Map).edge(START, "Map").edge("Map", END).compile()


async def test_gather_map_keeps_item_order_and_caps_concurrency() -> None:
    inflight = 0
    peak = 0

    async def work(doc: str) -> str:
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        for _ in range(10 - len(doc)):  # shorter docs take longer: completion order reversed
            await asyncio.sleep(0)
        inflight -= 1
        return doc.upper()

    docs = ["a", "bb", "ccc", "dddd", "eeeee"]
    out = await map_graph(work, max_concurrency=2).invoke({"docs": docs})
    assert out.out == ["A", "BB", "CCC", "DDDD", "EEEEE"] and peak == 2
    peak = 0
    assert await gather_map(None, docs, work) == [d.upper() for d in docs] and peak == 5
    with pytest.raises(ValueError, match="max_concurrency"):
        await gather_map(None, docs, work, max_concurrency=0)


async def test_gather_map_resumes_only_unfinished_items() -> None:
    runs: list[str] = []
    finished = asyncio.Event()
    fail = [True]

    async def work(doc: str) -> str:
        runs.append(doc)
        if doc == "boom":
            await finished.wait()
            if fail.pop() if fail else False:
                raise RuntimeError("worker died")
        elif len(runs) >= 4:
            finished.set()
        return doc[::-1]

    app = map_graph(work)
    backend = InMemoryBackend()
    docs = ["one", "two", "boom", "four"]
    with pytest.raises(RuntimeError, match="worker died"):
        await app.invoke({"docs": docs}, thread_id="t", backend=backend)
    assert sorted(runs) == sorted(docs)
    runs.clear()
    finished.set()
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.out == ["eno", "owt", "moob", "ruof"]
    assert runs == ["boom"]


async def test_parallel_returns_in_argument_order_and_is_durable() -> None:
    calls: list[str] = []

    async def slow() -> str:
        calls.append("slow")
        for _ in range(5):
            await asyncio.sleep(0)
        return "slow"

    async def fast() -> str:
        calls.append("fast")
        return "fast"

    class State(Schema):
        out: list[str] = []
        confirmed: str = ""

    class Both(Node):
        class Out(Schema):
            out: list[str]
            confirmed: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            results = await parallel(ctx, slow, fast)
            confirmed = await interrupt(ctx, "confirm?")
            return self.Out(out=results, confirmed=confirmed)

    app = Graph(State).add(Both).edge(START, "Both").edge("Both", END).compile()
    backend = InMemoryBackend()
    first = await app.invoke({}, thread_id="t", backend=backend)
    [pending] = run_info(first).interrupts
    out = await app.invoke(thread_id="t", backend=backend, resume={pending.id: "yes"})
    assert out.out == ["slow", "fast"] and out.confirmed == "yes"
    assert sorted(calls) == ["fast", "slow"]  # not re-run on resume
    with pytest.raises(TypeError, match="zero-argument callables"):
        await parallel(None, "nope")  # type: ignore[arg-type]


# -- sub-graphs ------------------------------------------------------------------------------


class Inner(Schema):
    topic: str
    summary: str = ""


def inner_graph(effects: list[str], *, ask: bool = False) -> Any:
    class Research(Node):
        class In(Schema):
            topic: str

        class Out(Schema):
            summary: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            await ctx.step("search", lambda: effects.append(f"search {inp.topic}"))
            await ctx.emit("status", {"stage": "searched"})
            note = await interrupt(ctx, "approve the sources?") if ask else "ok"
            return self.Out(summary=f"{inp.topic}: {note}")

    return Graph(Inner).add(Research).edge(START, "Research").edge("Research", END).compile()


class Outer(Schema):
    topic: str
    report: str = ""


def outer_graph(inner: Any) -> Any:
    class Report(Node):
        class In(Schema):
            topic: str

        class Out(Schema):
            report: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            result = await run_subgraph(inner, {"topic": inp.topic}, ctx=ctx)
            return self.Out(report=result.summary.upper())

    return Graph(Outer).add(Report).edge(START, "Report").edge("Report", END).compile()


async def test_run_subgraph_nests_events_and_spans() -> None:
    app = outer_graph(inner_graph([]))
    events = [e async for e in app.stream({"topic": "owls"})]
    status = next(e for e in events if e.type == "status")
    assert status.namespace == ("Report:run_subgraph",) and status.node == "Research"
    assert [e.seq for e in events] == list(range(len(events)))
    tracer = InMemoryTracer()
    out = await app.invoke({"topic": "owls"}, tracer=tracer)
    assert out.report == "OWLS: OK"
    research = tracer.trace.find("Research")[0]
    chain = []
    span = research
    while span is not None:
        chain.append(span.name)
        span = tracer.trace.parent(span)
    assert chain == ["Research", "run", "Report", "run"]


async def test_a_suspended_subgraph_suspends_its_caller_and_resumes_with_it() -> None:
    effects: list[str] = []
    app = outer_graph(inner_graph(effects, ask=True))
    backend = InMemoryBackend()
    first = await app.invoke({"topic": "owls"}, thread_id="t", backend=backend)
    [pending] = run_info(first).interrupts
    assert pending.value == "approve the sources?"
    children = [t for t in backend._checkpoints if t.startswith("t/")]
    assert len(children) == 1  # the sub-graph ran durably on a child thread
    out = await app.invoke(thread_id="t", backend=backend, resume={pending.id: "fine"})
    assert out.report == "OWLS: FINE"
    assert effects == ["search owls"]


# -- agents as tools ---------------------------------------------------------------------------


def specialist_policy(messages: list[Message], tools: list[Any]) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"specialist: {last.text}")
    return assistant(tool_calls=[ToolCall(id="sp1", name="cancel", args={"plan": "pro"})])


def supervisor_policy(messages: list[Message], tools: list[Any]) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"relayed: {last.text}")
    return assistant(tool_calls=[ToolCall(id="sv1", name="billing", args={"request": last.text})])


async def test_approval_inside_a_specialist_suspends_the_supervisor() -> None:
    cancelled: list[str] = []

    @tool(requires_approval=True)
    def cancel(plan: str) -> str:
        """Cancel a subscription."""
        cancelled.append(plan)
        return f"{plan} cancelled"

    specialist_model = FakeProvider(policy=specialist_policy)
    supervisor_model = FakeProvider(policy=supervisor_policy)
    billing = create_agent(specialist_model, tools=[cancel])
    supervisor = create_agent(
        supervisor_model, tools=[as_tool(billing, name="billing", description="Billing.")]
    )
    backend = InMemoryBackend()
    out = await supervisor.invoke({"query": "cancel my pro plan"}, thread_id="s", backend=backend)
    assert out.status == "suspended"
    [pending] = out.pending
    assert (pending.id, pending.kind, pending.value["tool"]) == ("sp1", "approval", "cancel")
    out = await supervisor.invoke(thread_id="s", backend=backend, resume={"sp1": True})
    assert out.status == "completed"
    assert out.output == "relayed: specialist: pro cancelled"
    assert cancelled == ["pro"]
    assert len(supervisor_model.calls) == 2 and len(specialist_model.calls) == 2


class Crash(BaseException):
    pass


async def test_a_crash_inside_a_specialist_resumes_it_mid_way() -> None:
    crash = [True]

    @tool
    def cancel(plan: str) -> str:
        """Cancel a subscription."""
        if crash.pop() if crash else False:
            raise Crash
        return f"{plan} cancelled"

    specialist_model = FakeProvider(policy=specialist_policy)
    supervisor_model = FakeProvider(policy=supervisor_policy)
    billing = create_agent(specialist_model, tools=[cancel])
    supervisor = create_agent(
        supervisor_model, tools=[as_tool(billing, name="billing", description="Billing.")]
    )
    backend = InMemoryBackend()
    with pytest.raises(Crash):
        await supervisor.invoke({"query": "cancel pro"}, thread_id="s", backend=backend)
    assert (len(supervisor_model.calls), len(specialist_model.calls)) == (1, 1)
    out = await supervisor.invoke(thread_id="s", backend=backend)
    assert out.output == "relayed: specialist: pro cancelled"
    assert (len(supervisor_model.calls), len(specialist_model.calls)) == (2, 2)


def test_as_tool_checks_its_keys() -> None:
    agent = create_agent(FakeProvider())
    with pytest.raises(ValueError, match="input_key='question' is not a field of AgentState"):
        as_tool(agent, name="x", description="X.", input_key="question")
    with pytest.raises(TypeError, match="needs a compiled graph"):
        as_tool(object(), name="x", description="X.")  # type: ignore[arg-type]
