"""The executor seam: ``Send`` instances run elsewhere, the result is the in-process run's.

The executor under test is real, not a mock: it runs each batch of calls on a thread pool,
each thread on its own event loop, and sends the work and the outcomes through ``pickle`` in
both directions — what a process or machine boundary would do — so a field that does not
cross the seam cleanly fails here.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import pickle
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    ExecutorError,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Node,
    Reducer,
    RegistryError,
    RetryPolicy,
    Schema,
    Send,
    create_executor,
    hookimpl,
    interrupt,
    register_executor,
)
from tensorsketch.executors import (
    Executor,
    InProcessExecutor,
    RemoteTaskError,
    Superstep,
    TaskOutcome,
    portable_error,
    run_calls,
)
from tensorsketch.interrupts import run_info
from tensorsketch.plugins import get_plugin_manager, reset_plugin_manager
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.registry import executors


class PoolExecutor(Executor):
    """Batches of calls on worker threads, each with its own event loop; everything that
    crosses goes through pickle. Batches finish in reverse order of submission when
    ``reverse`` is set, so plan order cannot be an accident of completion order."""

    name = "pool"

    def __init__(self, batch_size: int = 7, threads: int = 3, reverse: bool = True) -> None:
        self.batch_size = batch_size
        self.reverse = reverse
        self.pool = ThreadPoolExecutor(threads)
        self.batches = 0

    def _batch(self, graph: GraphSpec, blob: bytes, start: int) -> bytes:
        work: Superstep = pickle.loads(blob)
        calls = work.calls[start : start + self.batch_size]
        outcomes = asyncio.run(run_calls(graph, work, calls))
        for outcome in outcomes:
            if outcome.error is not None:
                outcome.error = portable_error(outcome.error)
        return pickle.dumps(outcomes)

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        blob = pickle.dumps(work)  # once per superstep, shared by its batches
        loop = asyncio.get_running_loop()
        starts = list(range(0, len(work.calls), self.batch_size))
        futures = [
            asyncio.wrap_future(self.pool.submit(self._batch, graph, blob, s), loop=loop)
            for s in starts
        ]
        self.batches += len(futures)
        try:
            if self.reverse:
                for future in reversed(futures):
                    yield pickle.loads(await future)
            else:
                for future in asyncio.as_completed(futures):
                    yield pickle.loads(await future)
        finally:
            for future in futures:
                future.cancel()


# -- graphs -------------------------------------------------------------------------------------


class MapState(Schema):
    items: list[int] = []
    item: int = 0
    bias: int = 0
    out: Annotated[list[int], Reducer(operator.add)] = []
    notes: Annotated[list[str], Reducer(operator.add)] = []


class Worker(Node):
    class In(Schema):
        item: int
        bias: int

    class Out(Schema):
        out: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        await asyncio.sleep(0.001 * (inp.item % 3))  # finish out of plan order
        return self.Out(out=[inp.item * 10 + inp.bias])


class Summarise(Node):
    class In(Schema):
        items: list[int]

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(notes=[f"summary of {len(inp.items)}"])


class Sum(Node):
    class In(Schema):
        out: list[int]

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(notes=[f"sum={sum(inp.out)}"])


def fan(state: MapState) -> list[Any]:
    return [Send("Worker", {"item": i}) for i in state.items]


def fan_and_summarise(state: MapState) -> list[Any]:
    return ["Summarise", *fan(state)]


class Start(Node):
    class In(Schema):
        items: list[int]

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(notes=["start"])


def map_graph(router: Any = fan, **compile_options: Any) -> Any:
    return (
        Graph(MapState)
        .add(Start)
        .add(Worker)
        .add(Summarise)
        .add(Sum)
        .edge(START, "Start")
        .router("Start", router)
        .edge("Worker", "Sum")
        .edge("Summarise", "Sum")
        .edge("Sum", END)
        .compile(**compile_options)
    )


ITEMS = list(range(60))


async def test_a_shipped_fan_out_equals_the_in_process_run() -> None:
    pool = PoolExecutor()
    expected = await map_graph().invoke({"items": ITEMS, "bias": 3})
    got = await map_graph(executor=pool).invoke({"items": ITEMS, "bias": 3})
    assert pool.batches == 9  # 60 instances in batches of 7: the seam was used
    assert got.model_dump() == expected.model_dump()
    assert got.out == [i * 10 + 3 for i in ITEMS]  # plan order, though batches came reversed


async def test_plain_nodes_of_a_shipped_superstep_run_here_beside_the_instances() -> None:
    pool = PoolExecutor(batch_size=5)
    expected = await map_graph(fan_and_summarise).invoke({"items": ITEMS})
    got = await map_graph(fan_and_summarise, executor=pool).invoke({"items": ITEMS})
    assert got.model_dump() == expected.model_dump()
    assert got.notes == ["start", "summary of 60", f"sum={sum(i * 10 for i in ITEMS)}"]


async def test_invoke_chooses_the_executor_over_the_compiled_one() -> None:
    pool = PoolExecutor()
    graph = map_graph(executor=pool)
    here = await graph.invoke({"items": ITEMS}, executor="inprocess")
    assert pool.batches == 0
    other = PoolExecutor(batch_size=30)
    there = await map_graph().invoke({"items": ITEMS}, executor=other)
    assert other.batches == 2
    assert here.model_dump() == there.model_dump()


async def test_streamed_events_of_shipped_instances_are_delivered() -> None:
    pool = PoolExecutor(batch_size=4)
    items = [1, 2, 3, 4, 5]
    local = [e async for e in map_graph().stream({"items": items})]
    shipped = [e async for e in map_graph(executor=pool).stream({"items": items})]

    def worker_events(events: list[Any]) -> list[tuple[str, str]]:
        return sorted((e.type, e.data["instance"]) for e in events if e.node == "Worker" and e.data)

    assert worker_events(shipped) == worker_events(local)
    assert [e.seq for e in shipped] == list(range(len(shipped)))  # numbered by the caller
    assert shipped[-1].type == "run_end"
    assert shipped[-1].data == local[-1].data


async def test_a_shipped_superstep_is_one_span_under_the_run() -> None:
    tracer = InMemoryTracer()
    await map_graph(fan_and_summarise, executor=PoolExecutor()).invoke(
        {"items": ITEMS}, tracer=tracer
    )
    trace = tracer.trace
    (run,) = trace.roots
    (shipped,) = trace.find(kind="executor")
    assert trace.parent(shipped) is run
    assert shipped.name == "pool executor"
    assert shipped.attributes["tensorsketch.instances"] == len(ITEMS)
    assert shipped.attributes["tensorsketch.step"] == 1
    # Plain nodes still trace here, as children of the run.
    assert [n.name for n in trace.children(run) if n.kind == "node"] == [
        "Start",
        "Summarise",
        "Sum",
    ]


class Busy(Node):
    """Counts how many instances are inside their body at once."""

    class In(Schema):
        item: int

    class Out(Schema):
        out: list[int]

    inside = 0
    most = 0

    async def run(self, ctx: Context, inp: In) -> Out:
        Busy.inside += 1
        Busy.most = max(Busy.most, Busy.inside)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        Busy.inside -= 1
        return self.Out(out=[inp.item])


async def test_a_batch_on_a_worker_keeps_max_concurrency() -> None:
    graph = (
        Graph(MapState)
        .add(Start)
        .add(Busy)
        .edge(START, "Start")
        .router("Start", lambda s: [Send("Busy", {"item": i}) for i in s.items])
        .edge("Busy", END)
        .compile(executor=InProcessThrough())
    )
    Busy.most = 0
    out = await graph.invoke({"items": list(range(20))}, max_concurrency=3)
    assert out.out == list(range(20))
    assert Busy.most == 3
    Busy.most = 0
    await graph.invoke({"items": list(range(20))})
    assert Busy.most == 20


class InProcessThrough(Executor):
    """Every call in one batch on this loop, through the seam."""

    name = "through"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        yield await run_calls(graph, work)


# -- failures, per-task commit and effects -----------------------------------------------------


class Charge(Node):
    """Charges a card (counted per item), then fails for the items in ``broken``."""

    class In(Schema):
        item: int

    class Out(Schema):
        out: list[int]

    broken: set[int] = set()
    charges: dict[int, int] = {}
    runs: dict[int, int] = {}
    lock = threading.Lock()

    async def run(self, ctx: Context, inp: In) -> Out:
        with self.lock:
            self.runs[inp.item] = self.runs.get(inp.item, 0) + 1

        def charge() -> str:
            with self.lock:
                self.charges[inp.item] = self.charges.get(inp.item, 0) + 1
            return f"receipt-{inp.item}"

        receipt = await ctx.step("charge", charge)
        assert receipt == f"receipt-{inp.item}"
        if inp.item in self.broken:
            msg = f"item {inp.item} is broken"
            raise ValueError(msg)
        return self.Out(out=[inp.item])


def charge_graph(**compile_options: Any) -> Any:
    return (
        Graph(MapState)
        .add(Start)
        .add(Charge)
        .edge(START, "Start")
        .router("Start", lambda s: [Send("Charge", {"item": i}) for i in s.items])
        .edge("Charge", END)
        .compile(**compile_options)
    )


@pytest.fixture
def charges() -> Iterator[None]:
    Charge.broken, Charge.charges, Charge.runs = set(), {}, {}
    yield
    Charge.broken, Charge.charges, Charge.runs = set(), {}, {}


@pytest.mark.usefixtures("charges")
async def test_a_failing_instance_raises_as_itself_and_its_siblings_are_kept() -> None:
    items = list(range(12))
    expected = await charge_graph().invoke({"items": items})
    Charge.charges, Charge.runs = {}, {}
    backend = InMemoryBackend()
    graph = charge_graph(executor=PoolExecutor(batch_size=4, threads=1, reverse=False))
    Charge.broken = {9}  # in the last of three batches, which run one after the other
    with pytest.raises(ValueError, match="item 9 is broken") as info:
        await graph.invoke({"items": items}, thread_id="t", backend=backend)
    assert any("'Charge'#9 in superstep 1" in note for note in info.value.__notes__)
    state = graph.get_state("t", backend)
    failed = run_info(state).error
    assert failed is not None and failed["node"] == "Charge" and failed["instance"] == "#9"

    Charge.broken = set()
    out = await graph.invoke(thread_id="t", backend=backend)
    assert out.out == items  # plan order after the resume
    assert out.model_dump() == expected.model_dump()
    # The failed instance's charge was journaled when its batch came back: it replayed.
    assert Charge.charges == dict.fromkeys(items, 1)
    # The batches that finished before the failure ran once; the failed instance re-ran.
    assert all(Charge.runs[i] == 1 for i in range(8))
    assert Charge.runs[9] == 2


@pytest.mark.usefixtures("charges")
async def test_effects_of_shipped_instances_are_in_the_journal_under_their_keys() -> None:
    backend = InMemoryBackend()
    graph = charge_graph(executor=PoolExecutor(batch_size=2))
    await graph.invoke({"items": [0, 1, 2]}, thread_id="j", backend=backend)
    raw = await backend.lookup_effect("j", "1:Charge#2:0:charge")
    assert raw is not None and backend.serializer.loads(raw) == ["receipt-2"]


@pytest.mark.usefixtures("charges")
async def test_a_resume_after_repeated_failures_replays_every_earlier_attempt() -> None:
    class Twice(Node):
        class In(Schema):
            item: int

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            first = await ctx.step("first", lambda: Charge.charges.setdefault(100, 0) + 1)
            Charge.charges[100] = first
            if first and 1 in Charge.broken:
                raise RuntimeError("first break")
            second = await ctx.step("second", lambda: Charge.charges.setdefault(200, 0) + 1)
            Charge.charges[200] = second
            if 2 in Charge.broken:
                raise RuntimeError("second break")
            return self.Out(out=[first + second])

    graph = (
        Graph(MapState)
        .add(Start)
        .add(Twice)
        .edge(START, "Start")
        .router("Start", lambda s: [Send("Twice", {"item": 0})])
        .edge("Twice", END)
        .compile(executor=PoolExecutor())
    )
    backend = InMemoryBackend()
    Charge.broken = {1, 2}
    with pytest.raises(RuntimeError, match="first break"):
        await graph.invoke({"items": [0]}, thread_id="r", backend=backend)
    Charge.broken = {2}
    with pytest.raises(RuntimeError, match="second break"):
        await graph.invoke(thread_id="r", backend=backend)
    Charge.broken = set()
    out = await graph.invoke(thread_id="r", backend=backend)
    assert out.out == [2]
    assert Charge.charges == {100: 1, 200: 1}  # each effect ran once over three attempts


class Flaky(Node):
    class In(Schema):
        item: int

    class Out(Schema):
        out: list[int]

    attempts: dict[int, int] = {}

    async def run(self, ctx: Context, inp: In) -> Out:
        token = await ctx.step("token", lambda: f"t{inp.item}")
        n = self.attempts[inp.item] = self.attempts.get(inp.item, 0) + 1
        if n == 1 and inp.item % 2:
            raise ConnectionError("flaky")
        return self.Out(out=[int(token[1:]) * 100 + n])


async def test_retry_policy_and_timeout_apply_on_the_worker() -> None:
    Flaky.attempts = {}

    def build(**options: Any) -> Any:
        return (
            Graph(MapState)
            .add(Start)
            .add(Flaky, retry=RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=False))
            .edge(START, "Start")
            .router("Start", lambda s: [Send("Flaky", {"item": i}) for i in s.items])
            .edge("Flaky", END)
            .compile(**options)
        )

    local = await build().invoke({"items": [1, 2, 3]})
    Flaky.attempts = {}
    shipped = await build(executor=PoolExecutor(batch_size=1)).invoke({"items": [1, 2, 3]})
    assert shipped.model_dump() == local.model_dump()
    assert shipped.out == [102, 201, 302]


class Ask(Node):
    class In(Schema):
        item: int

    class Out(Schema):
        out: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        if inp.item == 1:
            answer = await interrupt(ctx, {"question": "double it?"})
            return self.Out(out=[inp.item * (2 if answer else 1)])
        return self.Out(out=[inp.item])


async def test_an_instance_that_interrupts_suspends_the_run_and_resumes() -> None:
    def build(**options: Any) -> Any:
        return (
            Graph(MapState)
            .add(Start)
            .add(Ask)
            .edge(START, "Start")
            .router("Start", lambda s: [Send("Ask", {"item": i}) for i in s.items])
            .edge("Ask", END)
            .compile(**options)
        )

    outs = []
    for options in ({}, {"executor": PoolExecutor(batch_size=2)}):
        backend = InMemoryBackend()
        graph = build(**options)
        first = await graph.invoke({"items": [0, 1, 2]}, thread_id="i", backend=backend)
        info = run_info(first)
        assert info.suspended
        (pending,) = info.interrupts
        assert pending.node == "Ask" and pending.value == {"question": "double it?"}
        outs.append(await graph.invoke(thread_id="i", backend=backend, resume={pending.id: True}))
    assert outs[0].model_dump() == outs[1].model_dump()
    assert outs[1].out == [0, 2, 2]


# -- what the seam refuses ---------------------------------------------------------------------


class Lossy(Executor):
    """Drops the last outcome of a superstep: the engine must notice."""

    name = "lossy"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        outcomes = await run_calls(graph, work)
        yield outcomes[:-1]


class Doubling(Executor):
    name = "doubling"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        outcomes = await run_calls(graph, work)
        yield outcomes
        yield outcomes[:1]


class Stray(Executor):
    name = "stray"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        outcomes = await run_calls(graph, work)
        yield [TaskOutcome(len(outcomes) + 5, "done", {}), *outcomes]


async def test_an_executor_that_loses_or_repeats_an_outcome_is_an_error() -> None:
    with pytest.raises(ExecutorError, match="index 8 of superstep 1 twice, or it is not one"):
        await map_graph(executor=Stray()).invoke({"items": [1, 2, 3]})
    with pytest.raises(ExecutorError, match=r"without reporting 1 of its tasks \(indexes \[2\]\)"):
        await map_graph(executor=Lossy()).invoke({"items": [1, 2, 3]})
    with pytest.raises(
        ExecutorError, match="reported task index 0 of superstep 1 twice, or it is not one"
    ):
        await map_graph(executor=Doubling()).invoke({"items": [1, 2, 3]})


class Broken(Executor):
    name = "broken"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        raise ConnectionError("cluster unreachable")
        yield []  # an async generator


async def test_an_executor_failure_fails_the_superstep_with_a_note() -> None:
    backend = InMemoryBackend()
    graph = map_graph(executor=Broken())
    with pytest.raises(ConnectionError, match="cluster unreachable") as info:
        await graph.invoke({"items": [1]}, thread_id="b", backend=backend)
    assert "while executor 'broken' ran superstep 1" in info.value.__notes__
    # The superstep is planned again: another executor finishes the thread.
    out = await graph.invoke(thread_id="b", backend=backend, executor="inprocess")
    assert out.out == [10]


async def test_a_durable_nested_graph_cannot_run_on_a_worker() -> None:
    inner = map_graph()

    class Nest(Node):
        class In(Schema):
            item: int

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            got = await ctx.run_nested(inner, {"items": [inp.item]}, key="k", label="inner")
            return self.Out(out=got.out)

    graph = (
        Graph(MapState)
        .add(Start)
        .add(Nest)
        .edge(START, "Start")
        .router("Start", lambda s: [Send("Nest", {"item": i}) for i in s.items])
        .edge("Nest", END)
    )
    pool = PoolExecutor()
    assert (await graph.compile(executor=pool).invoke({"items": [1]})).out == [10]  # in memory
    with pytest.raises(ExecutorError, match="durable nested graph needs the store"):
        await graph.compile(executor=pool).invoke(
            {"items": [1]}, thread_id="n", backend=InMemoryBackend()
        )


def test_portable_error_keeps_what_pickles_and_describes_what_does_not() -> None:
    plain = ValueError("x")
    assert portable_error(plain) is plain

    class Local(Exception):
        pass

    odd = Local("no pickle for a local class")
    odd.add_note("raised by node 'N'#3")
    portable = portable_error(odd)
    assert isinstance(portable, RemoteTaskError)
    assert "Local: no pickle for a local class" in str(portable)
    assert portable.__notes__ == ["raised by node 'N'#3"]
    again = pickle.loads(pickle.dumps(portable))
    assert again.type_name == portable.type_name and again.__notes__ == portable.__notes__


# -- choosing an executor by name ------------------------------------------------------------


@pytest.fixture
def clean_executors() -> Iterator[None]:
    before = dict(executors._explicit)
    yield
    executors._explicit.clear()
    executors._explicit.update(before)
    executors.refresh()


@pytest.mark.usefixtures("clean_executors")
async def test_executors_by_name_from_register_and_from_a_plugin_hook() -> None:
    assert "inprocess" in executors.names()
    assert isinstance(create_executor("inprocess"), InProcessExecutor)
    register_executor("pool", PoolExecutor)
    made = create_executor("pool", batch_size=3)
    assert isinstance(made, PoolExecutor) and made.batch_size == 3
    assert (await map_graph(executor="pool").invoke({"items": [1, 2]})).out == [10, 20]

    class Plugin:
        @hookimpl
        def tensorsketch_executors(self) -> dict[str, Any]:
            return {"acme": lambda: PoolExecutor}

    reset_plugin_manager()
    try:
        get_plugin_manager().register(Plugin(), name="acme-plugin")
        executors.refresh()
        assert executors.origin("acme") == "plugin 'acme-plugin'"
        assert isinstance(create_executor("acme"), PoolExecutor)
    finally:
        reset_plugin_manager()


def test_a_wrong_executor_is_named() -> None:
    with pytest.raises(RegistryError, match="unknown executor 'rya'"):
        map_graph(executor="rya")
    with pytest.raises(TypeError, match=r"compile\(executor=...\) takes an executor name"):
        map_graph(executor=42)


async def test_the_in_process_executor_runs_calls_through_the_seam_too() -> None:
    class Through(Executor):
        name = "through"

        def __init__(self) -> None:
            self.inner = InProcessExecutor()

        def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
            return self.inner.run(graph, work)

    got = await map_graph(executor=Through()).invoke({"items": ITEMS})
    assert got.out == [i * 10 for i in ITEMS]


def test_shipped_work_pickles_without_the_graph() -> None:
    # What crosses is plain data: the work of a superstep pickles on its own.
    counter = itertools.count()
    work = Superstep(
        graph="g",
        step=1,
        values={"bias": 1},
        calls=[],
        resume={},
        run_id=str(next(counter)),
        thread_id=None,
        namespace=(),
        durable=False,
        streaming=False,
        max_concurrency=None,
    )
    assert pickle.loads(pickle.dumps(work)) == work


# -- subgraph nodes on an executor -------------------------------------------------------------


class Topic(Schema):
    topics: list[str] = []
    topic: str = ""
    found: Annotated[list[str], Reducer(operator.add)] = []


class Inquiry(Schema):
    topic: str
    leads: list[str] = []  # private to the child
    found: Annotated[list[str], Reducer(operator.add)] = []


#: Where each child node body ran (its thread's name), and how often each effect ran.
RAN: list[tuple[str, str]] = []
EFFECT_RUNS: dict[str, int] = {}
_LOCK = threading.Lock()


def _count(key: str) -> str:
    with _LOCK:
        EFFECT_RUNS[key] = EFFECT_RUNS.get(key, 0) + 1
    return key


class Plan(Node):
    class In(Schema):
        topic: str

    class Out(Schema):
        leads: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append(("Plan", threading.current_thread().name))
        return self.Out(leads=[f"{inp.topic}-{k}" for k in range(2)])


class Dig(Node):
    class In(Schema):
        leads: list[str]

    class Out(Schema):
        found: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append(("Dig", threading.current_thread().name))
        lead = inp.leads[0]
        hit = await ctx.step("dig", lambda: _count(f"dug {lead}"))
        return self.Out(found=[hit])


class Check(Node):
    """Asks before keeping what one lead found (when the topic says so)."""

    class In(Schema):
        topic: str
        found: list[str]

    class Out(Schema):
        found: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append(("Check", threading.current_thread().name))
        if inp.topic.startswith("ask"):
            verdict = await interrupt(ctx, f"keep {inp.topic}?")
            return self.Out(found=[f"{inp.topic}:{verdict}"])
        return self.Out(found=[f"{inp.topic}:kept"])


def inquiry_graph() -> Any:
    """Plan -> a Send per lead to Dig -> Check: a child with plain and Send supersteps."""
    g = Graph(Inquiry, name="Inquiry").add(Plan).add(Dig).add(Check)
    g.edge(START, "Plan")
    g.router("Plan", lambda s: [Send("Dig", {"leads": [lead]}) for lead in s.leads])
    g.edge("Dig", "Check").edge("Check", END)
    return g.compile()


class Fan(Node):
    class In(Schema):
        topics: list[str]

    async def run(self, ctx: Context, inp: In) -> None:
        return None


def topics_graph(**options: Any) -> Any:
    """A Send per topic to the Inquiry subgraph node."""
    g = Graph(Topic).add(Fan).add(inquiry_graph(), inputs={"topic": "topic"})
    g.edge(START, "Fan")
    g.router("Fan", lambda s: [Send("Inquiry", {"topic": t}) for t in s.topics])
    g.edge("Inquiry", END)
    return g.compile(**options)


def _reset() -> None:
    RAN.clear()
    EFFECT_RUNS.clear()


async def test_a_durable_subgraph_sent_to_an_executor_runs_its_nodes_on_the_workers() -> None:
    """A ``Send`` instance of a subgraph node is what the executor runs: every node of its
    child runs on the workers, checkpointed on the child's own thread by the caller."""
    _reset()
    expected = await topics_graph().invoke(
        {"topics": ["a", "b"]}, thread_id="t", backend=InMemoryBackend()
    )
    _reset()
    backend = InMemoryBackend()
    pool = PoolExecutor(batch_size=1)
    got = await topics_graph(executor=pool).invoke(
        {"topics": ["a", "b"]}, thread_id="t", backend=backend
    )
    assert got.model_dump() == expected.model_dump()
    assert sorted(got.found) == ["a:kept", "b:kept", "dug a-0", "dug a-1", "dug b-0", "dug b-1"]
    here = threading.current_thread().name
    assert RAN and all(where != here for _, where in RAN), RAN  # every child node shipped
    assert sorted(await backend.list_threads()) == [
        "t",
        "t/1:Inquiry#0:0:subgraph",
        "t/1:Inquiry#1:0:subgraph",
    ]
    child = await inquiry_graph().aget_state("t/1:Inquiry#0:0:subgraph", backend)
    assert child.leads == ["a-0", "a-1"]  # the child's private field, on its own thread
    effects = await backend.list_effects("t/1:Inquiry#0:0:subgraph")
    dug = sorted(backend.serializer.loads(raw) for key, raw in effects if key.endswith(":dig"))
    assert dug == [["dug a-0"], ["dug a-1"]]  # journaled on the child's thread, by the caller


