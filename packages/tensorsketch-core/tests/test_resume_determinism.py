"""A resumed run ends in exactly the state an uninterrupted run reaches (plan order, per-branch
commit: only unfinished tasks run again), and every run starts from fresh defaults."""

from __future__ import annotations

import asyncio
import itertools
import operator
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send, run_info
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash

# -- plan order survives a checkpoint -------------------------------------------------------


class Mixed(Schema):
    items: Annotated[list[str], Reducer(operator.add)] = []
    arg: str = ""
    crash: bool = False


class Fan(Node):
    class In(Schema):
        pass

    class Out(Schema):
        pass

    async def run(self, ctx: Context, inp: Any) -> Any:
        return None


class W(Node):
    class In(Schema):
        arg: str

    class Out(Schema):
        items: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(items=["w" + inp.arg])


class P(Node):
    class In(Schema):
        crash: bool

    class Out(Schema):
        items: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        if inp.crash and not RECOVERED:
            msg = "P failed once"
            raise RuntimeError(msg)
        return self.Out(items=["p"])


RECOVERED: list[bool] = []


def _route(state: Mixed) -> list[Any]:
    # A Send *before* a plain node: the barrier folds in this order.
    return [Send("W", {"arg": "x"}), "P"]


MIXED = (
    Graph(Mixed)
    .add(Fan)
    .add(W)
    .add(P)
    .edge(START, "Fan")
    .conditional("Fan", _route)
    .edge("W", END)
    .edge("P", END)
    .compile()
)


async def test_resume_after_a_failure_folds_in_the_live_plan_order() -> None:
    RECOVERED.clear()
    live = await MIXED.invoke({})
    assert live.items == ["wx", "p"]
    backend = InMemoryBackend()
    try:
        await MIXED.invoke({"crash": True}, thread_id="t", backend=backend)
    except RuntimeError:
        pass
    else:  # pragma: no cover - the node raises
        raise AssertionError("P should have failed")
    RECOVERED.append(True)
    resumed = await MIXED.invoke(thread_id="t", backend=backend)
    assert resumed.items == ["wx", "p"]


async def test_checkpoint_keeps_sends_and_plain_nodes_in_plan_order() -> None:
    RECOVERED.clear()
    backend = InMemoryBackend()
    try:
        await MIXED.invoke({"crash": True}, thread_id="t", backend=backend)
    except RuntimeError:
        pass
    history = await MIXED.aget_history("t", backend)
    planned = [cp for cp in history if cp.tasks]
    assert [name for name, _ in planned[-1].tasks] == ["W", "P"]
    assert planned[-1].plan == [("W", {"arg": "x"}), ("P", None)]
    assert planned[-1].next == ("P",)
    assert planned[-1].sends == (("W", {"arg": "x"}),)


# -- defaults are deep-copied per run ---------------------------------------------------------


class Inner(Schema):
    tags: list[str] = []


class Nested(Schema):
    rows: list[list[int]] = [[0]]
    inner: Inner = Inner()
    table: dict[str, list[int]] = {"a": [1]}


class Mutate(Node):
    class In(Schema):
        rows: list[list[int]]
        inner: Inner
        table: dict[str, list[int]]

    class Out(Schema):
        rows: list[list[int]]
        inner: Inner
        table: dict[str, list[int]]

    async def run(self, ctx: Context, inp: Any) -> Any:
        inp.rows[0].append(1)  # mutates the nested default in place
        inp.inner.tags.append("seen")
        inp.table["a"].append(2)
        return self.Out(rows=inp.rows, inner=inp.inner, table=inp.table)


NESTED = Graph(Nested).add(Mutate).edge(START, "Mutate").edge("Mutate", END).compile()


async def test_each_run_gets_a_fresh_copy_of_nested_defaults() -> None:
    first = await NESTED.invoke({})
    second = await NESTED.invoke({})
    assert first.rows == [[0, 1]] and second.rows == [[0, 1]]
    assert second.inner.tags == ["seen"]
    assert second.table == {"a": [1, 2]}
    assert Nested().rows == [[0]] and Nested().inner.tags == [] and Nested().table == {"a": [1]}


