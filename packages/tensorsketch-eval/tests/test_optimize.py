"""The optimizer: prompts, the source write-back, the reflective search and its budget, and
the registry. Scripted models only: the agent's model is right only when its prompt says how
to answer, and the proposer offers that only after being shown the failures."""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorsketch import FakeProvider, Usage, create_agent, tool
from tensorsketch.errors import RegistryError
from tensorsketch.eval import (
    Case,
    Contains,
    Equals,
    EvalError,
    Example,
    OptimizationResult,
    Optimizer,
    Program,
    Prompt,
    PromptSource,
    ReflectiveOptimizer,
    Score,
    Suite,
    create_optimizer,
    optimizers,
    register_optimizer,
    render_html,
)
from tensorsketch.eval._agents import load_module
from tensorsketch.eval._reflective import split_cases
from tensorsketch.eval._source import string_literal
from tensorsketch.messages import Message, ToolCall, assistant

FIXTURES = Path(__file__).parent / "fixtures" / "optimize"
PRICED = Usage(input_tokens=1000, output_tokens=100)  # gpt-4o-mini: $0.00021 per call


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("terse_agent.py", "terse_suite.py", "proposer.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def terse_suite(project: Path) -> Suite:
    suite: Suite = load_module(project / "terse_suite.py").suite
    return suite


def fresh_proposer(project: Path) -> FakeProvider:
    module = load_module(project / "proposer.py")
    return FakeProvider(
        module.propose, model="gpt-4o-mini", usage=Usage(input_tokens=2000, output_tokens=200)
    )


# -- prompts and literals ----------------------------------------------------------------------


def test_a_prompt_with_examples_renders_and_parses_back() -> None:
    prompt = Prompt("Be brief.", (Example("Capital of Peru?", "Lima"), Example("a\nb", "c")))
    text = prompt.render()
    assert text.startswith("Be brief.\n\nExamples:\n\nInput: Capital of Peru?\nOutput: Lima")
    assert Prompt.parse(text) == prompt
    assert Prompt.parse("Be brief.") == Prompt("Be brief.")


def test_text_that_only_looks_like_examples_stays_instructions() -> None:
    text = "Do this.\n\nExamples:\n\nsee the manual"
    assert Prompt.parse(text) == Prompt(text)
    with pytest.raises(TypeError, match="Example objects"):
        Prompt("x", ("not an example",))  # type: ignore[arg-type]


@given(st.text(st.characters(exclude_categories=("Cs",))), st.booleans())
def test_a_string_literal_evaluates_back_to_its_text(text: str, triple: bool) -> None:
    literal = string_literal(text, triple=triple)
    assert ast.literal_eval(literal) == text
    assert literal.startswith('"')


def test_the_wilson_interval_is_honest_at_the_edges() -> None:
    assert Score(0, 3).interval[0] == 0.0 and Score(0, 3).interval[1] == pytest.approx(0.5615, 1e-3)
    assert Score(3, 3).interval[1] == 1.0 and Score(3, 3).interval[0] == pytest.approx(0.4385, 1e-3)
    low, high = Score(50, 100).interval
    assert low == pytest.approx(0.4038, 1e-3) and high == pytest.approx(0.5962, 1e-3)
    assert str(Score(1, 4)) == "25% (1/4, 95% CI 5%-70%)"


# -- the source ------------------------------------------------------------------------------------


def test_the_prompt_is_found_rewritten_alone_and_loaded(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    assert source.prompt == Prompt("You answer geography questions.")
    assert source.where == "`system=` at line 34"
    better = Prompt("Reply with the city name only.")
    new = source.apply(better)
    old_lines, new_lines = source.source.splitlines(), new.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert changed == [33]
    assert new_lines[33] == 'agent = create_agent(model, system="Reply with the city name only.")'
    diff = source.diff(better)
    assert '-agent = create_agent(model, system="You answer geography questions.")' in diff
    # the candidate runs from the rewritten source; the file is untouched
    agent = source.load(better)
    state = asyncio.run(agent.invoke({"query": "Capital of Peru?"}))
    assert state.output == "Lima"
    assert (project / "terse_agent.py").read_text() == source.source


def test_a_constant_named_by_system_is_the_prompt_and_keeps_its_triple_quotes(
    tmp_path: Path,
) -> None:
    file = tmp_path / "agent.py"
    file.write_text(
        "from tensorsketch import FakeProvider, create_agent\n\n"
        'INSTRUCTIONS = """Be helpful."""  # tuned by hand\n\n'
        "agent = create_agent(FakeProvider(), system=INSTRUCTIONS)\n"
    )
    source = PromptSource(file)
    assert "`INSTRUCTIONS = ...` at line 3" in source.where
    prompt = Prompt("Be terse.", (Example("Capital of Peru?", "Lima"),))
    assert source.write(prompt) is True
    text = file.read_text()
    assert (
        'INSTRUCTIONS = """Be terse.\n\nExamples:\n\nInput: Capital of Peru?\nOutput: Lima"""  # tuned by hand\n'
        in text
    )
    assert text.endswith("agent = create_agent(FakeProvider(), system=INSTRUCTIONS)\n")
    # read back: the next optimization starts from the same instructions and examples
    assert PromptSource(file).prompt == prompt
    assert PromptSource(file).write(prompt) is False


def test_several_prompts_need_a_choice_and_a_bad_one_is_named(tmp_path: Path) -> None:
    file = tmp_path / "two.py"
    file.write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        'A = "first"\n'
        "agent = create_agent(FakeProvider(), system=A)\n"
        'helper = create_agent(FakeProvider(), system="second", name="helper")\n'
        'WHO = "x"\n'
        'other = create_agent(FakeProvider(), system=f"hi {WHO}")\n'
    )
    with pytest.raises(EvalError, match=r"2 prompts .*line 2.*line 4.*--prompt NAME"):
        PromptSource(file)
    assert PromptSource(file, variable="A").prompt == Prompt("first")
    with pytest.raises(EvalError, match=r"no module-level `B = \.\.\.`"):
        PromptSource(file, variable="B")
    file.write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        'W = "x"\n'
        'agent = create_agent(FakeProvider(), system=f"hi {W}")\n'
    )
    with pytest.raises(EvalError, match=r"found no prompt .*line 3 is not a string literal"):
        PromptSource(file)
    with pytest.raises(EvalError, match="is not a plain string literal"):
        PromptSource(file, variable="agent")
    with pytest.raises(EvalError, match=r"form 'path/to/file\.py:attribute'"):
        PromptSource.from_spec("agent")


