"""Files and audio in messages, in each vendor's native form, through the real SDKs against the
wire server: Anthropic documents, OpenAI file and input_audio parts, Gemini inline/file data."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from vendor_plays import (  # type: ignore[import-not-found]
    AnthropicPlay,
    GooglePlay,
    OpenAIPlay,
    OpenAIResponsesPlay,
)

from tensorsketch.messages import MAX_FILE_BYTES, FileBlock, user

PDF = base64.b64encode(b"%PDF-1.7 a tiny report").decode()
WAV = base64.b64encode(b"RIFF....WAVEfmt ").decode()
NOTE = base64.b64encode("plain notes: caf\u00e9".encode()).decode()


def _find(value: Any, key: str) -> list[Any]:
    """Every value under ``key`` anywhere in a JSON body."""
    found: list[Any] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                found.append(v)
            found += _find(v, key)
    elif isinstance(value, list):
        for item in value:
            found += _find(item, key)
    return found


async def test_anthropic_sends_documents(server: Any) -> None:
    play = AnthropicPlay()
    server.queue(play.text("read"))
    provider = play.provider(server.url)
    message = user(
        "Summarize these.",
        FileBlock(data=PDF, media_type="application/pdf", name="report.pdf"),
        FileBlock(url="https://example.com/a.pdf", media_type="application/pdf"),
        FileBlock(data=NOTE, media_type="text/plain"),
    )
    await provider.complete([message])
    content = server.last.body["messages"][0]["content"]
    assert content[1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        "title": "report.pdf",
    }
    assert content[2]["source"] == {"type": "url", "url": "https://example.com/a.pdf"}
    assert content[3]["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": "plain notes: caf\u00e9",
    }
    with pytest.raises(ValueError, match=r"Anthropic cannot take the file 'audio/wav'.*no audio"):
        await provider.complete([user(FileBlock(data=WAV, media_type="audio/wav"))])


async def test_openai_sends_file_and_input_audio_parts(server: Any) -> None:
    play = OpenAIPlay()
    server.queue(play.text("heard"))
    provider = play.provider(server.url)
    message = user(
        "What is in these?",
        FileBlock(data=PDF, media_type="application/pdf", name="report.pdf"),
        FileBlock(data=WAV, media_type="audio/wav"),
    )
    await provider.complete([message])
    parts = server.last.body["messages"][0]["content"]
    assert parts[1] == {
        "type": "file",
        "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
    }
    assert parts[2] == {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
    with pytest.raises(ValueError, match=r"no file URLs.*OpenAIResponsesProvider"):
        await provider.complete(
            [user(FileBlock(url="https://x/a.pdf", media_type="application/pdf"))]
        )
    with pytest.raises(ValueError, match="audio input takes"):
        await provider.complete([user(FileBlock(data=WAV, media_type="audio/ogg"))])


async def test_gemini_sends_inline_and_file_data(server: Any) -> None:
    play = GooglePlay()
    server.queue(play.text("seen"))
    provider = play.provider(server.url)
    message = user(
        "Listen and read.",
        FileBlock(data=WAV, media_type="audio/wav"),
        FileBlock(url="gs://bucket/report.pdf", media_type="application/pdf"),
    )
    await provider.complete([message])
    body = server.last.body
    inline = _find(body, "inlineData") or _find(body, "inline_data")
    assert inline == [{"mimeType": "audio/wav", "data": WAV}] or inline == [
        {"mime_type": "audio/wav", "data": WAV}
    ]
    files = _find(body, "fileData") or _find(body, "file_data")
    assert len(files) == 1 and "gs://bucket/report.pdf" in str(files[0])


def test_a_file_needs_one_source_and_a_bounded_size() -> None:
    with pytest.raises(ValueError, match="exactly one source"):
        FileBlock(media_type="application/pdf")
    with pytest.raises(ValueError, match=r"exactly one source.*\(got url, file_id\)"):
        FileBlock(media_type="application/pdf", url="https://x/a.pdf", file_id="file-1")
    too_big = "A" * ((MAX_FILE_BYTES // 3 + 1) * 4)
    with pytest.raises(ValueError, match=r"at most 32 MiB — upload it and pass `file_id=`"):
        FileBlock(data=too_big, media_type="application/pdf", name="huge.pdf")
    block = FileBlock(data=WAV, media_type="audio/mpeg")
    assert block.is_audio and user("x", block).content[1] == block  # type: ignore[index]


# -- files by reference: an uploaded file's id, or a URL the vendor fetches ------------------


async def test_anthropic_names_an_uploaded_file_under_the_files_beta(server: Any) -> None:
    play = AnthropicPlay()
    server.queue(play.text("read"), play.text("read"))
    provider = play.provider(server.url)
    await provider.complete(
        [user("Summarize.", FileBlock(file_id="file_011abc", media_type="application/pdf"))]
    )
    document = server.last.body["messages"][0]["content"][1]
    assert document["source"] == {"type": "file", "file_id": "file_011abc"}
    assert "files-api-2025-04-14" in (server.last.header("anthropic-beta") or "")
    await provider.complete([user("no files here")])
    assert server.last.header("anthropic-beta") is None


async def test_openai_chat_names_an_uploaded_file(server: Any) -> None:
    play = OpenAIPlay()
    server.queue(play.text("read"))
    provider = play.provider(server.url)
    await provider.complete(
        [user("Read.", FileBlock(file_id="file-abc", media_type="application/pdf"))]
    )
    part = server.last.body["messages"][0]["content"][1]
    assert part == {"type": "file", "file": {"file_id": "file-abc"}}
    with pytest.raises(ValueError, match="audio inline only"):
        await provider.complete([user(FileBlock(file_id="file-a", media_type="audio/wav"))])


async def test_openai_responses_takes_files_inline_by_url_and_by_id(server: Any) -> None:
    play = OpenAIResponsesPlay()
    server.queue(play.text("read"))
    provider = play.provider(server.url)
    await provider.complete(
        [
            user(
                "Read these.",
                FileBlock(data=PDF, media_type="application/pdf", name="report.pdf"),
                FileBlock(url="https://example.com/a.pdf", media_type="application/pdf"),
                FileBlock(file_id="file-abc", media_type="application/pdf"),
                FileBlock(data=WAV, media_type="audio/wav"),
            )
        ]
    )
    parts = server.last.body["input"][0]["content"]
    assert parts[1:] == [
        {
            "type": "input_file",
            "file_data": f"data:application/pdf;base64,{PDF}",
            "filename": "report.pdf",
        },
        {"type": "input_file", "file_url": "https://example.com/a.pdf"},
        {"type": "input_file", "file_id": "file-abc"},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
    ]


async def test_gemini_refuses_a_file_id_and_says_to_pass_the_uri(server: Any) -> None:
    provider = GooglePlay().provider(server.url)
    try:
        with pytest.raises(ValueError, match=r"Gemini cannot take the file.*as `url=`"):
            await provider.complete(
                [user(FileBlock(file_id="files/abc", media_type="application/pdf"))]
            )
    finally:
        await provider.aclose()
