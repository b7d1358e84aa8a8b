"""Third-party OpenAI clients against ``openai_app`` over uvicorn on 127.0.0.1: LiteLLM (its
``openai/<model>`` route with ``api_base``), LangChain's ``ChatOpenAI`` and the ``openai`` SDK's
structured-output helpers. Each one chats, streams, answers an approval (a tool call the
client decides with a ``tool`` message) and asks for structured output (``response_format``).

The model is the fake provider. Its first answer to a structured request is prose, so a
server that ignored ``response_format`` would hand the client text that is not JSON; the
agent's structured-output path sends the validation errors back and the second answer is the
JSON the client asked for.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
import pytest
from pydantic import BaseModel

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch LiteLLM's price list
import litellm
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from tensorsketch import FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.serve import CONVERSATION_HEADER, openai_app

litellm.telemetry = False

# LiteLLM's own models warn under pydantic 2.x (a `ReadOnly` TypedDict, a field shadowing);
# pytest turns warnings into errors, and these are LiteLLM's to fix, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Items? .* `ReadOnly` qualifier:UserWarning"),
]


class Pet(BaseModel):
    name: str
    age: int


#: What the fake model says to a structured request: prose first (repaired), then the JSON.
PET_SCRIPT = ["Your pet is Rex, three years old.", '{"name": "Rex", "age": 3}']

REFUNDED: list[int] = []


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person must approve)."""
    REFUNDED.append(order)
    return f"refunded order {order}"


def _agent_server(live: Any, script: list[Any], **kw: Any) -> tuple[Any, FakeProvider]:
    provider = FakeProvider(script)
    return live(openai_app(create_agent(provider, **kw), model="bot")), provider


def _refund_server(live: Any) -> tuple[Any, FakeProvider]:
    REFUNDED.clear()
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="call_7", name="refund", args={"order": 7})]),
            "Order 7 is refunded.",
        ]
    )
    app = openai_app(create_agent(provider, tools=[refund]), model="bot", backend=InMemoryBackend())
    return live(app), provider


def _asked_for(provider: FakeProvider) -> dict[str, Any]:
    """The JSON schema the agent's model was asked to answer in (on its last call)."""
    schema = provider.calls[-1].output_schema
    assert schema is not None, "the agent was not asked for structured output"
    found: dict[str, Any] = schema.model_json_schema()
    return found


# -- LiteLLM ------------------------------------------------------------------------------------


def _litellm(server: Any, **kw: Any) -> Any:
    return litellm.completion(
        model="openai/bot", api_base=f"{server.url}/v1", api_key="unused", num_retries=0, **kw
    )


def test_litellm_chat(live: Any) -> None:
    server, provider = _agent_server(live, ["Hello from the agent."])
    reply = _litellm(server, messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "Hello from the agent."
    assert reply.choices[0].finish_reason == "stop"
    assert provider.calls[0].messages[-1].text == "hi"


def test_litellm_streaming(live: Any) -> None:
    server, _ = _agent_server(live, ["one two three four"])
    chunks = list(_litellm(server, messages=[{"role": "user", "content": "count"}], stream=True))
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 1 and "".join(pieces) == "one two three four"


def test_litellm_tool_call_answered_by_a_tool_message(live: Any) -> None:
    server, _ = _refund_server(live)
    headers = {CONVERSATION_HEADER: "litellm-refund"}
    asked = [{"role": "user", "content": "refund order 7"}]
    first = _litellm(server, messages=asked, extra_headers=headers)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and REFUNDED == []
    [call] = message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_7",
        "refund",
        {"order": 7},
    )
    history = [
        *asked,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "approve"},
    ]
    second = _litellm(server, messages=history, extra_headers=headers)
    assert second.choices[0].message.content == "Order 7 is refunded."
    assert REFUNDED == [7]


def test_litellm_structured_output(live: Any) -> None:
    server, provider = _agent_server(live, list(PET_SCRIPT))
    reply = _litellm(server, messages=[{"role": "user", "content": "my pet?"}], response_format=Pet)
    assert Pet.model_validate_json(reply.choices[0].message.content) == Pet(name="Rex", age=3)
    assert _asked_for(provider)["properties"].keys() == {"name", "age"}


# -- LangChain's ChatOpenAI ------------------------------------------------------------------------


def _chat(server: Any, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="bot", base_url=f"{server.url}/v1", api_key="unused", max_retries=0, **kw
    )


