"""Effects in doubt: a run killed between an effect's intent and its result resumes by the
effect's policy (retry, ask, fail; an idempotency key retries), on the in-memory store
(crash simulated in-process) and on SQLite (a child process SIGKILLed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Context, Graph, Node, Schema, SqliteBackend
from tensorsketch.constants import END, START
from tensorsketch.effect_keys import intent_key
from tensorsketch.errors import EffectInDoubtError
from tensorsketch.interrupts import run_info
from tensorsketch.runtime.backends import InMemoryBackend
from tensorsketch.testing.crash import BackendSpec, CrashingBackend
from tensorsketch.testing.in_doubt import run_in_doubt

CASES = [("retry", False), ("ask", False), ("fail", False), ("fail", True)]


@pytest.mark.parametrize(("policy", "keyed"), CASES)
async def test_in_doubt_policy_in_memory(tmp_path: Path, policy: str, keyed: bool) -> None:
    report = await run_in_doubt(InMemoryBackend(), tmp_path, policy=policy, keyed=keyed)
    report.check()


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), CASES)
async def test_in_doubt_policy_sqlite_sigkill(tmp_path: Path, policy: str, keyed: bool) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_in_doubt(spec, tmp_path / "work", policy=policy, keyed=keyed)
    assert report.killed  # the child really died between the call and its record
    report.check()


class Paid(Schema):
    receipt: str = ""


def _pay_graph(calls: list[str], policy: str) -> Any:
    class Pay(Node):
        class Out(Schema):
            receipt: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            def charge() -> str:
                calls.append("pay")
                return "r-1"

            receipt = await ctx.step(
                "pay",
                charge,
                in_doubt=policy,  # type: ignore[arg-type]  # an unknown one is tested too
                args={"amount": 5},
            )
            return self.Out(receipt=receipt)

    return Graph(Paid).add(Pay).edge(START, "Pay").edge("Pay", END).compile()


async def _plant_intent(backend: SqliteBackend, graph: Any, thread: str) -> None:
    """A thread stopped before ``Pay`` whose journal holds the payment's intent only (what a
    crash between the call and its record leaves)."""
    await graph.invoke({}, thread_id=thread, backend=backend, interrupt_before=["Pay"])
    intent = {"effect": "pay", "node": "Pay", "step": 0, "args": {"amount": 5}}
    await backend.record_effect(
        thread, intent_key("0:Pay:0:pay"), backend.serializer.dumps([intent])
    )


async def test_fail_names_the_effect_and_its_arguments(tmp_path: Path) -> None:
    calls: list[str] = []
    graph = _pay_graph(calls, "fail")
    backend = SqliteBackend(tmp_path / "s.db")
    await _plant_intent(backend, graph, "t")
    with pytest.raises(EffectInDoubtError) as caught:
        await graph.invoke(None, thread_id="t", backend=backend, interrupt_before=[])
    assert "'pay'" in str(caught.value) and "{'amount': 5}" in str(caught.value)
    assert caught.value.key == "0:Pay:0:pay"
    assert calls == []  # nothing re-ran
    state = await graph.aget_state("t", backend)
    error = run_info(state).error
    assert error is not None and error["type"].endswith("EffectInDoubtError")
    await backend.aclose()


async def test_ask_refuses_a_decision_of_the_wrong_shape(tmp_path: Path) -> None:
    calls: list[str] = []
    graph = _pay_graph(calls, "ask")
    backend = SqliteBackend(tmp_path / "s.db")
    await _plant_intent(backend, graph, "t")
    out = await graph.invoke(None, thread_id="t", backend=backend, interrupt_before=[])
    (pending,) = run_info(out).interrupts
    assert pending.kind == "in_doubt" and pending.value["args"] == {"amount": 5}
    with pytest.raises(ValueError, match='"retry"'):
        await graph.invoke(None, thread_id="t", backend=backend, resume={pending.id: "maybe"})
    # "retry" is a decision too: the payment runs again, once.
    out = await graph.invoke(None, thread_id="t", backend=backend, resume={pending.id: "retry"})
    assert out.receipt == "r-1" and calls == ["pay"]
    await backend.aclose()


async def test_an_unknown_policy_is_refused_by_name() -> None:
    graph = _pay_graph([], "sometimes")
    with pytest.raises(ValueError, match="in_doubt must be one of"):
        await graph.invoke({}, thread_id="x", backend=InMemoryBackend())


# -- an agent's tool -------------------------------------------------------------------------


def _refund_agent(log: list[str]) -> Any:
    from tensorsketch import FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    @tool(in_doubt="ask")
    def refund(order: int) -> str:
        """Refund an order."""
        log.append(f"refund {order}")
        if len(log) == 1:
            raise SimulatedKill  # the process dies right after the refund went out
        return f"refunded #{order}"

    script = [
        assistant("Refunding.", tool_calls=[ToolCall(id="r7", name="refund", args={"order": 7})]),
        assistant("Done."),
    ]
    return create_agent(FakeProvider(script), tools=[refund])


class SimulatedKill(BaseException):
    """Not an Exception: nothing in the run records it, as with a real kill."""


async def test_an_agent_tool_in_doubt_asks_and_takes_the_result_a_person_gives() -> None:
    log: list[str] = []
    store = InMemoryBackend()
    store.lease_ttl = 0.05
    agent = _refund_agent(log)
    dying = CrashingBackend(store, mode="raise")
    with pytest.raises(SimulatedKill):
        await agent.invoke({"query": "refund 7"}, thread_id="t", backend=dying)
    dying.dead = True
    await asyncio.sleep(0.06)  # the dead run's lease lapses
    # The living runs take a long lease: a loaded machine can stall one past 50 ms.
    store.lease_ttl = 30.0
    out = await agent.invoke(thread_id="t", backend=store)
    (pending,) = run_info(out).interrupts
    assert pending.kind == "in_doubt"
    assert pending.value["effect"] == "refund" and pending.value["args"] == {"order": 7}
    done = await agent.invoke(
        thread_id="t", backend=store, resume={pending.id: {"result": "refunded #7 (checked)"}}
    )
    assert done.output == "Done." and log == ["refund 7"]  # the refund went out once
    assert [m.text for m in done.messages if m.role == "tool"] == ["refunded #7 (checked)"]
