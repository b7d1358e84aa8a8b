from __future__ import annotations

from typing import Annotated, Any

import pydantic
import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema
from tensorsketch.channels import MISSING
from tensorsketch.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    add_messages,
    assistant,
    system,
    tool_result,
    user,
)
from tensorsketch.serializers import JsonSerializer


def test_constructors_set_roles_and_content() -> None:
    assert system("be brief") == Message(role="system", content="be brief")
    assert user("hi").role == "user"
    call = ToolCall(id="c1", name="add", args={"a": 1})
    reply = assistant("let me add", tool_calls=[call])
    assert reply.tool_calls == [call] and reply.text == "let me add"
    result = tool_result(call, {"sum": 3, "a": 1})
    assert (result.role, result.tool_call_id, result.name) == ("tool", "c1", "add")
    assert result.content == '{"a": 1, "sum": 3}'  # sorted JSON: stable prompts
    assert tool_result("c2", "plain", name="x", is_error=True).is_error


def test_images_ride_in_content_blocks() -> None:
    picture = ImageBlock(url="https://example.com/cat.png")
    message = user("What is in this picture?", picture)
    assert message.content == [TextBlock(text="What is in this picture?"), picture]
    assert message.text == "What is in this picture?"
    assert message.images == [picture]
    inline = ImageBlock(data="iVBORw0KGgo=", media_type="image/png")
    assert user(inline).images == [inline]


def test_bad_shapes_are_refused_with_the_fix() -> None:
    with pytest.raises(pydantic.ValidationError, match="exactly one source"):
        ImageBlock()
    with pytest.raises(pydantic.ValidationError, match="exactly one source"):
        ImageBlock(url="u", data="d", media_type="image/png")
    with pytest.raises(pydantic.ValidationError, match="needs its `media_type`"):
        ImageBlock(data="d")
    with pytest.raises(pydantic.ValidationError, match="needs `tool_call_id`"):
        Message(role="tool", content="x")
    with pytest.raises(pydantic.ValidationError, match="only an assistant message"):
        Message(role="user", tool_calls=[ToolCall(id="1", name="n")])
    with pytest.raises(TypeError, match="must be str, TextBlock, ImageBlock or FileBlock"):
        user("a", 3)  # type: ignore[arg-type]


def test_tool_result_renders_models_and_blocks() -> None:
    class Weather(Schema):
        temp: int

    assert tool_result("c", Weather(temp=3)).content == '{"temp":3}'
    block = ImageBlock(url="u")
    assert tool_result("c", block).content == [block]


def test_add_messages_appends_and_replaces_by_id() -> None:
    history = [user("a"), Message(role="assistant", content="draft", id="m1")]
    merged = add_messages(history, [Message(role="assistant", content="final", id="m1"), user("b")])
    assert [m.text for m in merged] == ["a", "final", "b"]
    assert [m.text for m in history] == ["a", "draft"]  # the input list is not mutated
    assert add_messages(history, user("c"))[-1].text == "c"
    assert add_messages(history, {"role": "user", "content": "d"})[-1].text == "d"
    with pytest.raises(TypeError, match="takes Message objects"):
        add_messages(history, 42)


def test_fold_delta_reports_pure_appends_only() -> None:
    base = [user("a"), Message(role="assistant", content="x", id="m1")]
    new, appended = add_messages.fold_delta(base, [[user("b")], user("c")])
    assert [m.text for m in new] == ["a", "x", "b", "c"]
    assert appended is not None and [m.text for m in appended] == ["b", "c"]
    new, appended = add_messages.fold_delta(base, [Message(role="assistant", content="y", id="m1")])
    assert appended is None and new[1].text == "y"
    new, appended = add_messages.fold_delta(MISSING, [user("first")])
    assert [m.text for m in new] == ["first"] and appended == new


def test_messages_round_trip_the_json_serializer() -> None:
    serializer = JsonSerializer()
    message = user("look", ImageBlock(data="AAAA", media_type="image/jpeg"))
    call = assistant(tool_calls=[ToolCall(id="1", name="t", args={"k": [1, 2]})])
    assert serializer.loads(serializer.dumps([message, call])) == [message, call]


class Chat(Schema):
    messages: Annotated[list[Message], Reducer(add_messages)] = []


class Reply(Node):
    class In(Schema):
        messages: list[Message]

    class Out(Schema):
        messages: list[Message]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(messages=[assistant(f"echo {inp.messages[-1].text}")])


async def test_a_durable_checkpoint_stores_only_the_appended_messages() -> None:
    backend = InMemoryBackend()
    app = Graph(Chat).add(Reply).edge(START, "Reply").edge("Reply", END).compile()
    await app.invoke({"messages": [user("one")]}, thread_id="t", backend=backend)
    out = await app.invoke({"messages": [user("two")]}, thread_id="t", backend=backend)
    assert [m.text for m in out.messages] == ["one", "echo one", "two", "echo two"]
    stored = await backend.list_checkpoints("t")
    last = backend.serializer.loads(stored[-1].payload)
    op, written = last["changes"]["messages"]
    assert op == "append"
    assert [m.text for m in written] == ["echo two"]