# -- per-branch commit ------------------------------------------------------------------------


class Jobs(Schema):
    jobs: list[str] = []
    done: Annotated[list[str], Reducer(operator.add)] = []
    tag: str = ""


RUNS: dict[str, int] = {}
BROKEN: set[str] = set()


class Job(Node):
    class In(Schema):
        jobs: list[str]
        tag: str

    class Out(Schema):
        done: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        job = inp.jobs[0]
        RUNS[job] = RUNS.get(job, 0) + 1
        if job in BROKEN:
            await asyncio.sleep(0.02)  # fail after the siblings have finished
            msg = f"job {job} broke"
            raise RuntimeError(msg)
        return self.Out(done=[f"{job}{inp.tag}"])


def _jobs(state: Jobs) -> list[Send]:
    return [Send("Job", {"jobs": [j]}) for j in state.jobs]


JOBS = Graph(Jobs).add(Job).conditional(START, _jobs).edge("Job", END).compile()


def _backends(tmp_path: Path) -> list[Backend]:
    return [InMemoryBackend(), SqliteBackend(tmp_path / "store.db")]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_failed_task_is_retried_alone_and_its_error_is_in_the_checkpoint(
    store: str, tmp_path: Path
) -> None:
    backend = _backends(tmp_path)[0 if store == "memory" else 1]
    RUNS.clear()
    BROKEN.clear()
    BROKEN.add("c")
    with pytest.raises(RuntimeError, match="job c broke"):
        await JOBS.invoke({"jobs": ["a", "b", "c", "d"]}, thread_id="t", backend=backend)
    assert RUNS == {"a": 1, "b": 1, "c": 1, "d": 1}

    state = await JOBS.aget_state("t", backend)
    assert state is not None
    info = run_info(state)
    assert info.failed and info.status == "failed"
    assert info.error is not None
    assert info.error["node"] == "Job" and info.error["instance"] == "#2"
    assert info.error["type"] == "builtins.RuntimeError"
    assert info.error["message"] == "job c broke"
    latest = (await JOBS.aget_history("t", backend))[-1]
    assert latest.source == "error" and [n for n, _ in latest.tasks] == ["Job"] * 4

    BROKEN.clear()
    out = await JOBS.invoke(thread_id="t", backend=backend)
    assert RUNS == {"a": 1, "b": 1, "c": 2, "d": 1}  # only the failed task ran again
    assert out.done == ["a", "b", "c", "d"]  # folded in plan order, as live
    done = await JOBS.aget_state("t", backend)
    assert done is not None and run_info(done).status == "completed"
    await backend.aclose()


async def test_the_failed_supersteps_events_are_stored_with_its_checkpoint() -> None:
    backend = InMemoryBackend()
    BROKEN.clear()
    BROKEN.add("b")
    with pytest.raises(RuntimeError):
        async for _ in JOBS.stream({"jobs": ["a", "b"]}, thread_id="t", backend=backend):
            pass
    events = [e async for e in JOBS.replay("t", backend)]
    finished = [e for e in events if e.type == "node_end"]
    assert [e.data["instance"] for e in finished] == ["#0"]  # the sibling that finished
    assert [e.data["instance"] for e in events if e.type == "node_start"] == ["#0", "#1"]


async def test_new_input_replans_the_failed_superstep() -> None:
    """Writes computed from the old state are not replayed onto a changed one."""
    backend = InMemoryBackend()
    RUNS.clear()
    BROKEN.clear()
    BROKEN.add("b")
    with pytest.raises(RuntimeError):
        await JOBS.invoke({"jobs": ["a", "b"]}, thread_id="t", backend=backend)
    BROKEN.clear()
    out = await JOBS.invoke({"tag": "!"}, thread_id="t", backend=backend)
    assert RUNS == {"a": 2, "b": 2}
    assert out.done == ["a!", "b!"]


