"""Dependencies: per-invoke objects (a database, an HTTP client) that tools, nodes and
middleware reach through ``ctx.deps``; never in a checkpoint, inherited by nested runs and
``Send`` instances in-process, refused clearly on an executor's worker."""

from __future__ import annotations

import operator
import pickle
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    Send,
    create_agent,
    tool,
)
from tensorsketch.errors import DepsUnavailableError
from tensorsketch.executors import Executor, Superstep, TaskOutcome, portable_error, run_calls
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.middleware import Middleware, ToolRequest
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend


@dataclass
class Shop:
    """A stand-in for a database connection: it holds a lock, so it cannot be serialized."""

    prices: dict[str, int]
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[str] = field(default_factory=list)


@tool
async def price(ctx: Context[Shop], item: str) -> int:
    """The price of an item."""
    ctx.deps.seen.append(item)
    return ctx.deps.prices[item]


def _tool_answer(messages: list[Message]) -> str:
    return next(m.text for m in messages if m.role == "tool")


def _asks_price(item: str = "tea") -> FakeProvider:
    return FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="price", args={"item": item})]),
            assistant("done"),
        ]
    )


async def test_a_tool_reads_the_invokes_deps() -> None:
    shop = Shop({"tea": 3})
    agent = create_agent(_asks_price(), tools=[price])
    result = await agent.invoke({"query": "price of tea?"}, deps=shop)
    assert shop.seen == ["tea"]
    assert _tool_answer(result.messages) == "3"


def test_a_context_of_deps_is_injected_not_described() -> None:
    assert "ctx" not in price.json_schema()["properties"]


async def test_deps_never_reach_a_checkpoint_and_each_invoke_brings_its_own() -> None:
    backend = InMemoryBackend()

    @tool(requires_approval=True)
    async def charge(ctx: Context[Shop], item: str) -> str:
        """Charge for an item."""
        ctx.deps.seen.append(item)
        return f"charged {ctx.deps.prices[item]}"

    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="charge", args={"item": "tea"})]),
            assistant("charged"),
        ]
    )
    agent = create_agent(provider, tools=[charge])
    first = Shop({"tea": 3})
    await agent.invoke({"query": "buy tea"}, thread_id="t", backend=backend, deps=first)
    second = Shop({"tea": 4})
    result = await agent.invoke(thread_id="t", backend=backend, resume={"c1": True}, deps=second)
    assert result.status == "completed"
    assert (first.seen, second.seen) == ([], ["tea"])
    for checkpoint in await agent.aget_history("t", backend):
        assert not any(isinstance(v, Shop) for v in checkpoint.values.values())


async def test_ctx_deps_without_deps_fails_the_run_saying_how_to_pass_them() -> None:
    # The caller's mistake, not the model's: the run fails instead of the tool answering.
    agent = create_agent(_asks_price(), tools=[price])
    with pytest.raises(DepsUnavailableError, match=r"node 'agent'.*invoke\(\.\.\., deps=\.\.\.\)"):
        await agent.invoke({"query": "price of tea?"})


async def test_middleware_reads_deps() -> None:
    class Audit(Middleware):
        async def wrap_tool(
            self, request: ToolRequest, call_next: Callable[[ToolRequest], Awaitable[Any]]
        ) -> Any:
            request.ctx.deps.seen.append(f"audit:{request.call.name}")
            return await call_next(request)

    shop = Shop({"tea": 3})
    agent = create_agent(_asks_price(), tools=[price], middleware=[Audit()])
    await agent.invoke({"query": "price of tea?"}, deps=shop)
    assert shop.seen == ["audit:price", "tea"]


class Fan(Schema):
    items: list[str] = []
    item: str = ""
    total: Annotated[int, Reducer(operator.add)] = 0


class Start(Node):
    async def run(self, ctx: Context, inp: Any) -> None:
        return None


class Price(Node):
    class In(Schema):
        item: str

    class Out(Schema):
        total: int

    async def run(self, ctx: Context[Shop], inp: In) -> Out:
        return self.Out(total=ctx.deps.prices[inp.item])


def _fan_graph() -> Graph[Fan]:
    return (
        Graph(Fan)
        .add(Start)
        .add(Price)
        .edge(START, "Start")
        .router("Start", lambda s: [Send("Price", {"item": i}) for i in s.items])
        .edge("Price", END)
    )


async def test_send_instances_and_nested_runs_get_the_deps() -> None:
    inner = _fan_graph().compile()

    class Nest(Node):
        class Out(Schema):
            total: int

        async def run(self, ctx: Context, inp: Any) -> Out:
            got = await ctx.run_nested(inner, {"items": ["tea", "cake"]}, key="k", label="in")
            return self.Out(total=got.total)

    outer = Graph(Fan).add(Nest).edge(START, "Nest").edge("Nest", END).compile()
    shop = Shop({"tea": 3, "cake": 5})
    assert (await outer.invoke({}, deps=shop)).total == 8
    events = [e async for e in inner.stream({"items": ["tea"]}, deps=shop)]
    assert events[-1].data["total"] == 3


