"""evaluate(): parallel trials under a cap, per-trial timeouts, failures recorded, retries,
forks from a stored checkpoint, pass@k with k < n."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import capital_agent, flaky_agent

from tensorsketch import END, START, Context, FakeProvider, Graph, Node, Schema, SqliteBackend
from tensorsketch.eval import (
    Case,
    Contains,
    Custom,
    Equals,
    EvalError,
    GraderError,
    JsonlReporter,
    Report,
    Suite,
    evaluate,
)
from tensorsketch.messages import assistant


class Probe:
    """An agent whose runs record how many are in flight at once."""

    def __init__(self, delay: float = 0.05, fail_on: set[int] | None = None) -> None:
        self.active = 0
        self.peak = 0
        self.calls = 0
        self.delay = delay
        self.fail_on = fail_on or set()

    async def invoke(self, inputs: dict[str, Any], *, tracer: Any = None) -> dict[str, Any]:
        self.calls += 1
        number = self.calls
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
            if number in self.fail_on:
                raise ConnectionError(f"model API down on call {number}")
            return {"output": "Paris"}
        finally:
            self.active -= 1


async def test_concurrency_is_capped() -> None:
    probe = Probe()
    suite = Suite(
        "s",
        [Case(f"c{i}", {"query": "?"}, graders=[Contains("Paris")], trials=4) for i in range(3)],
    )
    report = await evaluate(probe, suite, concurrency=3)
    assert probe.calls == 12 and probe.peak == 3
    assert report.completion_rate == 1.0
    probe = Probe()
    await evaluate(probe, suite)  # default: one at a time
    assert probe.peak == 1


async def test_a_failing_trial_is_recorded_and_the_suite_goes_on() -> None:
    probe = Probe(fail_on={2})
    report = await evaluate(probe, Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=4))
    assert len(report.trials) == 4 and report.errors == 1
    failed = next(t for t in report.trials if not t.passed)
    assert failed.error == "ConnectionError: model API down on call 2"
    assert failed.reason.startswith("error: ConnectionError")
    assert report.completion_rate == 0.75


async def test_a_slow_trial_times_out_and_is_cancelled() -> None:
    class Slow:
        cancelled = 0

        async def invoke(self, inputs: dict[str, Any], *, tracer: Any = None) -> dict[str, Any]:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                Slow.cancelled += 1
                raise
            return {"output": "Paris"}

    report = await evaluate(
        Slow(), Case("c", {}, graders=[Contains("Paris")], trials=2), timeout=0.2, concurrency=2
    )
    assert report.errors == 2 and Slow.cancelled == 2
    assert all("ran longer than 0.2s" in (t.error or "") for t in report.trials)


async def test_retry_reruns_only_the_failed_trials(tmp_path: Path) -> None:
    suite = Suite("s", [Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=4)])
    path = tmp_path / "run.jsonl"
    first = await evaluate(flaky_agent("RWRW"), suite, reporter=JsonlReporter(path))
    assert [t.passed for t in first.trials] == [True, False, True, False]
    stored = Report.load(path)
    assert [t.passed for t in stored.trials] == [True, False, True, False]

    probe = Probe()
    second = await evaluate(probe, suite, retry=stored)
    assert probe.calls == 2  # only trials 1 and 3 ran again
    assert [t.passed for t in second.trials] == [True, True, True, True]
    assert second.meta["retried"] == 2


async def test_k_below_n_uses_the_unbiased_estimator() -> None:
    report = await evaluate(
        flaky_agent("RRRWW"), Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=5, k=2)
    )
    (case,) = report.cases
    assert case.passes == 3 and case.k_used == 2
    assert case.pass_at_k == pytest.approx(1 - 1 / 10)  # 1 - C(2,2)/C(5,2)
    assert case.pass_pow_k == pytest.approx(3 / 10)  # C(3,2)/C(5,2)


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(EvalError, match="trials must be a positive int"):
        Case("c", {}, trials=0)
    with pytest.raises(EvalError, match=r"k=4 must be an int in 1..trials=3"):
        Case("c", {}, trials=3, k=4)
    with pytest.raises(EvalError, match="inputs must be a dict"):
        Case("c", "Capital of France?")  # type: ignore[arg-type]
    with pytest.raises(EvalError, match="already has a case named 'c'"):
        Suite("s", [Case("c"), Case("c")])


async def test_a_case_without_graders_and_bad_options_are_refused() -> None:
    with pytest.raises(EvalError, match="has no graders"):
        await evaluate(capital_agent, Case("c", {"query": "?"}))
    with pytest.raises(EvalError, match="concurrency"):
        await evaluate(capital_agent, Case("c", {}, graders=[Contains("x")]), concurrency=0)
    with pytest.raises(EvalError, match="require\\(\\) got unknown metrics \\['pass_rate'\\]"):
        (
            await evaluate(capital_agent, Case("c", {"query": "?"}, graders=[Contains("Paris")]))
        ).require(pass_rate=1.0)


# -- re-running the tail of a long run from a stored checkpoint ---------------------------


class Long(Schema):
    query: str = ""
    research: str = ""
    output: str = ""


STEPS: list[str] = []


class Research(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        research: str

    async def run(self, ctx: Context, inp: In) -> Out:
        STEPS.append("research")
        return self.Out(research=f"notes on {inp.query}")


class Answer(Node):
    class In(Schema):
        research: str

    class Out(Schema):
        output: str

    async def run(self, ctx: Context, inp: In) -> Out:
        STEPS.append("answer")
        model = FakeProvider([assistant(f"answer from {inp.research}")])
        reply = await model.complete([assistant(inp.research)])
        return self.Out(output=reply.message.text or "")


async def test_a_case_forks_a_stored_checkpoint_and_runs_only_the_tail(tmp_path: Path) -> None:
    graph = (
        Graph(Long)
        .add(Research)
        .add(Answer)
        .edge(START, "Research")
        .edge("Research", "Answer")
        .edge("Answer", END)
    ).compile()
    backend = SqliteBackend(tmp_path / "runs.db")
    await graph.invoke({"query": "tides"}, thread_id="prod-1", backend=backend)
    history = await graph.aget_history("prod-1", backend)
    after_research = next(
        cp for cp in history if cp.values.get("research") and not cp.values.get("output")
    )
    STEPS.clear()

    case = Case.from_checkpoint(
        "tail",
        backend,
        "prod-1",
        after_research.id,
        graders=[Equals("answer from notes on tides")],
        trials=2,
    )
    report = await evaluate(graph, case)
    assert report.completion_rate == 1.0
    assert STEPS == ["answer", "answer"]  # the research step was not replayed
    await backend.aclose()


SENT: list[str] = []


class Send_(Node):
    """A tail with a side effect: the stored run sent its email after the checkpoint."""

    class In(Schema):
        research: str

    class Out(Schema):
        output: str

    async def run(self, ctx: Context, inp: In) -> Out:
        def send() -> str:
            SENT.append(inp.research)
            return f"sent #{len(SENT)}"

        return self.Out(output=await ctx.step("email", send))


@pytest.mark.parametrize(
    ("effects", "sent", "completed"), [(None, 0, 0.0), ("reuse", 0, 1.0), ("rerun", 2, 1.0)]
)
async def test_a_forked_case_decides_what_to_do_with_the_stored_runs_later_effects(
    tmp_path: Path, effects: Any, sent: int, completed: float
) -> None:
    graph = (
        Graph(Long).add(Research).add(Send_).edge(START, "Research").edge("Research", "Send_")
    ).compile()
    backend = SqliteBackend(tmp_path / "runs.db")
    await graph.invoke({"query": "tides"}, thread_id="prod-1", backend=backend)
    after_research = (await graph.aget_history("prod-1", backend))[1]
    SENT.clear()
    case = Case.from_checkpoint(
        "tail",
        backend,
        "prod-1",
        after_research.id,
        graders=[Contains("sent")],
        trials=2,
        effects=effects,
    )
    report = await evaluate(graph, case)
    assert report.completion_rate == completed and len(SENT) == sent
    with pytest.raises(ValueError, match="effects= takes"):
        Case.from_checkpoint("bad", backend, "prod-1", after_research.id, effects="skip")
    await backend.aclose()


async def test_a_harness_error_stops_the_other_trials() -> None:
    class Mixed(Probe):
        async def invoke(self, inputs: dict[str, Any], *, tracer: Any = None) -> dict[str, Any]:
            self.delay = 0.01 if inputs["query"] == "fast" else 5.0
            return await super().invoke(inputs, tracer=tracer)

    probe = Mixed()
    suite = Suite(
        "s",
        [
            Case("bad", {"query": "fast"}, graders=[Custom(lambda t: "maybe", name="odd")]),
            Case("slow", {"query": "slow"}, graders=[Contains("Paris")], trials=3),
        ],
    )
    with pytest.raises(GraderError, match="grader 'odd' returned 'maybe'"):
        await evaluate(probe, suite, concurrency=4)
    assert probe.active == 0  # the slow trials were cancelled, not left running


async def test_overrides_are_checked() -> None:
    case = Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=3)
    with pytest.raises(EvalError, match=r"evaluate\(trials=...\) must be a positive int"):
        await evaluate(capital_agent, case, trials=0)
    with pytest.raises(EvalError, match="exceeds the 3 trials of case 'c'"):
        await evaluate(capital_agent, case, k=4)