async def test_a_crash_keeps_the_finished_tasks(tmp_path: Path) -> None:
    """Killed after two workers' writes were journaled: the resume runs the other two."""
    store = SqliteBackend(tmp_path / "store.db", lease_ttl=0.2)
    RUNS.clear()
    BROKEN.clear()
    writes = [0]

    class Dies(CrashingBackend):
        async def record_effects(
            self, thread_id: str, effects: list[tuple[str, bytes]], *, fence: str | None = None
        ) -> None:
            await super().record_effects(thread_id, effects, fence=fence)
            writes[0] += sum(key.startswith("writes:") for key, _ in effects)
            if writes[0] >= 2:
                self.dead = True
                raise SimulatedCrash("gone")

    class Staggered(Node):
        class In(Schema):
            jobs: list[str]

        class Out(Schema):
            done: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            job = inp.jobs[0]
            RUNS[job] = RUNS.get(job, 0) + 1
            await asyncio.sleep(0.01 * "abcd".index(job))
            return self.Out(done=[job])

    app = (
        Graph(Jobs)
        .add(Staggered)
        .conditional(START, lambda s: [Send("Staggered", {"jobs": [j]}) for j in s.jobs])
        .edge("Staggered", END)
        .compile()
    )
    with pytest.raises(SimulatedCrash):
        await app.invoke({"jobs": list("abcd")}, thread_id="t", backend=Dies(store))
    assert RUNS == {"a": 1, "b": 1, "c": 1, "d": 1}
    await asyncio.sleep(0.25)  # the dead run's lease lapses
    out = await app.invoke(thread_id="t", backend=store)
    assert RUNS == {"a": 1, "b": 1, "c": 2, "d": 2}
    assert out.done == ["a", "b", "c", "d"]
    await store.aclose()


# -- property: any crash, any mix of Sends and plain nodes, same final state -----------------


class Rounds(Schema):
    items: Annotated[list[str], Reducer(operator.add)] = []
    round: int = 0
    plan: list[list[str]] = []
    arg: str = ""
    fail_at: str = ""


FAILED_ONCE: set[str] = set()


def _fail_once(label: str, fail_at: str) -> None:
    if label == fail_at and label not in FAILED_ONCE:
        FAILED_ONCE.add(label)
        msg = f"{label} failed"
        raise RuntimeError(msg)


class Hub(Node):
    class In(Schema):
        round: int

    class Out(Schema):
        round: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(round=inp.round + 1)


def _plain(name: str) -> type[Node]:
    class Plain(Node):
        class In(Schema):
            round: int
            fail_at: str

        class Out(Schema):
            items: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            label = f"{name}{inp.round}"
            await asyncio.sleep(0)
            _fail_once(label, inp.fail_at)
            return self.Out(items=[label])

    Plain.__name__ = Plain.__qualname__ = name
    return Plain


class Wk(Node):
    class In(Schema):
        arg: str
        round: int
        fail_at: str

    class Out(Schema):
        items: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        label = f"w{inp.arg}{inp.round}"
        _fail_once(label, inp.fail_at)
        return self.Out(items=[label])


def _hub_route(state: Rounds) -> Any:
    if state.round > len(state.plan):
        return END
    return [
        Send("Wk", {"arg": entry[2:]}) if entry.startswith("W:") else entry
        for entry in state.plan[state.round - 1]
    ]


def _rounds_graph() -> Any:
    graph = Graph(Rounds).add(Hub).add(Wk).edge(START, "Hub").conditional("Hub", _hub_route)
    for name in ("A", "B", "C"):
        graph = graph.add(_plain(name)).edge(name, "Hub")
    return graph.edge("Wk", "Hub").compile()