class Shipping(Executor):
    """Runs the shipped calls through the worker's code (as Ray does), the work and the
    outcomes through pickle both ways, as across a process boundary."""

    name = "shipping"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        shipped: Superstep = pickle.loads(pickle.dumps(work))
        outcomes = await run_calls(graph, shipped)
        for outcome in outcomes:
            if outcome.error is not None:
                outcome.error = portable_error(outcome.error)
        yield pickle.loads(pickle.dumps(outcomes))


async def test_an_executors_worker_refuses_deps_by_name() -> None:
    graph = _fan_graph().compile(executor=Shipping())
    with pytest.raises(DepsUnavailableError, match="not shipped to an executor's workers"):
        await graph.invoke({"items": ["tea"]}, deps=Shop({"tea": 3}))


async def test_deps_type_is_checked_before_any_model_call() -> None:
    provider = _asks_price()
    agent = create_agent(provider, tools=[price], deps_type=Shop)
    with pytest.raises(TypeError, match=r"deps_type=Shop.*got dict"):
        await agent.invoke({"query": "price of tea?"}, deps={"tea": 3})
    with pytest.raises(DepsUnavailableError, match=r"deps_type=Shop"):
        await agent.invoke({"query": "price of tea?"})
    assert provider.calls == []
    shop = Shop({"tea": 3})
    await agent.invoke({"query": "price of tea?"}, deps=shop)
    assert shop.seen == ["tea"]


class Database:
    """Not a JSON type."""


def test_a_parameter_without_json_schema_names_the_tool_and_points_at_deps() -> None:
    def lookup(db: Database, key: str) -> str:
        """Look a key up."""
        return key

    with pytest.raises(TypeError) as info:
        tool(lookup)
    text = str(info.value)
    assert "tool 'lookup'" in text
    assert "parameter 'db'" in text
    assert "deps=" in text
    assert "ctx.deps" in text


async def test_a_sub_agent_through_as_tool_reads_the_callers_deps() -> None:
    from tensorsketch import as_tool

    billing = create_agent(_asks_price("cake"), tools=[price], deps_type=Shop, name="billing")
    front = create_agent(
        FakeProvider(
            [
                assistant(
                    tool_calls=[ToolCall(id="b1", name="billing", args={"request": "cake?"})]
                ),
                assistant("asked billing"),
            ]
        ),
        tools=[as_tool(billing, name="billing", description="Billing questions.")],
        deps_type=Shop,
    )
    shop = Shop({"cake": 5})
    result = await front.invoke({"query": "how much is cake?"}, deps=shop)
    assert result.output == "asked billing"
    assert shop.seen == ["cake"]


@tool(requires_approval=True)
async def charge(ctx: Context[Shop], item: str) -> int:
    """Charge for an item (a person approves it first)."""
    ctx.deps.seen.append(f"charged {item}")
    return ctx.deps.prices[item]


async def test_a_runners_deps_reach_its_runs_and_a_takeover_brings_its_own(
    tmp_path: Path,
) -> None:
    """``AsyncRunner(deps=...)``: deps belong to the process. A run suspended for approval
    under one runner and approved through another (a restart) runs its tool with the second
    runner's deps; neither reaches the run store or a checkpoint."""
    model = FakeProvider(  # one script across both "processes": the model answers on
        [
            assistant(tool_calls=[ToolCall(id="c1", name="price", args={"item": "tea"})]),
            assistant(tool_calls=[ToolCall(id="c2", name="charge", args={"item": "tea"})]),
            assistant("done"),
        ]
    )

    def agent() -> Any:
        return create_agent(model, tools=[price, charge])

    path = tmp_path / "runs.db"
    before, after = Shop({"tea": 3}), Shop({"tea": 4})
    async with AsyncRunner(agent(), backend=SqliteBackend(path), deps=before) as first:
        record = await first.submit({"query": "buy tea"})
        waiting = await first.await_run(record.run_id, timeout=30)
        assert waiting.waiting_for == "approval", waiting
    assert before.seen == ["tea"]  # price ran here; charge waits
    async with AsyncRunner(agent(), backend=SqliteBackend(path), deps=after) as second:
        await second.approve(record.run_id, {"c2": True})
        done = await second.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded", done
    assert after.seen == ["charged tea"] and before.seen == ["tea"]
    stored = path.read_bytes()
    assert b"Shop" not in stored and b"prices" not in stored
