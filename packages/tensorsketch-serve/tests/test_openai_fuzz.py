"""Property-based bad input: generated request bodies never get a 5xx, and every error body is
OpenAI-shaped. The requests go over HTTP to uvicorn, as a client's would.

(schemathesis needs an OpenAPI description, which this API does not publish; hypothesis
generates the bodies directly, mixing near-valid requests with arbitrary JSON.)
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.serve import CONVERSATION_HEADER, openai_app


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return "ok"


def _decide(messages: list[Any], tools: list[Any]) -> Any:
    """Echo the last user text (a deterministic model that never runs out)."""
    last = next((m.text for m in reversed(messages) if m.role == "user"), "")
    return last or "(nothing)"


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
any_json = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
roles = (
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
    | any_json
)
parts = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio", "file"]) | any_json},
    optional={
        "text": st.text(max_size=30) | any_json,
        "image_url": st.fixed_dictionaries(
            {
                "url": st.sampled_from(
                    [
                        "https://e.x/a.png",
                        "data:image/png;base64,iVBORw0=",
                        "data:image/png;base64,@@",
                        "ftp://x",
                    ]
                )
                | any_json
            }
        )
        | any_json,
    },
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(max_size=8) | any_json,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["refund", "nope"]) | any_json,
                    "arguments": st.sampled_from(['{"order": 1}', "[]", "{", '"x"']) | any_json,
                }
            )
            | any_json,
        }
    ),
    max_size=2,
)
message = st.fixed_dictionaries(
    {"role": roles},
    optional={
        "content": st.text(max_size=40) | st.lists(parts, max_size=3) | any_json,
        "tool_calls": tool_calls | any_json,
        "tool_call_id": st.text(max_size=8) | any_json,
        "name": st.text(max_size=8),
    },
)
body = st.one_of(
    any_json,
    st.fixed_dictionaries(
        {
            "model": st.sampled_from(["bot", "gpt-4o", ""]) | any_json,
            "messages": st.lists(message, max_size=5) | any_json,
        },
        optional={
            "stream": st.booleans() | any_json,
            "stream_options": st.fixed_dictionaries(
                {}, optional={"include_usage": st.booleans() | any_json}
            )
            | any_json,
            "n": st.integers(-1, 3) | any_json,
            "metadata": st.dictionaries(
                st.sampled_from(["conversation_id", "k"]),
                st.text(max_size=12) | any_json,
                max_size=2,
            )
            | any_json,
            "temperature": any_json,
            "tools": any_json,
            "user": any_json,
        },
    ),
)
conversation = st.none() | st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30
)


@pytest.fixture(scope="module")
def server(live_module: Any) -> Any:
    agent = create_agent(FakeProvider(policy=_decide), tools=[refund])
    return live_module(openai_app(agent, model="bot", max_body_bytes=20_000))


#: Statuses the examples got, so the last test can tell the fuzzer reached the happy paths too.
SEEN: set[int] = set()


def _check_error(response: httpx.Response, text: str) -> None:
    SEEN.add(response.status_code)
    assert response.status_code < 500, (response.status_code, text)
    if response.status_code >= 400:
        error = json.loads(text)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]


_HI = [{"role": "user", "content": "hi"}]


# The happy paths and each refusal, always run besides the generated bodies:
@example(
    payload={"model": "bot", "messages": _HI}, conversation_id=None, endpoint="chat/completions"
)
@example(
    payload={
        "model": "bot",
        "messages": _HI,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    conversation_id="fuzz-c1",
    endpoint="chat/completions",
)
@example(
    payload={"model": "bot", "input": "hi", "stream": True},
    conversation_id=None,
    endpoint="responses",
)
@example(
    payload={"model": "gpt-4o", "messages": _HI}, conversation_id=None, endpoint="chat/completions"
)
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    payload=body,
    conversation_id=conversation,
    endpoint=st.sampled_from(["chat/completions", "responses"]),
)
def test_generated_bodies_never_get_a_server_error(
    server: Any, payload: Any, conversation_id: str | None, endpoint: str
) -> None:
    headers = {CONVERSATION_HEADER: conversation_id} if conversation_id else {}
    if endpoint == "responses" and isinstance(payload, dict) and "messages" in payload:
        payload = {**payload, "input": payload.pop("messages")}
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{server.url}/v1/{endpoint}", json=payload, headers=headers
        ) as response,
    ):
        text = response.read().decode()
    _check_error(response, text)
    if response.status_code == 200 and response.headers["content-type"].startswith(
        "text/event-stream"
    ):
        for line in text.splitlines():
            if line.startswith("data: {"):
                frame = json.loads(line[6:])
                assert "error" not in frame or frame["error"]["type"] != "server_error", frame
                assert frame.get("type") != "response.failed", frame


def test_the_generated_bodies_reached_success_and_each_kind_of_refusal() -> None:
    """Runs after the property (file order): it exercised more than the first check."""
    if not SEEN:
        pytest.skip("the property test did not run in this session (-k?)")
    assert {200, 400, 404} <= SEEN, SEEN


def _ask_refund(messages: list[Any], tools: list[Any]) -> Any:
    """Asks to refund order 1 on a user's turn; says what the tool answered after it."""
    if messages[-1].role == "tool":
        return f"tool said: {messages[-1].text}"
    return assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": 1})])


@pytest.fixture(scope="module")
def waiting_server(live_module: Any) -> Any:
    agent = create_agent(FakeProvider(policy=_ask_refund), tools=[refund])
    return live_module(openai_app(agent, model="bot"))


decision_words = st.sampled_from(["approve", "reject", "yes", "No", "maybe", "", " : "])
decision_text = st.one_of(
    st.text(max_size=30),
    st.builds(lambda w, r: f"{w}: {r}", decision_words, st.text(max_size=12)),
    st.builds(json.dumps, any_json),
    st.builds(
        json.dumps,
        st.fixed_dictionaries(
            {"approved": st.booleans() | any_json},
            optional={"reason": any_json, "digest": any_json, "call_id": any_json, "x": any_json},
        ),
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(content=decision_text)
def test_a_generated_decision_on_a_waiting_call_never_gets_a_server_error(
    waiting_server: Any, content: str
) -> None:
    """A conversation waiting on an approval, answered with any tool message: a decision or
    a 400 naming the call, never a 5xx."""
    conversation = {CONVERSATION_HEADER: f"decide-{uuid.uuid4().hex[:12]}"}
    url = f"{waiting_server.url}/v1/chat/completions"
    with httpx.Client(timeout=30) as client:
        asked = client.post(url, json={"model": "bot", "messages": _HI}, headers=conversation)
        assert asked.status_code == 200, asked.text
        call = asked.json()["choices"][0]["message"]
        history = [*_HI, call, {"role": "tool", "tool_call_id": "call_1", "content": content}]
        answered = client.post(
            url, json={"model": "bot", "messages": history}, headers=conversation
        )
    _check_error(answered, answered.text)
    if answered.status_code == 400:
        assert "call_1" in answered.json()["error"]["message"]
