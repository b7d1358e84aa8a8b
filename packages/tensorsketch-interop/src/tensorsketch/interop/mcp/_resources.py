"""Resources and prompts of an MCP server, as plain values.

Agents often need a server's documents (resources) or its prompt templates next to its
tools; these helpers fetch them as ``str``/``bytes`` and TensorSketch ``Message`` lists, so
they drop into a system prompt or a transcript without touching SDK types.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping

import mcp_types as types

from tensorsketch.interop.mcp._session import MCPSession, RemoteSession
from tensorsketch.interop.mcp._tools import _block_text
from tensorsketch.messages import ImageBlock, Message, TextBlock

__all__ = [
    "complete",
    "get_prompt",
    "list_prompts",
    "list_resource_templates",
    "list_resources",
    "read_resource",
    "watch_resource",
]


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
        if isinstance(block, types.EmbeddedResource):
            text = _block_text(block)
            messages.append(Message(role=item.role, content=[TextBlock(text=text)]))
        elif isinstance(block, types.ImageContent):
            image = ImageBlock(data=block.data, media_type=block.mime_type)
            messages.append(Message(role=item.role, content=[image]))
        elif isinstance(block, types.TextContent):
            messages.append(Message(role=item.role, content=block.text))
        else:
            messages.append(Message(role=item.role, content=[TextBlock(text=_block_text(block))]))
    return messages


async def list_resource_templates(
    session: MCPSession | RemoteSession,
) -> list[types.ResourceTemplate]:
    """The resource templates the server lists (``uri_template`` such as ``notes://{topic}``)."""
    return await MCPSession.of(session).list_resource_templates()


async def complete(
    session: MCPSession | RemoteSession,
    argument: str,
    value: str = "",
    *,
    prompt: str | None = None,
    resource: str | None = None,
) -> list[str]:
    """The server's completions of ``argument`` of a prompt (``prompt="name"``) or a
    resource template (``resource="notes://{topic}"``), for what the user typed (``value``)."""
    if (prompt is None) == (resource is None):
        msg = "complete() needs exactly one of prompt='name' or resource='uri-template'."
        raise ValueError(msg)
    ref: types.PromptReference | types.ResourceTemplateReference
    if prompt is not None:
        ref = types.PromptReference(type="ref/prompt", name=prompt)
    else:
        ref = types.ResourceTemplateReference(type="ref/resource", uri=str(resource))
    completion = await MCPSession.of(session).complete(ref, argument, value)
    return list(completion.values)


async def watch_resource(
    session: MCPSession | RemoteSession, uri: str
) -> AsyncIterator[str | bytes | list[str | bytes]]:
    """Read ``uri`` now and again each time the server says it changed, for as long as the
    caller iterates; the subscription ends when the generator is closed. Close it in the task
    that iterates it::

        async with contextlib.aclosing(watch_resource(session, uri)) as changes:
            async for content in changes:
                ...
    """
    connection = MCPSession.of(session)
    async with connection.watch(uri) as changes:
        yield await read_resource(connection, uri)
        while True:
            await changes.get()
            yield await read_resource(connection, uri)
