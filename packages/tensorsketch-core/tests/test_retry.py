"""Retry policies and timeouts on any node, and the per-superstep concurrency limit.

Each scenario runs in memory (no backend) and on the in-memory and SQLite stores: a retried
attempt must replay the ``ctx.step`` effects its failed attempt finished, journaled or not.
Tests named ``test_langgraph_*`` are LangGraph's retry-policy tests, ported (the comment on
each names the LangGraph test it mirrors).
"""

from __future__ import annotations

import asyncio
import operator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Graph,
    Node,
    NodeTimeoutError,
    Reducer,
    RetryPolicy,
    Schema,
    Send,
    run_info,
)
from tensorsketch.errors import GraphValidationError, NodeError, TensorSketchError
from tensorsketch.interrupts import Interrupt
from tensorsketch.retry import default_retry_on
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend

FAST = {"initial_interval": 0.0, "jitter": False}


class S(Schema):
    n: int = 0
    log: Annotated[list[int], Reducer(operator.add)] = []


@pytest.fixture(params=["no-store", "memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """``invoke`` keyword arguments for each store (``{}``: an in-memory run)."""
    if request.param == "no-store":
        return {}
    backend = InMemoryBackend() if request.param == "memory" else SqliteBackend(tmp_path / "r.db")
    return {"backend": backend, "thread_id": f"t-{request.param}"}


class Flaky(Node):
    """Charges once through ``ctx.step``, then fails ``fails`` times before succeeding."""

    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    def __init__(self, fails: int = 2, exc: type[Exception] = ConnectionError) -> None:
        self.fails = fails
        self.exc = exc
        self.attempts = 0
        self.charges = 0

    async def charge(self) -> int:
        self.charges += 1
        return 42

    async def run(self, ctx: Any, inp: Any) -> Any:
        self.attempts += 1
        paid = await ctx.step("charge", self.charge)
        if self.attempts <= self.fails:
            raise self.exc(f"flaky attempt {self.attempts}")
        return self.Out(n=inp.n + paid)


async def test_a_retried_node_does_not_repeat_its_finished_steps(store: dict[str, Any]) -> None:
    flaky = Flaky(fails=2)
    app = (
        Graph(S)
        .add(flaky, retry=RetryPolicy(max_attempts=3, **FAST))
        .edge(START, "Flaky")
        .edge("Flaky", END)
        .compile()
    )
    result = await app.invoke({"n": 1}, **store)
    assert result.n == 43
    assert flaky.attempts == 3
    assert flaky.charges == 1  # the retries replayed the journaled charge


async def test_giving_up_raises_the_last_error_with_a_note(store: dict[str, Any]) -> None:
    flaky = Flaky(fails=5)
    app = Graph(S).add(flaky, retry=RetryPolicy(max_attempts=2, **FAST)).entry("Flaky").compile()
    with pytest.raises(ConnectionError, match="flaky attempt 2") as info:
        await app.invoke({"n": 1}, **store)
    assert flaky.attempts == 2
    assert any("gave up after 2 attempts" in note for note in info.value.__notes__)


async def test_programming_errors_are_not_retried_by_default(store: dict[str, Any]) -> None:
    flaky = Flaky(fails=5, exc=KeyError)
    app = Graph(S).add(flaky, retry=RetryPolicy(**FAST)).entry("Flaky").compile()
    with pytest.raises(KeyError):
        await app.invoke({"n": 1}, **store)
    assert flaky.attempts == 1


class Sleepy(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    def __init__(self, slow_attempts: int) -> None:
        self.slow_attempts = slow_attempts
        self.attempts = 0
        self.cancelled = 0

    async def run(self, ctx: Any, inp: Any) -> Any:
        self.attempts += 1
        if self.attempts <= self.slow_attempts:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return self.Out(n=inp.n + 1)


async def test_a_timeout_raises_node_timeout_error(store: dict[str, Any]) -> None:
    sleepy = Sleepy(slow_attempts=1)
    app = Graph(S).add(sleepy, timeout=0.05).entry("Sleepy").compile()
    with pytest.raises(NodeTimeoutError, match=r"'Sleepy' did not finish within .*0.05s") as info:
        await app.invoke({"n": 1}, **store)
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, TensorSketchError)
    assert info.value.node == "Sleepy"
    assert sleepy.cancelled == 1


async def test_the_retry_policy_retries_a_timeout(store: dict[str, Any]) -> None:
    sleepy = Sleepy(slow_attempts=2)
    app = (
        Graph(S)
        .add(sleepy, retry=RetryPolicy(max_attempts=3, **FAST), timeout=0.05)
        .entry("Sleepy")
        .compile()
    )
    result = await app.invoke({"n": 1}, **store)
    assert (result.n, sleepy.attempts, sleepy.cancelled) == (2, 3, 2)


async def test_a_nodes_own_timeout_error_is_not_rewrapped() -> None:
    class Own(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            n: int

        async def run(self, ctx: Any, inp: Any) -> Any:
            raise TimeoutError("the vendor timed out")

    app = Graph(S).add(Own, timeout=5).entry("Own").compile()
    with pytest.raises(TimeoutError, match="the vendor timed out") as info:
        await app.invoke({"n": 1})
    assert not isinstance(info.value, NodeTimeoutError)


async def test_graph_defaults_apply_and_a_node_overrides_them(store: dict[str, Any]) -> None:
    first, second = Flaky(fails=1), Flaky(fails=1)
    app = (
        Graph(S, retry=RetryPolicy(max_attempts=2, **FAST), node_timeout=10)
        .add(first, name="First")
        .add(second, name="Second", retry=RetryPolicy(max_attempts=1))
        .edge(START, "First")
        .edge("First", "Second")
        .compile()
    )
    with pytest.raises(ConnectionError):
        await app.invoke({"n": 0}, **store)
    assert (first.attempts, second.attempts) == (2, 1)


async def test_an_interrupt_is_never_retried(store: dict[str, Any]) -> None:
    calls = []

    class Ask(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            n: int

        async def run(self, ctx: Any, inp: Any) -> Any:
            calls.append(1)
            raise Interrupt("need a human", id="q")

    app = Graph(S).add(Ask, retry=RetryPolicy(retry_on=Exception, **FAST)).entry("Ask").compile()
    result = await app.invoke({"n": 0}, **store)
    assert run_info(result).status == "suspended"
    assert calls == [1]


async def test_retries_are_streamed_as_node_retry_events() -> None:
    flaky = Flaky(fails=2)
    policy = RetryPolicy(max_attempts=3, initial_interval=0.01, backoff=3.0, jitter=False)
    app = Graph(S).add(flaky, retry=policy).entry("Flaky").compile()
    events = [e async for e in app.stream({"n": 0})]
    retries = [e.data for e in events if e.type == "node_retry"]
    assert [(r["attempt"], r["delay"]) for r in retries] == [(1, 0.01), (2, pytest.approx(0.03))]
    assert retries[0]["error"] == "ConnectionError: flaky attempt 1"
    assert [e.type for e in events].count("node_start") == 3


async def test_a_retried_fan_out_instance_keeps_its_siblings(store: dict[str, Any]) -> None:
    seen: list[int] = []
    flaked: list[int] = []

    class Fan(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            log: list[int]

        async def run(self, ctx: Any, inp: Any) -> Any:
            async def effect() -> int:
                seen.append(inp.n)
                return inp.n

            value = await ctx.step("effect", effect)
            if inp.n == 3 and not flaked:
                flaked.append(3)  # fail the first attempt of instance 3 only
                raise ConnectionError("instance 3 flaked")
            return self.Out(log=[value])

    app = (
        Graph(S)
        .add(Fan, retry=RetryPolicy(max_attempts=2, **FAST))
        .conditional(START, lambda s: [Send("Fan", {"n": i}) for i in range(6)])
        .edge("Fan", END)
        .compile()
    )
    result = await app.invoke({"n": 0}, **store)
    assert result.log == [0, 1, 2, 3, 4, 5]  # the fold is in task order
    assert flaked == [3]
    assert sorted(seen) == [0, 1, 2, 3, 4, 5]  # each effect ran once, instance 3's included


def test_bad_options_are_reported_clearly() -> None:
    with pytest.raises(ValueError, match="max_attempts must be an int >= 1, got 0"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff must be a multiplier >= 1"):
        RetryPolicy(backoff=0.5)
    with pytest.raises(ValueError, match="retry_on must be an exception type"):
        RetryPolicy(retry_on=(ValueError, "nope"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"add\(retry=...\) takes a RetryPolicy"):
        Graph(S).add(Flaky(), retry=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"add\(timeout=...\) takes a number of seconds > 0"):
        Graph(S).add(Flaky(), timeout=0)
    with pytest.raises(ValueError, match=r"Graph\(node_timeout=...\)"):
        Graph(S, node_timeout=-1)
    with pytest.raises(ValueError, match=r"compile\(max_concurrency=...\) takes an int >= 1"):
        Graph(S).add(Flaky()).entry("Flaky").compile(max_concurrency=0)


def test_default_retry_on_retries_transient_errors_only() -> None:
    assert default_retry_on(ConnectionError())
    assert default_retry_on(NodeTimeoutError("slow"))
    assert default_retry_on(TimeoutError())
    assert default_retry_on(Exception("an SDK's own error"))
    for exc in (ValueError(), KeyError(), TypeError(), RuntimeError(), OSError()):
        assert not default_retry_on(exc)
    for exc in (
        NodeError("bad return"),
        GraphValidationError("bad graph"),
        Interrupt("ask", id="a"),
    ):
        assert not default_retry_on(exc)

    class VendorError(RuntimeError):
        retryable = True

    assert default_retry_on(VendorError())  # a provider error that says it is transient


# -- LangGraph's retry-policy tests, ported ------------------------------------------------


def test_langgraph_should_retry_on_single_exception() -> None:
    # Mirrors LangGraph tests/test_retry.py::test_should_retry_on_single_exception
    policy = RetryPolicy(retry_on=ValueError)
    assert policy.retries(ValueError("test error"))
    assert not policy.retries(TypeError("test error"))
    assert not policy.retries(Exception("test error"))


def test_langgraph_should_retry_on_sequence_of_exceptions() -> None:
    # Mirrors LangGraph tests/test_retry.py::test_should_retry_on_sequence_of_exceptions
    policy = RetryPolicy(retry_on=(ValueError, KeyError))
    assert policy.retries(ValueError("test error"))
    assert policy.retries(KeyError("test error"))
    assert not policy.retries(TypeError("test error"))


def test_langgraph_should_retry_on_callable() -> None:
    # Mirrors LangGraph tests/test_retry.py::test_should_retry_on_callable
    policy = RetryPolicy(retry_on=lambda exc: isinstance(exc, ValueError) and "retry" in str(exc))
    assert policy.retries(ValueError("please retry"))
    assert not policy.retries(ValueError("no"))
    assert not policy.retries(TypeError("please retry"))


async def test_langgraph_graph_with_single_retry_policy(store: dict[str, Any]) -> None:
    # Mirrors LangGraph tests/test_retry.py::test_graph_with_single_retry_policy: a node that
    # fails twice succeeds on the third attempt, after backoff delays of 0.01 and 0.02.
    attempts = []

    class Failing(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            n: int

        async def run(self, ctx: Any, inp: Any) -> Any:
            attempts.append(1)
            if len(attempts) < 3:
                raise ValueError("Intentional failure")
            return self.Out(n=inp.n + 1)

    policy = RetryPolicy(
        max_attempts=3, initial_interval=0.01, backoff=2.0, jitter=False, retry_on=ValueError
    )
    assert [policy.delay(1), policy.delay(2)] == [0.01, 0.02]
    app = Graph(S).add(Failing, retry=policy).entry("Failing").compile()
    result = await app.invoke({"n": 0}, **store)
    assert (len(attempts), result.n) == (3, 1)


def test_langgraph_graph_with_jitter_retry_policy() -> None:
    # Mirrors LangGraph tests/test_retry.py::test_graph_with_jitter_retry_policy: jitter
    # spreads the delay around the backoff value; without it the delay is exact.
    jittered = RetryPolicy(initial_interval=1.0, jitter=True)
    delays = {jittered.delay(1) for _ in range(50)}
    assert len(delays) > 1
    assert all(0.5 <= d < 1.5 for d in delays)
    assert RetryPolicy(initial_interval=1.0, jitter=False).delay(1) == 1.0
    assert RetryPolicy(initial_interval=1.0, max_interval=5.0, jitter=False).delay(10) == 5.0


async def test_langgraph_pending_writes_resume(tmp_path: Path) -> None:
    # Mirrors LangGraph tests/test_pregel_async.py::test_pending_writes_resume: of two parallel
    # nodes, one succeeds and one exhausts its retries; resuming reruns only the failed one.
    class Ok(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            log: list[int]

        calls = 0

        async def run(self, ctx: Any, inp: Any) -> Any:
            type(self).calls += 1
            return self.Out(log=[1])

    class Bad(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            log: list[int]

        calls = 0
        fail = True

        async def run(self, ctx: Any, inp: Any) -> Any:
            type(self).calls += 1
            await asyncio.sleep(0.01)  # finishes after Ok, so Ok's writes are journaled
            if type(self).fail:
                raise ConnectionError("I'm not good")
            return self.Out(log=[2])

    backend = SqliteBackend(tmp_path / "p.db")
    app = (
        Graph(S)
        .add(Ok)
        .add(Bad, retry=RetryPolicy(max_attempts=2, **FAST))
        .edge(START, "Ok")
        .edge(START, "Bad")
        .compile()
    )
    with pytest.raises(ConnectionError, match="I'm not good"):
        await app.invoke({"n": 0}, thread_id="p", backend=backend)
    assert (Ok.calls, Bad.calls) == (1, 2)
    Bad.fail = False
    result = await app.invoke(None, thread_id="p", backend=backend)
    assert result.log == [1, 2]
    assert (Ok.calls, Bad.calls) == (1, 3)


# -- max_concurrency ---------------------------------------------------------------------


class Counted(Node):
    """Records how many instances are in flight at once."""

    class In(Schema):
        n: int

    class Out(Schema):
        log: list[int]

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0

    async def run(self, ctx: Any, inp: Any) -> Any:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.in_flight -= 1
        return self.Out(log=[inp.n])


def _fan_out(node: Counted, width: int, **compile_options: Any) -> Any:
    return (
        Graph(S)
        .add(node, name="Work")
        .conditional(START, lambda s: [Send("Work", {"n": width - i}) for i in range(width)])
        .edge("Work", END)
        .compile(**compile_options)
    )


async def test_max_concurrency_bounds_a_1000_way_fan_out(store: dict[str, Any]) -> None:
    unbounded_node, bounded_node = Counted(), Counted()
    unbounded = await _fan_out(unbounded_node, 1000).invoke({})
    bounded = await _fan_out(bounded_node, 1000).invoke({}, max_concurrency=10, **store)
    assert unbounded_node.peak > 10  # the limit is what holds the bounded run down
    assert bounded_node.peak == 10
    assert bounded.model_dump() == unbounded.model_dump()
    assert bounded.log == list(range(1000, 0, -1))  # task order, not completion order


async def test_compile_max_concurrency_and_the_invoke_override() -> None:
    node = Counted()
    app = _fan_out(node, 50, max_concurrency=3)
    await app.invoke({})
    assert node.peak == 3
    node.peak = 0
    await app.invoke({}, max_concurrency=7)
    assert node.peak == 7
    with pytest.raises(ValueError, match="max_concurrency= takes an int >= 1"):
        await app.invoke({}, max_concurrency=-2)


async def test_a_failure_under_a_limit_starts_nothing_new() -> None:
    started: list[int] = []

    class Boom(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            log: list[int]

        async def run(self, ctx: Any, inp: Any) -> Any:
            started.append(inp.n)
            await asyncio.sleep(0)
            if inp.n == 0:
                raise ConnectionError("first one fails")
            return self.Out(log=[inp.n])

    app = (
        Graph(S)
        .add(Boom)
        .conditional(START, lambda s: [Send("Boom", {"n": i}) for i in range(100)])
        .compile(max_concurrency=2)
    )
    with pytest.raises(ConnectionError, match="first one fails"):
        await app.invoke({})
    assert len(started) < 10