async def test_a_plain_subgraph_node_ships_its_childs_send_instances_only() -> None:
    """A plain subgraph node runs as a plain node does, here; its child's tasks go where the
    child's own would at top level: ``Send`` instances to the executor, plain nodes here."""
    _reset()
    g = Graph(Topic).add(inquiry_graph(), inputs={"topic": "topic"})
    g.edge(START, "Inquiry").edge("Inquiry", END)
    pool = PoolExecutor(batch_size=1)
    backend = InMemoryBackend()
    out = await g.compile(executor=pool).invoke({"topic": "x"}, thread_id="p", backend=backend)
    assert out.found == ["dug x-0", "dug x-1", "x:kept"]
    here = threading.current_thread().name
    assert sorted((node, where == here) for node, where in RAN) == [
        ("Check", True),
        ("Dig", False),
        ("Dig", False),
        ("Plan", True),
    ]
    assert pool.batches == 2


async def test_a_shipped_subgraph_suspends_resumes_and_repeats_no_effect() -> None:
    """An interrupt on a worker, two instances deep in a subgraph: the run suspends with the
    child's location; resuming reaches it on a worker again, and no effect runs twice."""
    _reset()
    backend = InMemoryBackend()
    app = topics_graph(executor=PoolExecutor(batch_size=1))
    out = await app.invoke({"topics": ["ask-1", "b"]}, thread_id="s", backend=backend)
    (pending,) = run_info(out).interrupts
    assert pending.path == ("Inquiry#0",)
    assert pending.id == "Inquiry#0/2:Check:0:interrupt"
    out = await app.invoke(thread_id="s", backend=backend, resume={pending.id: "yes"})
    assert run_info(out).status == "completed"
    assert sorted(out.found) == [
        "ask-1:yes",
        "b:kept",
        "dug ask-1-0",
        "dug ask-1-1",
        "dug b-0",
        "dug b-1",
    ]
    assert set(EFFECT_RUNS.values()) == {1}  # every dig ran once, across the suspension
    here = threading.current_thread().name
    assert all(where != here for _, where in RAN)


async def test_a_subgraph_inside_a_shipped_subgraph_is_driven_here_too() -> None:
    """Two levels: a subgraph node inside a shipped subgraph instance still runs here (the
    store is here), and its child's nodes go to the workers."""
    _reset()

    class Outer(Schema):
        topic: str
        found: Annotated[list[str], Reducer(operator.add)] = []

    middle = Graph(Outer, name="Middle").add(inquiry_graph())
    middle.edge(START, "Inquiry").edge("Inquiry", END)
    g = Graph(Topic).add(Fan).add(middle.compile(), inputs={"topic": "topic"})
    g.edge(START, "Fan")
    g.router("Fan", lambda s: [Send("Middle", {"topic": t}) for t in s.topics])
    g.edge("Middle", END)
    backend = InMemoryBackend()
    out = await g.compile(executor=PoolExecutor(batch_size=2)).invoke(
        {"topics": ["m"]}, thread_id="d", backend=backend
    )
    assert out.found == ["dug m-0", "dug m-1", "m:kept"]
    here = threading.current_thread().name
    assert len(RAN) == 4 and all(where != here for _, where in RAN)
    assert "d/1:Middle#0:0:subgraph/0:Inquiry:0:subgraph" in await backend.list_threads()
