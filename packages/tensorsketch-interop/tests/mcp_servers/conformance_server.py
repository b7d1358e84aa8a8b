"""The server the MCP conformance suite drives: the fixtures its scenarios name
(`test_simple_text`, `test://static-text`, `test_simple_prompt`, ...), written with
TensorSketch's public serving API only. Served over HTTP by test_mcp_conformance.py."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import mcp_types as types

from tensorsketch import Context, Tool, tool
from tensorsketch.interop.mcp import log, mcp_app, prompt, report_progress, resource
from tensorsketch.messages import ImageBlock, Message, TextBlock

#: A 1x1 red PNG.
RED_PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def _silent_wav() -> str:
    """A valid 8 kHz mono WAV of 8 silent samples."""
    samples = b"\x80" * 8
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 8000, 8000, 1, 8) + b"data"
    return base64.b64encode(header + struct.pack("<I", len(samples)) + samples).decode()


EMBEDDED = types.EmbeddedResource(
    type="resource",
    resource=types.TextResourceContents(
        uri="test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    ),
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
def test_audio_content() -> types.AudioContent:
    """Return a short audio clip."""
    return types.AudioContent(type="audio", data=_silent_wav(), mime_type="audio/wav")


@tool
def test_embedded_resource() -> types.EmbeddedResource:
    """Return an embedded resource."""
    return EMBEDDED


@tool
def test_multiple_content_types() -> list[Any]:
    """Return text, an image and an embedded resource."""
    return [
        TextBlock(text="Multiple content types test:"),
        ImageBlock(data=RED_PIXEL, media_type="image/png"),
        EMBEDDED,
    ]


@tool
def test_error_handling() -> str:
    """Always fail."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@tool
async def test_tool_with_logging() -> str:
    """Send three log messages while running."""
    await log("info", "Tool execution started")
    await asyncio.sleep(0.05)
    await log("info", "Tool processing data")
    await asyncio.sleep(0.05)
    await log("info", "Tool execution completed")
    return "Tool with logging executed successfully"


@tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Report progress three times, through the ctx a tool is handed."""
    for done in (0, 50, 100):
        await ctx.emit("progress", {"progress": done, "total": 100, "message": f"{done}%"})
        await asyncio.sleep(0.05)
    await report_progress(100, 100, "done")
    return "Tool with progress executed successfully"


@tool
def test_reconnection() -> str:
    """Answer at once (the suite's SSE polling scenario calls it)."""
    return "Reconnection test completed successfully"


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

    return Tool.from_schema(
        "json_schema_2020_12_tool", "A 2020-12 schema kept as written.", schema, run
    )


@resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed binary resource."""
    return base64.b64decode(RED_PIXEL)


@resource(
    "test://template/{id}/data", mime_type="application/json", complete={"id": ["123", "456"]}
)
def template_data(id: str) -> str:
    """Data for one id."""
    return f'{{"id": "{id}", "templateTest": true, "data": "Data for ID: {id}"}}'


@resource("test://watched-resource", mime_type="text/plain")
def watched() -> str:
    """A resource clients subscribe to."""
    return "Watched resource content"


@prompt
def test_simple_prompt() -> str:
    """A prompt without arguments."""
    return "This is a simple prompt for testing."


@prompt(complete={"arg1": ["paris", "park", "party"]})
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with two arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@prompt
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:
    """A prompt that embeds a resource."""
    embedded = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        ),
    )
    return [
        types.PromptMessage(role="user", content=embedded),
        "Please process the embedded resource above.",
    ]


@prompt
def test_prompt_with_image() -> list[Any]:
    """A prompt with an image."""
    return [
        Message(role="user", content=[ImageBlock(data=RED_PIXEL, media_type="image/png")]),
        "Please analyze the image above.",
    ]


TOOLS: list[Any] = [
    test_simple_text,
    test_image_content,
    test_audio_content,
    test_embedded_resource,
    test_multiple_content_types,
    test_error_handling,
    test_tool_with_logging,
    test_tool_with_progress,
    test_reconnection,
    _schema_tool(),
]
RESOURCES = [static_text, static_binary, template_data, watched]
PROMPTS = [
    test_simple_prompt,
    test_prompt_with_arguments,
    test_prompt_with_embedded_resource,
    test_prompt_with_image,
]

app = mcp_app(TOOLS, "tensorsketch-conformance", resources=RESOURCES, prompts=PROMPTS)