ROUNDS = _rounds_graph()
ENTRY = st.sampled_from(["A", "B", "C", "W:x", "W:y", "W:z"])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    plan=st.lists(st.lists(ENTRY, min_size=1, max_size=5), min_size=1, max_size=3),
    crash=st.integers(min_value=1, max_value=40),
    fail=st.integers(min_value=0, max_value=20),
)
async def test_resumed_runs_end_in_the_uninterrupted_state(
    plan: list[list[str]], crash: int, fail: int
) -> None:
    labels = [
        (f"w{e[2:]}" if e.startswith("W:") else e) + str(r + 1)
        for r, entries in enumerate(plan)
        for e in entries
    ]
    fail_at = labels[fail % len(labels)] if fail else ""
    live = await ROUNDS.invoke({"plan": plan})

    store = InMemoryBackend()
    store.lease_ttl = 0.01
    FAILED_ONCE.clear()
    data: dict[str, Any] | None = {"plan": plan, "fail_at": fail_at}
    wrapper = CrashingBackend(store, crash_at=crash, mode="raise")
    for attempt in range(10):
        try:
            await ROUNDS.invoke(data, thread_id="t", backend=wrapper if attempt == 0 else store)
            break
        except (RuntimeError, SimulatedCrash):
            await asyncio.sleep(0.012)  # a crashed owner's lease lapses
            if await store.latest_checkpoint("t") is not None:
                data = None  # resume; before the first checkpoint, start again
    else:  # pragma: no cover
        raise AssertionError("the run never finished")
    final = await ROUNDS.aget_state("t", store)
    assert final is not None
    assert final.items == live.items


# -- property: a wait-for-all join across any crash, in a loop ---------------------------------


class Joined(Schema):
    items: Annotated[list[str], Reducer(operator.add)] = []
    round: int = 0
    rounds: int = 1
    fail_at: str = ""


def _branch_node(name: str) -> type[Node]:
    class Branch(Node):
        class In(Schema):
            round: int
            fail_at: str

        class Out(Schema):
            items: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            label = f"{name}{inp.round}"
            await asyncio.sleep(0)
            _fail_once(label, inp.fail_at)
            return self.Out(items=[label])

    Branch.__name__ = Branch.__qualname__ = name
    return Branch


class JoinNode(Node):
    class In(Schema):
        round: int

    class Out(Schema):
        items: list[str]
        round: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(items=[f"J{inp.round}"], round=inp.round + 1)


def _again(state: Joined) -> Any:
    return END if state.round >= state.rounds else ["L1", "R1"]


def _joined_graph(left: int, right: int) -> Any:
    """START -> L1 -> ... -> L<left> and START -> R1 -> ... -> R<right>, a join of the two
    last nodes into J, and J looping back to both heads until ``rounds`` rounds ran."""
    graph = Graph(Joined).add(JoinNode, name="J").conditional("J", _again)
    for side, length in (("L", left), ("R", right)):
        names = [f"{side}{i}" for i in range(1, length + 1)]
        graph = graph.edge(START, names[0])
        for name in names:
            graph = graph.add(_branch_node(name))
        for a, b in itertools.pairwise(names):
            graph = graph.edge(a, b)
    return graph.edge([f"L{left}", f"R{right}"], "J").compile()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    left=st.integers(min_value=1, max_value=3),
    right=st.integers(min_value=1, max_value=3),
    rounds=st.integers(min_value=1, max_value=2),
    crash=st.integers(min_value=1, max_value=30),
    fail=st.integers(min_value=0, max_value=12),
)
async def test_a_join_resumed_after_any_crash_ends_in_the_uninterrupted_state(
    left: int, right: int, rounds: int, crash: int, fail: int
) -> None:
    app = _joined_graph(left, right)
    live = await app.invoke({"rounds": rounds})
    assert [i for i in live.items if i.startswith("J")] == [f"J{r}" for r in range(rounds)]
    labels = [i for i in live.items if not i.startswith("J")]
    fail_at = labels[fail % len(labels)] if fail else ""

    store = InMemoryBackend()
    store.lease_ttl = 0.01
    FAILED_ONCE.clear()
    data: dict[str, Any] | None = {"rounds": rounds, "fail_at": fail_at}
    wrapper = CrashingBackend(store, crash_at=crash, mode="raise")
    for attempt in range(10):
        try:
            await app.invoke(data, thread_id="t", backend=wrapper if attempt == 0 else store)
            break
        except (RuntimeError, SimulatedCrash):
            await asyncio.sleep(0.012)  # a crashed owner's lease lapses
            if await store.latest_checkpoint("t") is not None:
                data = None  # resume; before the first checkpoint, start again
    else:  # pragma: no cover
        raise AssertionError("the run never finished")
    final = await app.aget_state("t", store)
    assert final is not None
    assert final.items == live.items
    assert (await app.aget_history("t", store))[-1].joins == ()
