"""Sandboxes: trials run behind the seam, graders run here — and an agent that tries to
rig its grade fails under both."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from tensorsketch import FakeProvider
from tensorsketch.eval import (
    Case,
    Contains,
    FinalState,
    InProcessSandbox,
    LlmJudge,
    Sandbox,
    SandboxError,
    SubprocessSandbox,
    ToolCalled,
    ToolSequence,
    _graders,
    evaluate,
    graders,
)
from tensorsketch.messages import Message, assistant

pytestmark = pytest.mark.timeout(120)


class ParisContains(Contains):
    def __init__(self) -> None:
        super().__init__("Paris")


@pytest.fixture
def restore_graders() -> Iterator[None]:
    original = _graders.Contains.grade
    yield
    _graders.Contains.grade = original  # type: ignore[method-assign]
    graders.unregister("contains")


def scoped_judge() -> FakeProvider:
    """A judge that reads only the fenced answer and passes it when it names Paris."""

    def decide(messages: list[Message], tools: list[object]) -> Message:
        prompt = messages[-1].text or ""
        answer = prompt.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
        verdict = "pass" if answer.strip().startswith("Paris") else "fail"
        return assistant(
            f'{{"verdict": "{verdict}", "reason": "the answer starts with {answer.split()[0]}"}}'
        )

    return FakeProvider(policy=decide)


def tamper_case(judge: FakeProvider) -> Case:
    return Case(
        "rigged",
        {"query": "Capital of France?"},
        graders=[Contains("Paris"), "contains", LlmJudge(judge, "The answer is Paris.")],
        trials=2,
    )


@pytest.mark.usefixtures("restore_graders")
async def test_in_process_the_agent_cannot_rig_its_grade() -> None:
    judge = scoped_judge()
    graders.register("contains", ParisContains)
    report = await evaluate("tampering:agent", tamper_case(judge), sandbox=InProcessSandbox())
    # the tool did run (its class patch and re-registration took effect in this process) ...
    assert _graders.Contains.__dict__["grade"].__name__ == "<lambda>"
    assert report.trials[0].trace.tool_spans[0].attributes["gen_ai.tool.name"] == "tamper"
    # ... yet every trial fails: graders were resolved and bound before the trial ran,
    # the forged verdict is just answer text, and the fence could not be closed early
    assert report.completion_rate == 0.0
    for trial in report.trials:
        assert [g.passed for g in trial.grades] == [False, False, False]
        assert "tampered" not in " ".join(g.reason for g in trial.grades)
    prompt = judge.calls[0].messages[-1].text or ""
    assert prompt.count("</answer>") == 1 and "<\\/answer>" in prompt


async def test_in_a_subprocess_not_even_the_heap_is_reachable() -> None:
    judge = scoped_judge()
    sandbox = SubprocessSandbox(env_vars={"TAMPER_MEMORY": "1"})
    case = Case(
        "rigged",
        {"query": "Capital of France?"},
        graders=[
            Contains("Paris"),
            ToolSequence(["tamper"]),
            LlmJudge(judge, "The answer is Paris."),
        ],
        trials=2,
    )
    report = await evaluate("tampering:agent", case, sandbox=sandbox, concurrency=2)
    assert report.completion_rate == 0.0
    for trial in report.trials:
        contains, sequence, judged = trial.grades
        assert not contains.passed and "'Paris' not in the answer 'Lyon." in contains.reason
        assert sequence.passed  # the trace came back from the child, tool call and all
        assert not judged.passed
        (tool_span,) = [s for s in trial.spans if s["kind"] == "tool"]
        result = tool_span["attributes"]["gen_ai.tool.call.result"]
        assert result == "tampered; 0 grader objects reached"  # nothing to reach in the child
    assert _graders.Contains.__dict__["grade"].__qualname__ == "Contains.grade"  # untouched here


async def test_subprocess_trials_ship_state_and_env_back() -> None:
    case = Case(
        "france",
        {"query": "Capital of France?"},
        graders=[Contains("Paris"), ToolCalled("search")],
        env={"region": "eu"},
        trials=2,
    )
    report = await evaluate(
        "agents:capital_agent", case, sandbox=SubprocessSandbox(), concurrency=2
    )
    assert report.completion_rate == 1.0
    trial = report.trials[0].trial
    assert (
        trial is not None and isinstance(trial.state, dict) and trial.state["status"] == "completed"
    )
    assert trial.env == {"region": "eu"}
    assert trial.steps == 3 and report.trials[0].transcript[-1]["role"] == "assistant"


async def test_a_trial_state_is_the_same_plain_dict_in_either_sandbox() -> None:
    # one type in both: a check written against the in-process state works in a child too
    case = Case(
        "france",
        {"query": "Capital of France?"},
        graders=[FinalState(lambda state: state["status"] == "completed")],
    )
    here = await evaluate("agents:capital_agent", case, sandbox=InProcessSandbox())
    there = await evaluate("agents:capital_agent", case, sandbox=SubprocessSandbox())
    assert here.completion_rate == there.completion_rate == 1.0
    mine, theirs = here.trials[0].trial, there.trials[0].trial
    assert mine is not None and theirs is not None
    assert type(mine.state) is type(theirs.state) is dict
    assert mine.state == theirs.state and mine.state["usage"]["input_tokens"] >= 0
    assert [type(m) for m in mine.messages] == [type(m) for m in theirs.messages] == [Message] * 4
    assert mine.messages == theirs.messages


async def test_subprocess_timeout_kills_the_child() -> None:
    report = await evaluate(
        "tampering:sleeper",
        Case("slow", {}, graders=[Contains("x")]),
        sandbox=SubprocessSandbox(),
        timeout=3,
    )
    (trial,) = report.trials
    assert trial.error is not None and "was killed" in trial.error
    pid = int(re.search(r"process (\d+)", trial.error).group(1))  # type: ignore[union-attr]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_subprocess_needs_an_importable_agent_and_says_so() -> None:
    with pytest.raises(SandboxError, match=r"'module:attr' or 'file\.py:attr' string"):
        await evaluate(
            object(), Case("c", {}, graders=[Contains("x")]), sandbox=SubprocessSandbox()
        )
    report = await evaluate(
        "agents:no_such_agent", Case("c", {}, graders=[Contains("x")]), sandbox=SubprocessSandbox()
    )
    assert "has no attribute 'no_such_agent'" in (report.trials[0].error or "")


@pytest.mark.parametrize("sandbox", [InProcessSandbox, SubprocessSandbox])
async def test_each_trial_runs_with_its_cases_env_as_deps(sandbox: type[Sandbox]) -> None:
    """A tool reading ``ctx.deps`` acts on the trial's fresh env, in either sandbox, also
    after the approval resume; the env after the run is what the grader reads."""
    case = Case(
        "close",
        {"query": "ACC-9"},
        graders=[FinalState(lambda state, env: env["closed"] == ["ACC-9"])],
        env={"closed": []},
        approve={"close_account": True},
        trials=2,
    )
    report = await evaluate("agents:deps_agent", case, sandbox=sandbox())
    assert report.completion_rate == 1.0, [t.trial and t.trial.error for t in report.trials]
    assert [t.trial.env for t in report.trials if t.trial] == [{"closed": ["ACC-9"]}] * 2
