"""Shared mapping helpers: strict schemas, images, option routing, structured parsing."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tensorsketch.messages import ImageBlock, ToolCall
from tensorsketch.provider import StructuredOutputError, Usage
from tensorsketch.providers._common import (
    Draft,
    image_bytes,
    import_sdk,
    loads_args,
    route_options,
    strict_json_schema,
)
from tensorsketch.schema import Schema


class Inner(Schema):
    x: int = 1


class Outer(Schema):
    """Doc."""

    inner: Inner
    maybe: Inner | None = None
    described: Inner = Inner()


def test_strict_schema_closes_and_requires_everything() -> None:
    schema, strict = strict_json_schema(Outer.model_json_schema())
    assert strict is True
    assert schema["required"] == ["inner", "maybe", "described"]
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Inner"] == {
        "additionalProperties": False,
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "type": "object",
    }
    assert "default" not in str(schema) and "title" not in str(schema)


def test_strict_schema_leaves_the_input_alone() -> None:
    original = Outer.model_json_schema()
    before = repr(original)
    strict_json_schema(original)
    assert repr(original) == before


def test_open_mappings_cannot_be_strict() -> None:
    schema = {
        "type": "object",
        "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
    result, strict = strict_json_schema(schema)
    assert strict is False
    assert result == schema


def test_image_sources() -> None:
    data = base64.b64encode(b"img").decode()
    assert image_bytes(ImageBlock(data=data, media_type="image/webp")) == ("image/webp", data)
    assert image_bytes(ImageBlock(url=f"data:image/gif;base64,{data}")) == ("image/gif", data)
    assert image_bytes(ImageBlock(url="https://example.com/a.png")) is None


def test_route_options_sends_unknown_ones_in_the_body() -> None:
    def create(*, model: str, temperature: float = 1.0, extra_body: Any = None) -> None: ...

    request: dict[str, Any] = {"model": "m"}
    route_options(create, request, {"temperature": 0.1, "top_k": 3, "extra_body": {"a": 1}})
    assert request == {"model": "m", "temperature": 0.1, "extra_body": {"top_k": 3, "a": 1}}


def test_draft_validates_structured_output() -> None:
    draft = Draft(text=['{"x": ', "4}"], usage=Usage(output_tokens=3), model="m")
    completion = draft.finish(Inner)
    assert completion.parsed == Inner(x=4)
    assert completion.text == '{"x": 4}'


def test_draft_structured_reply_outside_the_text() -> None:
    completion = Draft(structured={"x": 2}).finish(Inner)
    assert completion.parsed == Inner(x=2)
    assert completion.text == '{"x":2}'


def test_draft_failure_carries_the_completion_and_names_the_cut() -> None:
    draft = Draft(text=['{"x": "fo'], usage=Usage(output_tokens=9), stop_reason="max_tokens")
    with pytest.raises(StructuredOutputError, match=r"cut off at `max_tokens`") as caught:
        draft.finish(Inner)
    assert caught.value.raw == '{"x": "fo'
    assert caught.value.completion is not None
    assert caught.value.completion.usage.output_tokens == 9


def test_draft_with_tool_calls_skips_validation() -> None:
    call = ToolCall(id="1", name="t", args={})
    completion = Draft(calls=[call]).finish(Inner)
    assert completion.parsed is None
    assert completion.message.tool_calls == [call]


def test_loads_args() -> None:
    assert loads_args("") == {}
    assert loads_args('{"a": 1}') == {"a": 1}
    assert loads_args("[1]") == {"_raw": "[1]"}


def test_missing_sdk_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r'pip install "tensorsketch-providers\[acme\]"'):
        import_sdk("tensorsketch_no_such_sdk", "acme")
