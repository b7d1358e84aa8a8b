"""LlmJudge verdict parsing and calibrate(): agreement, Cohen's kappa, the confusion matrix."""

from __future__ import annotations

import pytest

from tensorsketch import FakeProvider
from tensorsketch.eval import Calibration, LlmJudge, calibrate
from tensorsketch.messages import Message, assistant


def keyword_judge(word: str) -> FakeProvider:
    def decide(messages: list[Message], tools: list[object]) -> Message:
        answer = (messages[-1].text or "").split("<answer>", 1)[1]
        verdict = "pass" if word in answer else "fail"
        return assistant(f'{{"verdict": "{verdict}", "reason": "looked for {word}"}}')

    return FakeProvider(policy=decide)


async def test_calibration_against_human_labels() -> None:
    judge = LlmJudge(keyword_judge("source"), "The answer cites a source.")
    labelled = [
        ("Paris (source: atlas)", True),  # tp
        ("Paris, source unknown", False),  # fp: the judge is fooled by the word
        ("Paris [1]", True),  # fn: a citation without the word
        ("Paris", False),  # tn
        ("Lyon (source: map)", True),  # tp
        ("Nice", False),  # tn
    ]
    result = await calibrate(judge, labelled)
    assert isinstance(result, Calibration)
    assert result.confusion == {"tp": 2, "fp": 1, "fn": 1, "tn": 2}
    assert result.agreement == pytest.approx(4 / 6)
    # kappa = (po - pe) / (1 - pe), po = 4/6, pe = 0.5*0.5 + 0.5*0.5 = 0.5
    assert result.kappa == pytest.approx((4 / 6 - 0.5) / 0.5)
    assert result.disagreements == [1, 2]
    assert result.precision == pytest.approx(2 / 3) and result.recall == pytest.approx(2 / 3)
    assert "kappa=0.333" in result.render()


async def test_a_reply_that_is_not_a_verdict_fails_with_the_reply() -> None:
    judge = LlmJudge(FakeProvider(["I think it is fine!"]), "Polite.")
    result = await calibrate(judge, [("Hello", True)])
    assert result.confusion["fn"] == 1


def test_judge_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="non-empty sentence"):
        LlmJudge(FakeProvider([]), "  ")
    with pytest.raises(TypeError, match="must be a ChatProvider"):
        LlmJudge("gpt-4o", "Polite.")  # type: ignore[arg-type]
