"""Native tracing: the span lifecycle, nesting across awaits and tasks, replay, the Trace view."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Node,
    NoopTracer,
    RecordingTracer,
    Reducer,
    Schema,
    Send,
    Span,
)
from tensorsketch.observability.memory import SUMMARY_KEYS, Trace
from tensorsketch.observability.tracing import NOOP_TRACER, current_span


class S(Schema):
    x: int = 0
    log: Annotated[list[str], Reducer(lambda a, b: a + b)] = []


def _chain(*names: str) -> Graph[S]:
    """A linear graph of nodes that each append their name to the log."""
    g = Graph(S)
    for name in names:

        class Step(Node):
            class Out(Schema):
                log: list[str]

            label = name

            async def run(self, ctx: Context, inp: object) -> Any:
                return self.Out(log=[self.label])

        g.add(Step(), name=name)
    g.edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.edge(a, b)
    g.edge(names[-1], END)
    return g


async def test_run_and_node_spans_form_one_tree() -> None:
    tracer = InMemoryTracer()
    out = await _chain("A", "B", "C").compile().invoke({}, tracer=tracer)
    assert out.log == ["A", "B", "C"]

    trace = tracer.trace
    assert [s.name for s in trace.spans] == ["A", "B", "C", "run"]  # children close first
    (run,) = trace.roots
    assert run.kind == "run"
    assert run.parent_id is None
    assert run.attributes["tensorsketch.graph"] == "Graph[S]"
    assert run.attributes["tensorsketch.steps"] == 3
    nodes = trace.children(run)
    assert [n.name for n in nodes] == ["A", "B", "C"]
    assert [n.attributes["tensorsketch.step"] for n in nodes] == [0, 1, 2]
    assert all(n.kind == "node" and n.attributes["tensorsketch.node"] == n.name for n in nodes)
    assert {s.trace_id for s in trace.spans} == {tracer.trace_id}
    assert len({s.span_id for s in trace.spans}) == 4
    assert all(s.status == "ok" and s.end is not None for s in trace.spans)


async def test_noop_tracer_is_the_default_and_keeps_nothing() -> None:
    seen: list[Span] = []

    class Probe(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            with ctx.span("work", model="m") as span:
                span.set_attribute("k", "v")
                span.set_attributes(a=1)
                seen.append(span)
                assert current_span.get() is None  # a noop span never becomes a parent

    app = Graph(S).add(Probe).edge(START, "Probe").compile()
    await app.invoke({})
    await app.invoke({}, tracer=NoopTracer())
    assert NOOP_TRACER.enabled is False
    assert len(seen) == 2
    assert all(span.attributes == {} for span in seen)


async def test_ctx_span_nests_under_parallel_nodes_across_awaits() -> None:
    """Two nodes of one superstep interleave at every await; each sub-span finds its own node."""
    a_inside, b_inside = asyncio.Event(), asyncio.Event()

    class A(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            with ctx.span("a.outer"):
                a_inside.set()
                await b_inside.wait()  # B is now inside its own span
                with ctx.span("a.inner"):
                    await asyncio.sleep(0)

    class B(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            with ctx.span("b.outer"):
                b_inside.set()
                await a_inside.wait()
                with ctx.span("b.inner"):
                    await asyncio.sleep(0)

    tracer = InMemoryTracer()
    app = Graph(S).add(A).add(B).edge(START, "A").edge(START, "B").compile()
    await app.invoke({}, tracer=tracer)

    trace = tracer.trace
    by_name = {s.name: s for s in trace.spans}
    assert by_name["a.outer"].parent_id == by_name["A"].span_id
    assert by_name["a.inner"].parent_id == by_name["a.outer"].span_id
    assert by_name["b.outer"].parent_id == by_name["B"].span_id
    assert by_name["b.inner"].parent_id == by_name["b.outer"].span_id
    assert by_name["A"].parent_id == by_name["B"].parent_id == by_name["run"].span_id
    assert [d for d, _ in trace.walk()] == [0, 1, 2, 3, 1, 2, 3]


async def test_ctx_span_nests_inside_gather_within_a_node() -> None:
    class Fan(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            gate = asyncio.Barrier(3)

            async def part(i: int) -> None:
                with ctx.span(f"part{i}"):
                    await gate.wait()  # all three parts are open at once
                    with ctx.span(f"part{i}.leaf", index=i):
                        await asyncio.sleep(0)

            with ctx.span("fan-out"):
                await asyncio.gather(*(part(i) for i in range(3)))

    tracer = InMemoryTracer()
    await Graph(S).add(Fan).edge(START, "Fan").compile().invoke({}, tracer=tracer)
    by_name = {s.name: s for s in tracer.trace.spans}
    for i in range(3):
        assert by_name[f"part{i}"].parent_id == by_name["fan-out"].span_id
        assert by_name[f"part{i}.leaf"].parent_id == by_name[f"part{i}"].span_id
        assert by_name[f"part{i}.leaf"].attributes == {"index": i}
    assert by_name["fan-out"].parent_id == by_name["Fan"].span_id


async def test_send_instances_get_their_own_node_spans() -> None:
    class W(Schema):
        items: list[int] = []
        out: Annotated[list[int], Reducer(lambda a, b: a + b)] = []
        n: int = 0

    class Split(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            return None

    class Square(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            with ctx.span("square", n=inp.n):
                await asyncio.sleep(0)
            return self.Out(out=[inp.n * inp.n])

    def fan(state: W) -> list[Send]:
        return [Send("Square", {"n": n}) for n in state.items]

    app = (
        Graph(W)
        .add(Split)
        .add(Square)
        .edge(START, "Split")
        .conditional("Split", fan)
        .edge("Square", END)
        .compile()
    )
    tracer = InMemoryTracer()
    out = await app.invoke({"items": [1, 2, 3]}, tracer=tracer)
    assert sorted(out.out) == [1, 4, 9]
    trace = tracer.trace
    squares = trace.find("Square", kind="node")
    assert len(squares) == 3
    for node_span in squares:
        (child,) = trace.children(node_span)
        assert child.name == "square"
    assert sorted(c.attributes["n"] for c in trace.find("square")) == [1, 2, 3]


async def test_a_failure_marks_the_span_where_it_happened_and_propagates_unchanged() -> None:
    class Boom(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            with ctx.span("call-api", kind="tool", **{"gen_ai.tool.name": "charge"}):
                raise ValueError("payment API said no")

    tracer = InMemoryTracer()
    app = Graph(S).add(Boom).edge(START, "Boom").compile()
    with pytest.raises(ValueError, match="payment API said no") as info:
        await app.invoke({}, tracer=tracer)
    assert type(info.value) is ValueError

    trace = tracer.trace
    by_name = {s.name: s for s in trace.spans}
    for name in ("call-api", "Boom", "run"):
        assert by_name[name].status == "error"
        assert by_name[name].error == "ValueError: payment API said no"
        assert by_name[name].attributes["error.type"] == "ValueError"
    assert trace.errors == 1  # one failure, seen on the way up through two parents
    assert trace.error_spans == [by_name["call-api"]]
    assert trace.summary()["errors"] == 1
    lines = trace.render().splitlines()
    assert lines[0].rstrip().endswith("[error]")
    assert lines[2].rstrip().endswith("[charge] [error: ValueError: payment API said no]")


async def test_a_parallel_sibling_cancelled_by_a_failure_is_marked_cancelled() -> None:
    started = asyncio.Event()

    class Slow(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            started.set()
            await asyncio.Event().wait()  # never set: only cancellation ends this

    class Boom(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            await started.wait()
            raise RuntimeError("boom")

    tracer = InMemoryTracer()
    app = Graph(S).add(Slow).add(Boom).edge(START, "Slow").edge(START, "Boom").compile()
    with pytest.raises(RuntimeError):
        await app.invoke({}, tracer=tracer)
    by_name = {s.name: s for s in tracer.trace.spans}
    assert by_name["Slow"].status == "cancelled"
    assert by_name["Boom"].status == "error"
    assert tracer.trace.errors == 1
    assert "[cancelled]" in tracer.trace.render()


async def test_a_step_replayed_from_the_journal_opens_no_span() -> None:
    """The first attempt charges inside ``ctx.step`` (traced) and then crashes; the resumed run
    replays the recorded charge, so its trace shows the node but no second charge span."""
    charges: list[int] = []
    attempts: list[int] = []

    class Pay(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: object) -> Out:
            async def charge() -> str:
                with ctx.span("charge", kind="tool", **{"gen_ai.tool.name": "charge"}):
                    charges.append(1)
                    await asyncio.sleep(0)
                    return "receipt-1"

            receipt = await ctx.step("charge", charge)
            attempts.append(1)
            if len(attempts) == 1:
                raise ConnectionError("lost the database right after charging")
            return self.Out(log=[receipt])

    app = Graph(S).add(Pay).edge(START, "Pay").compile()
    backend = InMemoryBackend()
    first = InMemoryTracer()
    with pytest.raises(ConnectionError):
        await app.invoke({}, thread_id="t1", backend=backend, tracer=first)
    assert [s.name for s in first.trace.find(kind="tool")] == ["charge"]

    second = InMemoryTracer()
    out = await app.invoke(None, thread_id="t1", backend=backend, tracer=second)
    assert out.log == ["receipt-1"]
    assert charges == [1]  # the effect ran once
    names = [s.name for _, s in second.trace.walk()]
    assert names == ["run", "Pay"]  # no span for the replayed charge
    assert second.trace.tool_calls == 0


async def test_stream_takes_a_tracer_too() -> None:
    tracer = InMemoryTracer()
    events = [e.type async for e in _chain("A", "B").compile().stream({}, tracer=tracer)]
    assert events[0] == "run_start"
    assert [s.name for _, s in tracer.trace.walk()] == ["run", "A", "B"]


def _model(
    name: str, parent: Span, *, out: int, inp: int, cost: float | None, model: str = "m-1"
) -> Span:
    attrs: dict[str, Any] = {
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.output_tokens": out,
    }
    if cost is not None:
        attrs["gen_ai.usage.cost_usd"] = cost
    return Span(name, "model", "t", name, parent.span_id, 0.0, 0.001, 2.0, attributes=attrs)


def _agent_like_trace() -> Trace:
    run = Span("run", "run", "t", "r", None, 0.0, 0.0124, 1.0)
    agent = Span("agent", "node", "t", "a", "r", 0.0, 0.0119, 1.5)
    m1 = _model("model_call", agent, out=120, inp=1000, cost=0.0048)
    m1.span_id, m1.started_at = "m1", 2.0
    tool = Span("tool_call", "tool", "t", "tc", "a", 0.0, 0.0003, 3.0)
    tool.attributes = {"gen_ai.tool.name": "search"}
    m2 = _model("model_call", agent, out=120, inp=1200, cost=0.0054)
    m2.span_id, m2.started_at = "m2", 4.0
    # an agent node that repeats its total must not be counted twice
    agent.attributes = {"gen_ai.usage.output_tokens": 240, "gen_ai.usage.cost_usd": 0.0102}
    return Trace([m1, tool, m2, agent, run])


def test_summary_has_exactly_the_documented_keys_and_matches_the_properties() -> None:
    trace = _agent_like_trace()
    summary = trace.summary()
    assert tuple(summary) == SUMMARY_KEYS
    assert summary == {
        "duration_ms": 12.4,
        "spans": 5,
        "model_calls": 2,
        "tool_calls": 1,
        "input_tokens": 2200,
        "output_tokens": 240,
        "cost_usd": 0.0102,
        "errors": 0,
    }
    assert trace.duration_ms == pytest.approx(12.4)
    assert trace.span_count == len(trace) == 5
    assert (trace.model_calls, trace.tool_calls) == (2, 1)
    assert (trace.input_tokens, trace.output_tokens) == (2200, 240)
    assert trace.cost_usd == pytest.approx(0.0102)
    assert trace.unpriced_models == []
    assert [s.span_id for s in trace.model_spans] == ["m1", "m2"]
    assert [s.attributes["gen_ai.tool.name"] for s in trace.tool_spans] == ["search"]


def test_render_draws_the_tree_with_aligned_annotations() -> None:
    assert _agent_like_trace().render().splitlines() == [
        "run (12.4ms)",
        "  agent (11.9ms)",
        "    model_call (1.0ms)  [m-1, 120 out-tok, $0.004800]",
        "    tool_call (0.3ms)   [search]",
        "    model_call (1.0ms)  [m-1, 120 out-tok, $0.005400]",
    ]
    assert Trace([]).render() == "(empty trace)"


def test_unpriced_models_are_flagged_not_counted_as_free() -> None:
    run = Span("run", "run", "t", "r", None, 0.0, 0.01, 1.0)
    priced = _model("a", run, out=10, inp=100, cost=0.5, model="priced")
    unpriced = _model("b", run, out=10, inp=100, cost=None, model="mystery-7b")
    trace = Trace([priced, unpriced, run])
    assert trace.cost_usd == 0.5
    assert trace.unpriced_models == ["mystery-7b"]
    assert "[mystery-7b, 10 out-tok, unpriced]" in trace.render()


def test_a_remote_parent_makes_the_run_span_a_root_of_this_trace() -> None:
    run = Span("run", "run", "t", "r", "caller-span", 0.0, 0.01, 1.0)
    node = Span("N", "node", "t", "n", "r", 0.0, 0.005, 1.1)
    trace = Trace([node, run])
    assert trace.roots == [run]
    assert trace.parent(node) is run
    assert trace.parent(run) is None


async def test_a_sink_that_raises_never_breaks_the_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(RecordingTracer):
        def _record(self, span: Span) -> None:
            raise OSError("disk full")

    caplog.set_level(logging.ERROR, logger="tensorsketch.observability")
    out = await _chain("A").compile().invoke({}, tracer=Broken())
    assert out.log == ["A"]
    assert "trace sink Broken failed to record span 'A'" in caplog.text


async def test_one_tracer_recording_two_runs_keeps_one_trace_id() -> None:
    tracer = InMemoryTracer()
    app = _chain("A").compile()
    await app.invoke({}, tracer=tracer)
    await app.invoke({}, tracer=tracer)
    trace = tracer.trace
    assert len(trace.roots) == 2
    assert {s.trace_id for s in trace.spans} == {tracer.trace_id}
    assert trace.duration_ms == pytest.approx(sum(r.duration_ms for r in trace.roots))
    tracer.clear()
    assert len(tracer.trace) == 0


async def test_a_suspended_run_is_marked_suspended_not_failed() -> None:
    from tensorsketch import interrupt
    from tensorsketch.interrupts import run_info

    class Approve(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: object) -> Out:
            with ctx.span("ask", kind="custom"):
                answer = await interrupt(ctx, "ship it?", id="ship")
            return self.Out(log=[f"answer={answer}"])

    app = Graph(S).add(Approve).edge(START, "Approve").compile()
    backend = InMemoryBackend()
    waiting = InMemoryTracer()
    out = await app.invoke({}, thread_id="t-s", backend=backend, tracer=waiting)
    assert run_info(out).status == "suspended"
    statuses = {s.name: s.status for s in waiting.trace.spans}
    assert statuses["ask"] == statuses["Approve"] == "suspended"
    # the run span too: a run that waits is neither "ok" (done) nor an error
    assert statuses["run"] == "suspended"
    assert waiting.trace.errors == 0
    assert "[suspended]" in waiting.trace.render()

    resumed = InMemoryTracer()
    out = await app.invoke(
        None, thread_id="t-s", backend=backend, resume={"ship": "yes"}, tracer=resumed
    )
    assert out.log == ["answer=yes"]
    assert {s.status for s in resumed.trace.spans} == {"ok"}
