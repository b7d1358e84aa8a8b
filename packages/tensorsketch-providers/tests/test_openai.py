"""What only the OpenAI mapping does: strict JSON-schema output, OpenAI-compatible servers,
text-only tool messages. The shared behaviour is in ``test_conformance.py``."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from vendor_plays import OpenAIPlay  # type: ignore[import-not-found]

from tensorsketch.errors import ValidationError
from tensorsketch.messages import ImageBlock, TextBlock, ToolCall, assistant, tool_result, user
from tensorsketch.provider import AuthenticationError
from tensorsketch.providers.openai import OpenAIProvider
from tensorsketch.schema import Schema
from tensorsketch.tools import tool


class Address(Schema):
    street: str
    city: str | None = None


class Person(Schema):
    """A person and where they live."""

    name: str
    age: int = 0
    home: Address
    nicknames: list[str] = []


class Scores(Schema):
    by_name: dict[str, int]


@tool
def snapshot(url: str) -> str:
    """Take a screenshot."""
    return url


@pytest.fixture
async def play() -> Any:
    play = OpenAIPlay()
    yield play
    for provider in play.created:
        await provider.aclose()


async def test_strict_response_format(server: Any, play: Any) -> None:
    server.queue(
        play.structured(
            {"name": "Ada", "age": 36, "home": {"street": "1 Way", "city": None}, "nicknames": []}
        )
    )
    provider = play.provider(server.url)

    completion = await provider.complete([user("Who?")], output_schema=Person)

    response_format = server.last.body["response_format"]
    assert response_format["type"] == "json_schema"
    spec = response_format["json_schema"]
    assert spec["name"] == "Person"
    assert spec["strict"] is True
    assert spec["description"] == "A person and where they live."
    schema = spec["schema"]
    # Strict mode: every object closed, every property required, no defaults.
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["name", "age", "home", "nicknames"]
    address = schema["$defs"]["Address"]
    assert address["additionalProperties"] is False
    assert address["required"] == ["street", "city"]
    assert "default" not in json.dumps(schema)
    assert completion.parsed == Person(name="Ada", age=36, home=Address(street="1 Way"))


async def test_a_free_form_mapping_is_sent_without_strict(server: Any, play: Any) -> None:
    server.queue(play.structured({"by_name": {"a": 1}}))
    provider = play.provider(server.url)

    completion = await provider.complete([user("Scores?")], output_schema=Scores)

    spec = server.last.body["response_format"]["json_schema"]
    assert spec["strict"] is False
    assert spec["schema"]["properties"]["by_name"]["additionalProperties"] == {"type": "integer"}
    assert completion.parsed == Scores(by_name={"a": 1})


async def test_invalid_json_reply_is_a_validation_error(server: Any, play: Any) -> None:
    server.queue(play.text("Sure! Here it is: {name: Ada"))
    provider = play.provider(server.url)
    with pytest.raises(ValidationError, match="not valid JSON"):
        await provider.complete([user("Who?")], output_schema=Person)


async def test_compatible_server_without_a_key(
    server: Any, play: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.queue(play.text("local answer"))
    provider = OpenAIProvider(
        model="llama3.2",
        base_url=f"{server.url}/v1",
        max_retries=0,
        max_tokens_field="max_tokens",
        provider_name="ollama",
    )
    try:
        completion = await provider.complete([user("hi")], max_tokens=64)
    finally:
        await provider.aclose()

    body = server.last.body
    assert server.last.path == "/v1/chat/completions"
    assert body["model"] == "llama3.2"
    assert body["max_tokens"] == 64
    assert "max_completion_tokens" not in body
    assert completion.text == "local answer"
    assert provider.provider_name == "ollama"


def test_no_key_and_no_server_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        OpenAIProvider(model="gpt-4o")


def test_max_tokens_field_is_checked() -> None:
    with pytest.raises(ValueError, match="max_tokens_field"):
        OpenAIProvider(api_key="k", max_tokens_field="limit")  # type: ignore[arg-type]


async def test_images_from_tools_follow_the_tool_messages(server: Any, play: Any) -> None:
    png = base64.b64encode(b"shot").decode()
    call = ToolCall(id="call_1", name="snapshot", args={"url": "https://x"})
    server.queue(play.text("ok"))
    provider = play.provider(server.url)

    await provider.complete(
        [
            user("Look."),
            assistant(tool_calls=[call]),
            tool_result(
                call, [TextBlock(text="Here:"), ImageBlock(data=png, media_type="image/png")]
            ),
            user("Well?"),
        ],
        tools=[snapshot],
    )

    messages = server.last.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "user"]
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "snapshot", "arguments": '{"url": "https://x"}'},
            }
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Here:"}
    assert messages[3]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    ]
    assert messages[4] == {"role": "user", "content": "Well?"}


async def test_refusal_is_kept_as_text(server: Any, play: Any) -> None:
    reply = play.text("")
    reply.body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "refusal": "I can't help with that.",
    }
    server.queue(reply)
    provider = play.provider(server.url)

    completion = await provider.complete([user("?")])
    assert completion.text == "I can't help with that."


async def test_broken_tool_arguments_reach_the_agent_for_repair(server: Any, play: Any) -> None:
    reply = play.tool_calls([ToolCall(id="call_1", name="snapshot", args={})])
    reply.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"url": '
    server.queue(reply)
    provider = play.provider(server.url)

    completion = await provider.complete([user("?")], tools=[snapshot])

    [call] = completion.message.tool_calls
    assert call.args == {"_raw": '{"url": '}


def test_the_documented_local_server_line_works_without_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = OpenAIProvider(base_url="http://localhost:11434/v1")
    assert provider.model == "gpt-4o"
    assert str(provider.client.base_url).startswith("http://localhost:11434/v1")


async def test_an_empty_assistant_turn_has_empty_content(server: Any, play: Any) -> None:
    server.queue(play.text("ok"))
    provider = play.provider(server.url)
    await provider.complete([user("a"), assistant(""), user("b")])
    assert server.last.body["messages"][1] == {"role": "assistant", "content": ""}
