"""AG-UI messages to TensorSketch's and back: the conversation survives the trip."""

from __future__ import annotations

import base64

import pytest
from ag_ui import core as agui

from tensorsketch import messages
from tensorsketch.messages import (
    FileBlock,
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
    video = agui.UserMessage(
        id="u1", content=[agui.VideoPart(source=agui.UrlSource(value="https://x/a.mp4"))]
    )
    with pytest.raises(ValueError, match="'video' part with a 'url' source"):
        from_agui(_wire([video]))


PDF = base64.b64encode(b"%PDF-1.4 a tiny document").decode()


def test_document_and_audio_parts_arrive_as_file_blocks() -> None:
    message = agui.UserMessage(
        id="u1",
        content=[
            agui.TextPart(text="Summarize"),
            agui.DocumentPart(
                source=agui.DataSource(value=PDF, mime_type="application/pdf"),
                metadata={"filename": "report.pdf"},
            ),
            agui.DocumentPart(
                source=agui.UrlSource(
                    value="https://example.com/a.pdf", mime_type="application/pdf"
                )
            ),
            agui.DocumentPart(source=agui.FileSource(value="file-abc", mime_type="text/plain")),
            agui.AudioPart(source=agui.DataSource(value="UklGRg==", mime_type="audio/wav")),
        ],
    )
    (got,) = from_agui(_wire([message]))
    assert got.content == [
        TextBlock(text="Summarize"),
        FileBlock(data=PDF, media_type="application/pdf", name="report.pdf"),
        FileBlock(url="https://example.com/a.pdf", media_type="application/pdf"),
        FileBlock(file_id="file-abc", media_type="text/plain"),
        FileBlock(data="UklGRg==", media_type="audio/wav"),
    ]


def test_file_blocks_round_trip_through_agui() -> None:
    ours = [
        user(
            "Listen and read",
            FileBlock(data=PDF, media_type="application/pdf", name="r.pdf"),
            FileBlock(url="https://example.com/a.mp3", media_type="audio/mpeg"),
            FileBlock(file_id="file-1", media_type="application/pdf"),
        )
    ]
    back = from_agui(_wire(to_agui(ours, ["m0"])))
    assert back == [ours[0].model_copy(update={"id": "m0"})]


@pytest.mark.parametrize(
    ("part", "fragment"),
    [
        (
            agui.DocumentPart(source=agui.DataSource(value="not base64!", mime_type="text/plain")),
            "not valid base64",
        ),
        (
            agui.DocumentPart(source=agui.UrlSource(value="https://example.com/a")),
            "needs a `mime_type`",
        ),
        (
            agui.VideoPart(source=agui.UrlSource(value="https://x/v.mp4", mime_type="video/mp4")),
            "'video' part",
        ),
    ],
)
def test_a_file_part_that_cannot_be_read_is_named(part: object, fragment: str) -> None:
    message = agui.UserMessage(id="u1", content=[agui.TextPart(text="hi"), part])
    with pytest.raises(ValueError, match=fragment) as info:
        from_agui(_wire([message]))
    assert "messages[0] (id 'u1')" in str(info.value) and "content[1]" in str(info.value)


def test_a_file_over_the_size_limit_is_refused_with_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(messages, "MAX_FILE_BYTES", 8)
    big = base64.b64encode(b"x" * 64).decode()
    message = agui.UserMessage(
        id="u1",
        content=[agui.DocumentPart(source=agui.DataSource(value=big, mime_type="text/plain"))],
    )
    with pytest.raises(ValueError, match="at most") as info:
        from_agui(_wire([message]))
    assert "content[0]" in str(info.value)
