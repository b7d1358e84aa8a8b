"""The documentation's Evaluation examples, as written, on FakeProvider agents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents import capital_agent, flaky_agent

from tensorsketch import FakeProvider, InMemoryTracer, create_agent, tool
from tensorsketch.eval import (
    Baseline,
    CallbackReporter,
    Case,
    Contains,
    DriftAlert,
    DriftMonitor,
    GateFailed,
    JsonlReporter,
    LatencyBudget,
    LlmJudge,
    MultiReporter,
    OnlineMonitor,
    StepEfficiency,
    Suite,
    ToolArgs,
    ToolCalled,
    evaluate,
)
from tensorsketch.messages import Message, ToolCall, assistant


async def test_the_opening_example_runs_and_gates() -> None:
    agent = capital_agent
    suite = Suite(
        "capitals",
        [
            Case(
                "france",
                {"query": "Capital of France?"},
                graders=[Contains("Paris"), ToolCalled("search"), StepEfficiency(optimal_steps=3)],
                trials=3,
            ),
        ],
    )

    report = await evaluate(agent, suite)
    text = report.render()
    report.require(pass_pow_k=1.0)  # gate CI on the result

    assert "france" in text and "3/3" in text
    assert report.completion_rate == 1.0 and report.pass_at_k == 1.0 and report.pass_pow_k == 1.0
    assert set(report.grader_breakdown()) == {
        "Contains('Paris')",
        "ToolCalled('search')",
        "StepEfficiency(3)",
    }
    # model -> tool -> model is three steps, as SPEC-NOTES defines a step
    assert {t.steps for t in report.trials} == {3}


async def test_pass_pow_k_is_the_strict_one() -> None:
    # "an agent that's right 4 times out of 5 scores pass_pow_k = 0"
    suite = Suite("strict", [Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=5)])
    report = await evaluate(flaky_agent("RRRRW"), suite)
    assert report.completion_rate == pytest.approx(0.8)
    assert report.pass_at_k == 1.0
    assert report.pass_pow_k == 0.0
    with pytest.raises(GateFailed, match=r"pass_pow_k = 0 < required 1"):
        report.require(pass_pow_k=1.0)


def sql_agent(table: str) -> Any:
    def policy(messages: list[Message], tools: list[object]) -> Message:
        if messages[-1].role == "user":
            call = ToolCall(id="q", name="sql_query", args={"table": table, "limit": 5})
            return assistant(tool_calls=[call])
        return assistant("Here are five rows.")

    @tool
    def sql_query(table: str, limit: int) -> str:
        """Query a table.

        Args:
            table: the table.
            limit: how many rows.
        """
        return f"{limit} rows from {table}"

    return create_agent(FakeProvider(policy=policy), [sql_query])


@pytest.mark.parametrize(("table", "passes"), [("customers", True), ("orders", False)])
async def test_tool_args_grades_the_payload(table: str, passes: bool) -> None:
    grader = ToolArgs("sql_query", lambda args: args["table"] == "customers")
    report = await evaluate(
        sql_agent(table), Case("rows", {"query": "5 customers"}, graders=[grader])
    )
    assert report.completion_rate == (1.0 if passes else 0.0)
    if not passes:
        assert "'table': 'orders'" in report.trials[0].grades[0].reason


async def test_llm_judges_on_a_scripted_judge_are_outside_the_agents_trace() -> None:
    provider = FakeProvider(
        [
            '{"verdict": "pass", "reason": "cites atlas.example"}',
            '{"verdict": "fail", "reason": "hedges with according to"}',
        ]
    )
    judges = [
        LlmJudge(provider, "The answer cites at least one source."),
        LlmJudge(provider, "The tone is professional and free of hedging."),
    ]
    report = await evaluate(
        capital_agent, Case("judged", {"query": "Capital of France?"}, graders=judges)
    )
    grades = report.trials[0].grades
    assert [g.passed for g in grades] == [True, False]
    assert grades[1].reason == "hedges with according to"
    # the judge saw the criterion and the answer, fenced as data
    prompt = provider.calls[0].messages[-1].text
    assert "cites at least one source" in prompt and "<answer>" in prompt and "Paris" in prompt
    # its two calls are not in the agent's trace: two model calls there, both the agent's
    trace = report.trials[0].trace
    assert trace.model_calls == 2
    assert all(s.attributes.get("gen_ai.request.model") == "fake-model" for s in trace.model_spans)


async def test_reporters_from_the_docs(tmp_path: Path) -> None:
    suite = Suite(
        "capitals",
        [Case("france", {"query": "Capital of France?"}, graders=[Contains("Paris")], trials=2)],
    )
    path = tmp_path / "evals.jsonl"
    await evaluate(capital_agent, suite, reporter=JsonlReporter(path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["trial", "trial", "report"]
    assert records[-1]["completion_rate"] == 1.0

    class Warehouse:
        def __init__(self) -> None:
            self.rows: list[dict[str, Any]] = []

        def insert(self, record: dict[str, Any]) -> None:
            self.rows.append(record)

    warehouse = Warehouse()
    await evaluate(
        capital_agent, suite, reporter=CallbackReporter(lambda record: warehouse.insert(record))
    )
    assert [r["type"] for r in warehouse.rows] == ["trial", "trial", "report"]


async def test_a_custom_async_reporter_like_the_postgres_one() -> None:
    # The documented PostgresReporter, verbatim, over a pool that records what it is asked
    # (the documented API is asyncpg's `pool.execute(sql, *args)`; the point here is that an
    # async emit is awaited once per record).
    class PostgresReporter:
        def __init__(self, pool: Any) -> None:
            self.pool = pool

        async def emit(self, record: Any) -> None:
            await self.pool.execute("insert into evals(doc) values ($1)", record)

    class Pool:
        def __init__(self) -> None:
            self.executed: list[tuple[str, Any]] = []

        async def execute(self, sql: str, *args: Any) -> None:
            self.executed.append((sql, *args))

    pool = Pool()
    suite = Suite("s", [Case("c", {"query": "Capital?"}, graders=[Contains("Paris")])])
    await evaluate(capital_agent, suite, reporter=PostgresReporter(pool))
    assert [row[1]["type"] for row in pool.executed] == ["trial", "report"]


async def test_online_monitor_from_the_docs(tmp_path: Path) -> None:
    judge = FakeProvider(
        policy=lambda m, t: assistant('{"verdict": "pass", "reason": "on-policy"}')
    )
    path = tmp_path / "online.jsonl"
    monitor = OnlineMonitor(
        [LlmJudge(judge, "The answer stays on-policy."), LatencyBudget(3000)],
        reporter=JsonlReporter(path),
        sample=0.1,  # score 10% of traffic
        seed=7,
    )
    agent = capital_agent
    inputs = {"query": "Capital of France?"}
    sampled = 0
    for _ in range(60):
        tracer = InMemoryTracer()
        state = await agent.invoke(inputs, tracer=tracer)
        sampled += await monitor.observe(state, tracer.trace)  # off the response path
    await monitor.flush()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == sampled == monitor.scored
    assert 0 < sampled < 20  # about 10% of 60
    assert all(r["passed"] and r["case"] is None for r in rows)


async def test_drift_monitor_from_the_docs(tmp_path: Path) -> None:
    graders = [Contains("Paris")]
    offline_report = await evaluate(
        capital_agent, Suite("s", [Case("c", {"query": "Capital?"}, graders=graders, trials=20)])
    )
    baseline = Baseline.from_report(offline_report)  # what "healthy" looked like
    drift = DriftMonitor(baseline, reporter=JsonlReporter(tmp_path / "drift-alerts.jsonl"))

    monitor = OnlineMonitor(
        graders,
        reporter=MultiReporter(
            JsonlReporter(tmp_path / "online.jsonl"), drift
        ),  # store + detect in one pass
        sample=1.0,
    )
    broken = flaky_agent("W")  # a regression: every answer wrong
    for _ in range(60):
        tracer = InMemoryTracer()
        state = await broken.invoke({"query": "Capital?"}, tracer=tracer)
        await monitor.observe(state, tracer.trace)
        await monitor.flush()
    alerts = [json.loads(x) for x in (tmp_path / "drift-alerts.jsonl").read_text().splitlines()]
    rate_alerts = [a for a in alerts if a["metric"] == "pass_rate"]
    assert len(rate_alerts) == 1, "a sustained regression is latched: it fires once"
    assert (
        rate_alerts[0]["type"] == "drift_alert" and rate_alerts[0]["detector"] == "two_proportion_z"
    )
    assert any(a["metric"] == "grader:Contains('Paris')" for a in alerts)
    assert all(isinstance(a, DriftAlert) for a in drift.alerts)
    assert len((tmp_path / "online.jsonl").read_text().splitlines()) == 60