def test_writing_refuses_a_file_changed_since_it_was_read(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    (project / "terse_agent.py").write_text(source.source + "# edited meanwhile\n")
    with pytest.raises(EvalError, match="changed since the optimization read it"):
        source.write(Prompt("Reply with the city name only."))
    assert (project / "terse_agent.py").read_text().endswith("# edited meanwhile\n")


# -- the search ------------------------------------------------------------------------------------


def test_the_suite_score_improves_from_the_failures_it_read(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    proposer = fresh_proposer(project)
    seen: list[int] = []
    optimizer = ReflectiveOptimizer(proposer, on_round=lambda r: seen.append(r.index))
    result = asyncio.run(optimizer.optimize(source.program(), terse_suite(project), budget_usd=1.0))
    assert (result.before.passed, result.before.total) == (0, 3)
    assert (result.after.passed, result.after.total) == (3, 3)
    assert result.after_train.rate == 1.0 and result.before_train.rate == 0.0
    assert result.best.instructions.endswith("Reply with the city name only.")
    assert result.stopped == "no_failures" and seen == [0, 1]
    # the proposer was shown the failing trials: the input, the answer and the grader's reason
    request = proposer.calls[0].messages[-1].text
    assert "Input: Capital of" in request and "a lovely place to visit" in request
    assert "Why it failed: Equals(" in request
    # six trials at $0.00021 to start, one proposal ($0.00042), six more trials
    assert result.spent_usd == pytest.approx(12 * 0.00021 + 0.00042)
    assert [r.accepted for r in result.rounds] == [True, True]
    assert result.rounds[1].holdout == Score(3, 3)


def test_without_failures_to_read_the_proposer_cannot_help(project: Path) -> None:
    """The control: a proposer that never sees a grader's reason proposes nothing useful,
    and nothing is kept (so the improvement above comes from reading the failures)."""

    def blind(messages: list[Message], tools: list[Any]) -> Message:
        return assistant(json.dumps({"instructions": "You answer geography questions well."}))

    source = PromptSource(project / "terse_agent.py")
    optimizer = ReflectiveOptimizer(FakeProvider(blind), max_rounds=2)
    result = asyncio.run(optimizer.optimize(source.program(), terse_suite(project)))
    assert not result.improved and result.after == result.before == Score(0, 3)
    assert result.stopped == "max_rounds"
    assert result.rounds[1].note.startswith("dropped: held-out 0/3")
    assert result.rounds[2].note == "the proposal repeats a prompt already tried"
    assert result.unpriced_models == ["fake-model"]


def test_demonstrations_bootstrapped_from_passing_trials_are_kept_when_they_help() -> None:
    """A model that gets the hard questions right only when the prompt shows examples: the
    instruction change alone does nothing, the same change with examples taken from the
    training trials that passed wins on the held-out split."""

    def model(messages: list[Message], tools: list[Any]) -> Message:
        prompt = next((m.text for m in messages if m.role == "system"), "")
        question = messages[-1].text
        if question.startswith("hard") and "Examples:" not in prompt:
            return assistant("no idea")
        return assistant(question.upper())

    def build(prompt: Prompt) -> Any:
        return create_agent(FakeProvider(model), system=prompt.render())

    def case(name: str, split: str) -> Case:
        return Case(
            name, {"query": name}, graders=[Equals(name.upper())], metadata={"split": split}
        )

    suite = Suite(
        "mixed",
        [
            case("easy one", "train"),
            case("easy two", "train"),
            case("hard one", "train"),
            case("hard two", "train"),
            case("easy three", "holdout"),
            case("hard three", "holdout"),
        ],
    )
    proposer = FakeProvider([json.dumps({"instructions": "Answer in capitals."})])
    optimizer = ReflectiveOptimizer(proposer, max_rounds=1, max_examples=2)
    result = asyncio.run(optimizer.optimize(Program(Prompt("Answer."), build), suite))
    assert result.before == Score(1, 2) and result.after == Score(2, 2)
    assert result.best == Prompt(
        "Answer in capitals.",
        (Example("easy one", "EASY ONE"), Example("easy two", "EASY TWO")),
    )
    notes = [r.note for r in result.rounds]
    assert "another candidate of this round scored higher on training" in notes
    assert notes[-1] == "kept: held-out 2/2 (was 1/2)"


def test_the_budget_stops_the_search_before_it_would_be_overrun(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    suite = terse_suite(project)
    # the starting prompt costs $0.00126 on both splits; a round needs $0.00063 more at least
    proposer = fresh_proposer(project)
    result = asyncio.run(
        ReflectiveOptimizer(proposer).optimize(source.program(), suite, budget_usd=0.0015)
    )
    assert result.stopped == "budget" and not proposer.calls and not result.improved
    assert result.spent_usd == pytest.approx(0.00126)
    # room for the proposal but not for the training run after it
    proposer = fresh_proposer(project)
    result = asyncio.run(
        ReflectiveOptimizer(proposer).optimize(source.program(), suite, budget_usd=0.002)
    )
    assert result.stopped == "budget" and len(proposer.calls) == 1
    assert result.spent_usd == pytest.approx(0.00126 + 0.00042)
    assert result.spent_usd <= 0.002
    with pytest.raises(EvalError, match="budget_usd must be a positive number"):
        asyncio.run(ReflectiveOptimizer(proposer).optimize(source.program(), suite, budget_usd=0))


def test_a_reply_that_is_not_a_proposal_is_a_round_not_a_crash(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    proposer = FakeProvider(["I would rather not.", "still no"])
    result = asyncio.run(
        ReflectiveOptimizer(proposer, max_rounds=2).optimize(source.program(), terse_suite(project))
    )
    assert [r.accepted for r in result.rounds] == [True, False, False]
    assert result.rounds[1].note.startswith("the proposer's reply was not a valid proposal")
    assert not result.improved


def test_the_split_honours_pinned_cases_and_needs_both_sides() -> None:
    cases = [Case(f"c{i}", {"query": "q"}, graders=[Contains("x")]) for i in range(5)]
    train, held = split_cases(cases, 0.4, seed=1)
    assert len(held) == 2 and len(train) == 3
    assert {c.name for c in train} | {c.name for c in held} == {c.name for c in cases}
    assert split_cases(cases, 0.4, seed=1) == (train, held)  # the same seed, the same split
    pinned = [Case("p", {"query": "q"}, graders=[Contains("x")], metadata={"split": "holdout"})]
    train, held = split_cases(cases[:1] + pinned, 0.5, seed=0)
    assert [c.name for c in held] == ["p"] and [c.name for c in train] == ["c0"]
    with pytest.raises(EvalError, match="at least one training and one held-out case"):
        split_cases(cases[:1], 0.5, seed=0)
    odd = [Case("o", {"query": "q"}, graders=[Contains("x")], metadata={"split": "test"})]
    with pytest.raises(EvalError, match="use 'train' or 'holdout'"):
        split_cases(odd, 0.5, seed=0)


def test_bad_options_are_named() -> None:
    with pytest.raises(EvalError, match="needs proposer="):
        ReflectiveOptimizer()
    with pytest.raises(EvalError, match=r"max_rounds=\.\.\.\) must be an int >= 1"):
        ReflectiveOptimizer(FakeProvider(), max_rounds=0)
    with pytest.raises(EvalError, match="strictly between 0 and 1"):
        ReflectiveOptimizer(FakeProvider(), holdout=1.0)


# -- the report and the registry ------------------------------------------------------------------


def test_the_html_report_shows_the_optimization_history(project: Path) -> None:
    source = PromptSource(project / "terse_agent.py")
    result = asyncio.run(
        ReflectiveOptimizer(fresh_proposer(project)).optimize(
            source.program(), terse_suite(project)
        )
    )
    page = render_html(result.reports, optimization=result)
    assert 'data-section="optimization"' in page and 'data-chart="optimization"' in page
    assert page.count('<tr class="kept">') == 2
    assert "0% (0/3, 95% CI 0%-56%) → 100% (3/3, 95% CI 44%-100%)" in page
    assert "Reply with the city name only." in page
    assert page.count('data-series="holdout"') == 2
    assert 'data-section="optimization"' not in render_html(result.reports)


def test_optimizers_are_found_by_name_through_the_hook() -> None:
    assert "reflective" in optimizers.names()
    assert optimizers.origin("reflective") == "plugin 'eval'"
    built = create_optimizer("reflective", proposer=FakeProvider(), max_rounds=2)
    assert isinstance(built, ReflectiveOptimizer) and isinstance(built, Optimizer)
    assert built.max_rounds == 2


def test_a_registered_optimizer_is_used_and_a_broken_one_is_refused() -> None:
    class Keep:
        name = "keep"

        async def optimize(
            self, program: Program, suite: Any, *, budget_usd: float | None = None
        ) -> OptimizationResult:
            raise NotImplementedError

    register_optimizer("keep", Keep)

    class Broken:
        name = "broken"

    register_optimizer("broken", Broken)
    try:
        assert isinstance(create_optimizer("keep"), Keep)
        with pytest.raises(EvalError, match="has no `optimize"):
            create_optimizer("broken")
        with pytest.raises(RegistryError, match=r"unknown optimizer 'reflectiv'.*'reflective'"):
            create_optimizer("reflectiv")
    finally:
        optimizers.unregister("keep")
        optimizers.unregister("broken")


def test_the_proposer_sees_the_tool_calls_each_failing_trace_recorded() -> None:
    @tool
    def atlas(country: str) -> str:
        """Look a capital up.

        Args:
            country: the country.
        """
        return {"Peru": "Lima"}.get(country, "not in the atlas")

    def model(messages: list[Message], tools: list[Any]) -> Message:
        if messages[-1].role == "user":
            call = ToolCall(id="a1", name="atlas", args={"country": "Peru"})
            return assistant(tool_calls=[call])
        return assistant(f"It is {messages[-1].text}.")

    def build(prompt: Prompt) -> Any:
        return create_agent(FakeProvider(model), [atlas], system=prompt.render())

    suite = Suite(
        "peru",
        [Case(f"peru{i}", {"query": "Capital of Peru?"}, graders=[Equals("Lima")]) for i in (1, 2)],
    )
    proposer = FakeProvider([json.dumps({"instructions": "Answer with the city only."})])
    optimizer = ReflectiveOptimizer(proposer, max_rounds=1)
    asyncio.run(optimizer.optimize(Program(Prompt("Answer."), build), suite))
    request = proposer.calls[0].messages[-1].text
    assert '  - atlas({"country": "Peru"}) -> Lima' in request
    assert "Answer: It is Lima." in request
