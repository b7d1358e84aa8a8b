"""AG-UI messages to TensorSketch's and back: the conversation survives the trip."""

from __future__ import annotations

import pytest
from ag_ui import core as agui

from tensorsketch.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    assistant,
    system,
    tool_result,
    user,
)
from tensorsketch.serve._agui_messages import from_agui, to_agui


def _wire(messages: list[agui.BaseModel]) -> list[object]:
    """Through JSON and back with the ag-ui models, as a client would send them."""
    payload = agui.RunAgentInput(thread_id="t", run_id="r", messages=messages).model_dump(
        by_alias=True
    )
    return list(agui.RunAgentInput.model_validate(payload).messages)


def test_a_conversation_round_trips_with_its_ids() -> None:
    call = ToolCall(id="c1", name="lookup", args={"order": 7, "why": ["x"]})
    ours = [
        system("Be brief."),
        user(
            "What is in",
            ImageBlock(url="https://example.com/a.png"),
            ImageBlock(data="aGk=", media_type="image/png"),
        ),
        assistant("Checking.", tool_calls=[call]),
        tool_result(call, "shoes"),
        tool_result(ToolCall(id="c2", name="lookup", args={}), "no such order", is_error=True),
        assistant("Shoes."),
    ]
    ids = [f"m{i}" for i in range(len(ours))]
    back = from_agui(_wire(to_agui(ours, ids)))
    expected = [m.model_copy(update={"id": i, "name": None}) for m, i in zip(ours, ids)]
    assert back == expected


def test_developer_messages_are_system_and_ui_only_messages_are_dropped() -> None:
    got = from_agui(
        _wire(
            [
                agui.DeveloperMessage(id="d", content="rules"),
                agui.ActivityMessage(id="a", activity_type="progress", content={"pct": 5}),
                agui.ReasoningMessage(id="r", content="thinking"),
                agui.UserMessage(id="u", content=[agui.TextPart(text="hi")]),
            ]
        )
    )
    assert got == [
        Message(role="system", content="rules", id="d"),
        Message(role="user", content=[TextBlock(text="hi")], id="u"),
    ]


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [("{not json", "not JSON"), ("[1, 2]", "not a JSON object")],
)
def test_tool_call_arguments_must_be_a_json_object(arguments: str, fragment: str) -> None:
    bad = agui.AssistantMessage(
        id="a1",
        tool_calls=[
            agui.ToolCall(id="c1", function=agui.FunctionCall(name="f", arguments=arguments))
        ],
    )
    with pytest.raises(ValueError, match=fragment) as info:
        from_agui(_wire([bad]))
    assert "messages[0]" in str(info.value) and "'c1'" in str(info.value)


def test_a_part_a_model_cannot_take_is_named() -> None:
    audio = agui.UserMessage(
        id="u1", content=[agui.AudioPart(source=agui.UrlSource(value="https://x/a.mp3"))]
    )
    with pytest.raises(ValueError, match="'audio' part with a 'url' source"):
        from_agui(_wire([audio]))
