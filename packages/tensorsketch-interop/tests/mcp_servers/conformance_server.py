"""The server the MCP conformance suite drives: the fixtures its scenarios name
(`test_simple_text`, `test://static-text`, `test_simple_prompt`, ...), written with
TensorSketch's public serving API only. Served over HTTP by test_mcp_conformance.py."""

from __future__ import annotations

import base64
from typing import Any

from tensorsketch import Tool, tool
from tensorsketch.interop.mcp import mcp_app
from tensorsketch.messages import ImageBlock, TextBlock

#: A 1x1 red PNG.
RED_PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


@tool
def test_simple_text() -> str:
    """Return a fixed sentence."""
    return "This is a simple text response for testing."


@tool
def test_image_content() -> ImageBlock:
    """Return one image."""
    return ImageBlock(data=RED_PIXEL, media_type="image/png")


@tool
def test_multiple_content_types() -> list[Any]:
    """Return text and an image."""
    return [TextBlock(text="Multiple content types test:"), ImageBlock(data=RED_PIXEL, media_type="image/png")]


@tool
def test_error_handling() -> str:
    """Always fail."""
    raise RuntimeError("This tool intentionally returns an error for testing")


def _schema_tool() -> Tool:
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": False,
    }

    async def run(args: dict[str, Any]) -> str:
        return f"got {sorted(args)}"

    return Tool.from_schema("json_schema_2020_12_tool", "A 2020-12 schema kept as written.", schema, run)


TOOLS: list[Any] = [
    test_simple_text,
    test_image_content,
    test_multiple_content_types,
    test_error_handling,
    _schema_tool(),
]

app = mcp_app(TOOLS, "tensorsketch-conformance")
_ = base64
