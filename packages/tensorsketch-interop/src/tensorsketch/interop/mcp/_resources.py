"""Resources and prompts of an MCP server, as plain values.

Agents often need a server's documents (resources) or its prompt templates next to its
tools; these helpers fetch them as ``str``/``bytes`` and TensorSketch ``Message`` lists, so
they drop into a system prompt or a transcript without touching SDK types.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import mcp_types as types

from tensorsketch.interop.mcp._session import MCPSession, RemoteSession
from tensorsketch.interop.mcp._tools import _block_text
from tensorsketch.messages import ImageBlock, Message, TextBlock

__all__ = ["get_prompt", "list_prompts", "list_resources", "read_resource"]


async def list_resources(session: MCPSession | RemoteSession) -> list[types.Resource]:
    """The resources the server lists (``uri``, ``name``, ``description``, ``mime_type``)."""
    return await MCPSession.of(session).list_resources()


async def read_resource(
    session: MCPSession | RemoteSession, uri: str
) -> str | bytes | list[str | bytes]:
    """Read a resource: its text (``str``), its bytes for a binary resource, or a list
    when the server returns several parts of mixed kinds."""
    result = await MCPSession.of(session).read_resource(uri)
    parts: list[str | bytes] = [
        part.text if isinstance(part, types.TextResourceContents) else base64.b64decode(part.blob)
        for part in result.contents
    ]
    if all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    if len(parts) == 1:
        return parts[0]
    return parts


async def list_prompts(session: MCPSession | RemoteSession) -> list[types.Prompt]:
    """The prompt templates the server offers (``name``, ``description``, ``arguments``)."""
    return await MCPSession.of(session).list_prompts()


async def get_prompt(
    session: MCPSession | RemoteSession,
    name: str,
    arguments: Mapping[str, str] | None = None,
) -> list[Message]:
    """Render a prompt template into TensorSketch messages (``user``/``assistant`` turns),
    ready to prepend to an agent's ``messages``."""
    result = await MCPSession.of(session).get_prompt(name, arguments)
    messages: list[Message] = []
    for item in result.messages:
        block = item.content
        if isinstance(block, types.ImageContent):
            image = ImageBlock(data=block.data, media_type=block.mime_type)
            messages.append(Message(role=item.role, content=[image]))
        elif isinstance(block, types.TextContent):
            messages.append(Message(role=item.role, content=block.text))
        else:
            messages.append(Message(role=item.role, content=[TextBlock(text=_block_text(block))]))
    return messages