def test_langchain_chat(live: Any) -> None:
    server, _ = _agent_server(live, ["Hello from the agent."])
    reply = _chat(server).invoke("hi")
    assert isinstance(reply, AIMessage) and reply.content == "Hello from the agent."


def test_langchain_streaming(live: Any) -> None:
    server, _ = _agent_server(live, ["one two three four"])
    pieces = [chunk.content for chunk in _chat(server).stream("count") if chunk.content]
    assert len(pieces) > 1 and "".join(str(p) for p in pieces) == "one two three four"


def test_langchain_tool_call_answered_by_a_tool_message(live: Any) -> None:
    server, _ = _refund_server(live)
    chat = _chat(server, default_headers={CONVERSATION_HEADER: "langchain-refund"})
    asked = HumanMessage("refund order 7")
    first = chat.invoke([asked])
    assert isinstance(first, AIMessage) and REFUNDED == []
    [call] = first.tool_calls
    assert (call["id"], call["name"], call["args"]) == ("call_7", "refund", {"order": 7})
    second = chat.invoke([asked, first, ToolMessage("approve", tool_call_id=call["id"])])
    assert second.content == "Order 7 is refunded." and REFUNDED == [7]


def test_langchain_with_structured_output_json_schema(live: Any) -> None:
    server, provider = _agent_server(live, list(PET_SCRIPT))
    pet = _chat(server).with_structured_output(Pet).invoke("my pet?")
    assert pet == Pet(name="Rex", age=3)
    assert _asked_for(provider)["required"] == ["name", "age"]


def test_langchain_with_structured_output_json_mode(live: Any) -> None:
    server, _ = _agent_server(live, ["Rex!", '{"name": "Rex"}'])
    found = _chat(server).with_structured_output(None, method="json_mode").invoke("my pet, as JSON")
    assert found == {"name": "Rex"}


# -- the openai SDK's structured-output helpers --------------------------------------------------


def _openai(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_openai_sdk_parse(live: Any) -> None:
    server, provider = _agent_server(live, list(PET_SCRIPT))
    completion = _openai(server).chat.completions.parse(
        model="bot", messages=[{"role": "user", "content": "my pet?"}], response_format=Pet
    )
    assert completion.choices[0].message.parsed == Pet(name="Rex", age=3)
    assert _asked_for(provider)["additionalProperties"] is False, "the client's strict schema"


def test_openai_sdk_stream_with_a_response_format(live: Any) -> None:
    server, _ = _agent_server(live, list(PET_SCRIPT))
    with _openai(server).chat.completions.stream(
        model="bot", messages=[{"role": "user", "content": "my pet?"}], response_format=Pet
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == Pet(name="Rex", age=3)


def test_openai_sdk_json_object(live: Any) -> None:
    server, _ = _agent_server(live, ["Rex.", '{"pet": "Rex"}'])
    completion = _openai(server).chat.completions.create(
        model="bot",
        messages=[{"role": "user", "content": "my pet, as JSON"}],
        response_format={"type": "json_object"},
    )
    assert json.loads(completion.choices[0].message.content or "") == {"pet": "Rex"}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_tool_call_answered_by_a_tool_message(live: Any, stream: bool) -> None:
    server, _ = _refund_server(live)
    client = _openai(server)
    headers = {CONVERSATION_HEADER: f"sdk-refund-{stream}"}
    asked = [{"role": "user", "content": "refund order 7"}]
    if stream:
        with client.chat.completions.stream(
            model="bot", messages=asked, extra_headers=headers
        ) as events:
            first = events.get_final_completion()
    else:
        first = client.chat.completions.parse(model="bot", messages=asked, extra_headers=headers)
    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "refund" and REFUNDED == []
    history = [
        *asked,
        {"role": "assistant", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "approve"},
    ]
    second = client.chat.completions.create(model="bot", messages=history, extra_headers=headers)  # type: ignore[arg-type]
    assert second.choices[0].message.content == "Order 7 is refunded." and REFUNDED == [7]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_responses_parse(live: Any, stream: bool) -> None:
    server, provider = _agent_server(live, list(PET_SCRIPT))
    client = _openai(server)
    if stream:
        with client.responses.stream(model="bot", input="my pet?", text_format=Pet) as events:
            deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
            response = events.get_final_response()
        assert deltas == ['{"name":"Rex","age":3}'], "only the validated answer is streamed"
    else:
        response = client.responses.parse(model="bot", input="my pet?", text_format=Pet)
    assert response.output_parsed == Pet(name="Rex", age=3)
    assert _asked_for(provider)["required"] == ["name", "age"]
