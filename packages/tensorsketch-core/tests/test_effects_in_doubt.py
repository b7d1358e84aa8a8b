"""Effects in doubt: a run killed between an effect's intent and its result resumes by the
effect's policy (retry, ask, fail; an idempotency key retries), on the in-memory store
(crash simulated in-process) and on SQLite (a child process SIGKILLed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Context, Graph, Node, Schema, SqliteBackend
from tensorsketch.constants import END, START
from tensorsketch.effect_keys import intent_key
from tensorsketch.errors import EffectInDoubtError
from tensorsketch.interrupts import run_info
from tensorsketch.runtime.backends import InMemoryBackend
from tensorsketch.testing.crash import BackendSpec
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
