"""Evaluating an agent, offline: a suite over the trace, a scripted judge, the CI gate, the
HTML report, then online scoring of "production" runs and a drift alert.

Run: python examples/evaluation.py   (writes evals.jsonl and eval-report.html to a temp folder)

The agent is a FakeProvider policy that looks capitals up with a tool; it is priced like
claude-sonnet-4-6, so the report has costs. One case is deliberately flaky so pass@k and
pass^k differ, and a regression later trips the drift monitor.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from pathlib import Path

from tensorsketch import Completion, FakeProvider, InMemoryTracer, Usage, create_agent, tool
from tensorsketch.eval import (
    Baseline,
    Case,
    Contains,
    CostBudget,
    DriftMonitor,
    GateFailed,
    JsonlReporter,
    LlmJudge,
    MultiReporter,
    OnlineMonitor,
    StepEfficiency,
    Suite,
    ToolArgs,
    ToolCalled,
    calibrate,
    evaluate,
    render_html,
)
from tensorsketch.messages import Message, ToolCall, assistant

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima", "Kenya": "Nairobi"}


@tool
def atlas(country: str) -> str:
    """Look a country's capital up in the atlas.

    Args:
        country: the country, e.g. "France".
    """
    return f"{CAPITALS.get(country, 'unknown')} (source: atlas.example)"


def make_agent(*, wrong_every: int = 0, seed: int = 1) -> object:
    """The agent under test. ``wrong_every=n`` answers Kenya wrongly every n-th time it is
    asked (whatever the other cases do meanwhile)."""
    rng = random.Random(seed)
    count = 0

    async def policy(messages: list[Message], tools: list[object]) -> Completion:
        nonlocal count
        await asyncio.sleep(rng.uniform(0.001, 0.012))  # a model takes a moment
        last = messages[-1]
        usage = Usage(input_tokens=rng.randint(300, 900), output_tokens=rng.randint(20, 90))
        if last.role == "user":
            country = next((c for c in CAPITALS if c in (last.text or "")), "Atlantis")
            call = ToolCall(id="a1", name="atlas", args={"country": country})
            message = assistant("Checking the atlas.", tool_calls=[call])
        else:
            capital = (last.text or "").split(" (")[0]
            count += capital == "Nairobi"
            if wrong_every and capital == "Nairobi" and count % wrong_every == 0:
                capital = "Mombasa"
            message = assistant(f"The capital is {capital}, according to atlas.example.")
        return Completion(message=message, usage=usage, model="claude-sonnet-4-6")

    return create_agent(FakeProvider(policy=policy), [atlas])


def judge_model() -> FakeProvider:
    """A scripted judge: passes an answer that names a source."""

    def decide(messages: list[Message], tools: list[object]) -> Message:
        answer = (messages[-1].text or "").split("<answer>", 1)[-1]
        verdict = "pass" if "atlas.example" in answer else "fail"
        return assistant(f'{{"verdict": "{verdict}", "reason": "source named: {verdict}"}}')

    return FakeProvider(policy=decide)


def capitals_suite() -> Suite:
    cites = LlmJudge(judge_model(), "The answer cites at least one source.")
    cases = [
        Case(
            country.lower(),
            {"query": f"What is the capital of {country}?"},
            graders=[
                Contains(capital),
                ToolCalled("atlas"),
                ToolArgs("atlas", {"country": country}),
                StepEfficiency(optimal_steps=3),
                CostBudget(0.01),
                cites,
            ],
            trials=5,
            k=3,
        )
        for country, capital in CAPITALS.items()
    ]
    return Suite("capitals", cases)


async def main() -> None:
    folder = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())

    # -- offline: the suite, the report, the gate -------------------------------------------
    report = await evaluate(
        make_agent(wrong_every=2),
        capitals_suite(),
        reporter=JsonlReporter(folder / "evals.jsonl"),
        concurrency=4,
    )
    print(report.render(), end="\n\n")
    try:
        report.require(pass_pow_k=1.0)
    except GateFailed as exc:
        print(f"CI gate: {exc}".splitlines()[0], end="\n\n")
    html = folder / "eval-report.html"
    html.write_text(render_html(report), encoding="utf-8")
    print(f"HTML report: {html}")

    # -- calibrate the judge against a few human labels -------------------------------------
    judge = LlmJudge(judge_model(), "The answer cites at least one source.")
    labelled = [
        ("Paris (atlas.example)", True),
        ("Paris.", False),
        ("Tokyo, per atlas.example", True),
        ("Lima, see [1]", True),  # a citation the judge misses
    ]
    print((await calibrate(judge, labelled)).render(), end="\n\n")

    # -- online: score production runs, watch for drift -------------------------------------
    healthy = await evaluate(make_agent(), capitals_suite(), concurrency=4)
    drift = DriftMonitor(Baseline.from_report(healthy), distributions=())
    monitor = OnlineMonitor(
        [Contains("Nairobi"), CostBudget(0.01)],
        reporter=MultiReporter(JsonlReporter(folder / "online.jsonl"), drift),
    )
    live = make_agent(wrong_every=1)  # a bad deploy: Kenya is always wrong now
    for _ in range(40):
        tracer = InMemoryTracer()
        state = await live.invoke({"query": "What is the capital of Kenya?"}, tracer=tracer)
        await monitor.observe(state, tracer.trace)  # returns at once; scoring runs behind
    await monitor.flush()
    print(f"online: {monitor.scored} runs scored")
    for alert in drift.alerts:
        print(f"drift alert ({alert.detector}): {alert.message}")


if __name__ == "__main__":
    asyncio.run(main())
