"""``AnthropicProvider``: Claude through the official ``anthropic`` SDK (Messages API).

Mapping notes:

* System messages become the top-level ``system`` blocks; tool results become ``tool_result``
  blocks in a user turn (consecutive results share one turn, as the API requires).
* Thinking blocks (with ``model_options={"thinking": {...}}``) come back as the message's
  ``reasoning`` (text and signature; ``redacted_thinking`` as ``redacted``), are kept in the
  transcript and sent back first in their assistant turn, as the API requires for tool use.
  Their tokens are in ``output_tokens``, as Anthropic bills them.
* Structured output uses a forced tool named ``respond`` whose input schema is the
  ``output_schema``; its input is the answer. With other tools present the model may call
  those first (``tool_choice: any``), and ``respond`` ends the loop.
* With ``cache_prefix=True`` the stable prefix — the tool list and the system prompt — carries
  ``cache_control`` breakpoints, so repeated calls of an agent loop read it from the prompt
  cache (reported as ``Usage.cache_read_tokens`` / ``cache_write_tokens``). Tool schemas are
  serialized with sorted keys, so the prefix is byte-stable from call to call.
* With ``cache_conversation=True`` the history is cached too, with rolling breakpoints
  within the API's four: one on the end of the request (written now, read by the next call)
  and one on the end of the previous request (the turn before the latest assistant reply),
  so each call reads everything up to its last turns from the cache even when a turn adds
  many blocks. ``cache_ttl="1h"`` asks for the one-hour cache (``Usage.cache_write_1h_tokens``
  counts its writes, which cost more).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tensorsketch.messages import FileBlock, ImageBlock, Message, Reasoning, TextBlock, ToolCall
from tensorsketch.provider import (
    AuthenticationError,
    Capabilities,
    Completion,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tensorsketch.providers._base import SDKProvider, WholeReply
from tensorsketch.providers._common import (
    Draft,
    check_tools,
    content_blocks,
    image_bytes,
    import_sdk,
    loads_args,
    output_json_schema,
    refuse_file,
    route_options,
)
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

__all__ = ["RESPOND_TOOL", "AnthropicProvider"]

_sdk = import_sdk("anthropic", "anthropic")

#: The name of the forced tool that carries structured output.
RESPOND_TOOL = "respond"
_EPHEMERAL = {"type": "ephemeral"}
#: The beta that lets a ``document`` name a file uploaded to Anthropic's Files API.
FILES_BETA = "files-api-2025-04-14"
_PROVIDER = "anthropic"
_OPTION_ALIASES = {"stop": "stop_sequences"}
_PLACEHOLDER_KEY = "not-needed"


def _has_credentials(client: Any) -> bool:
    """Whether the SDK client found a key, a token or a credentials provider (a profile)."""
    found = (getattr(client, name, None) for name in ("api_key", "auth_token", "credentials"))
    return any(value is not None for value in found)


class AnthropicProvider(SDKProvider):
    """Claude models through the Messages API.

    :param model: the model id, e.g. ``"claude-sonnet-4-6"``.
    :param api_key: defaults to the ``ANTHROPIC_API_KEY`` environment variable.
    :param base_url: another endpoint speaking the Messages API (a proxy, a gateway).
    :param client: a ready ``anthropic.AsyncAnthropic`` to use instead of building one.
    :param max_retries: retries the SDK itself makes (it honours ``retry-after``); set 0 when
        a ``RetryMiddleware`` or a fallback chain does the retrying.
    :param timeout: seconds per request.
    :param cache_prefix: mark the tools and system prompt as a prompt-cache prefix.
    :param cache_conversation: also cache the growing history (rolling breakpoints).
    :param cache_ttl: ``"5m"`` (the default) or ``"1h"``: how long cached prefixes live.
    """

    provider_name = "anthropic"
    _NAME = "AnthropicProvider"
    _CAPABILITIES = Capabilities(tools=True, strict_json=False, streaming=True, vision=True)

    def __init__(
        self,
        model: str = "claude-sonnet-4-6",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        cache_prefix: bool = True,
        cache_conversation: bool = True,
        cache_ttl: Literal["5m", "1h"] = "5m",
    ) -> None:
        self._check_model(model)
        if cache_ttl not in ("5m", "1h"):
            msg = f"AnthropicProvider(cache_ttl=...) must be '5m' or '1h', got {cache_ttl!r}."
            raise ValueError(msg)
        self.model = model
        self.cache_prefix = cache_prefix
        self.cache_conversation = cache_conversation
        self.cache_ttl = cache_ttl
        self._mark: dict[str, str] = (
            dict(_EPHEMERAL) if cache_ttl == "5m" else {**_EPHEMERAL, "ttl": "1h"}
        )
        if self._adopt_client(client, api_key=api_key, base_url=base_url):
            return
        settings: dict[str, Any] = {
            "base_url": base_url,
            "max_retries": max_retries,
            "timeout": timeout,
        }
        self._client = _sdk.AsyncAnthropic(api_key=api_key, **settings)
        if not _has_credentials(self._client):
            # Said now, as OpenAI and Google do, not by the SDK's TypeError at the first call.
            if base_url is None:
                msg = (
                    "no Anthropic API key: set the `ANTHROPIC_API_KEY` environment variable "
                    "or pass `AnthropicProvider(api_key=...)` (a gateway at `base_url=` that "
                    "needs no key works without one)."
                )
                raise AuthenticationError(msg, provider=self.provider_name, model=model)
            # A gateway may not need a key; the SDK refuses to send a request without one.
            self._client = _sdk.AsyncAnthropic(api_key=_PLACEHOLDER_KEY, **settings)

    # -- calls ---------------------------------------------------------------------------------

    async def _send(self, request: dict[str, Any]) -> Any:
        return await self._client.messages.create(**request)

    async def _stream(
        self, request: dict[str, Any], output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        reply = _StreamedReply(Draft(model=self.model), structured=output_schema is not None)
        opening = functools.partial(self._client.messages.create, **request, stream=True)
        async for event in self._events(opening):
            if isinstance(event, WholeReply):
                async for item in self._whole(event, _sdk.types.Message, output_schema):
                    yield item
                return
            delta = reply.feed(event)
            if delta is not None:
                yield delta
        if not reply.ended:
            raise self._cut_off("`message_delta` with its stop reason")
        yield reply.finish(output_schema)

    # -- mapping: ours -> Messages API -------------------------------------------------------

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The keyword arguments for ``client.messages.create``."""
        tool_list = check_tools(tools, reserved=RESPOND_TOOL if output_schema else None)
        system_parts: list[str] = []
        turns: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "system":
                if message.text:
                    system_parts.append(message.text)
                continue
            role, blocks = _to_blocks(message)
            if not blocks:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": turns,
        }
        if system_parts:
            system: list[dict[str, Any]] = [{"type": "text", "text": t} for t in system_parts]
            if self.cache_prefix:
                system[-1]["cache_control"] = dict(self._mark)
            request["system"] = system
        definitions: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.json_schema()}
            for t in tool_list
        ]
        if output_schema is not None:
            definitions.append(
                {
                    "name": RESPOND_TOOL,
                    "description": (
                        "Give your final answer by calling this tool; its input is the answer."
                    ),
                    "input_schema": output_json_schema(output_schema),
                }
            )
            request["tool_choice"] = (
                {"type": "any"} if tool_list else {"type": "tool", "name": RESPOND_TOOL}
            )
        if definitions:
            if self.cache_prefix:
                definitions[-1]["cache_control"] = dict(self._mark)
            request["tools"] = definitions
        if self.cache_conversation:
            used = (self.cache_prefix and bool(system_parts)) + (
                self.cache_prefix and bool(definitions)
            )
            _mark_history(turns, self._mark, _BREAKPOINTS - used)
        route_options(
            self._client.messages.create,
            request,
            {_OPTION_ALIASES.get(key, key): value for key, value in options.items()},
        )
        if any(_names_uploaded_file(m) for m in messages):
            headers = dict(request.get("extra_headers") or {})
            betas = [b for b in str(headers.get("anthropic-beta", "")).split(",") if b]
            headers["anthropic-beta"] = ",".join([*betas, FILES_BETA])
            request["extra_headers"] = headers
        return request

    # -- mapping: Messages API -> ours -------------------------------------------------------

    def parse_response(self, response: Any, output_schema: type[Schema] | None) -> Completion:
        """A ``Message`` from the SDK as a :class:`Completion`."""
        draft = Draft(model=getattr(response, "model", None) or self.model)
        for block in response.content:
            if block.type == "text":
                draft.text.append(block.text)
            elif block.type == "thinking":
                draft.reasoning.append(
                    Reasoning(provider=_PROVIDER, text=block.thinking, signature=block.signature)
                )
            elif block.type == "redacted_thinking":
                draft.reasoning.append(Reasoning(provider=_PROVIDER, redacted=block.data))
            elif block.type == "tool_use":
                args = block.input if isinstance(block.input, dict) else {}
                if output_schema is not None and block.name == RESPOND_TOOL:
                    draft.structured = args
                else:
                    draft.calls.append(ToolCall(id=block.id, name=block.name, args=args))
        usage = response.usage
        draft.usage = Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
            cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
            cache_write_1h_tokens=_written_1h(usage),
        )
        draft.stop_reason = _stop_reason(response.stop_reason, draft)
        return draft.finish(output_schema)


@dataclass
class _Block:
    """A content block being streamed: text, a tool call, or the ``respond`` answer."""

    kind: str
    ordinal: int = -1
    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    signature: str | None = None


@dataclass
class _StreamedReply:
    """A Messages API stream being assembled: one :meth:`feed` per event, then :meth:`finish`.

    Each event gives at most one delta, yielded as it arrives; tool arguments and the
    ``respond`` answer are parsed only at the end, once their JSON fragments are complete.
    """

    draft: Draft
    structured: bool  # a "respond" tool call is the answer, not a call to run
    blocks: dict[int, _Block] = field(default_factory=dict)  # by the stream's block index
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    output_tokens: int = 0
    #: The stop reason arrived (``message_delta``) or the stream closed (``message_stop``): a
    #: stream that ends before either was cut off.
    ended: bool = False

    def feed(self, event: Any) -> StreamDelta | None:
        """Take one stream event; the delta to show for it, if any."""
        kind = event.type
        if kind == "message_start":
            self._start(event.message)
        elif kind == "content_block_start":
            return self._open_block(event)
        elif kind == "content_block_delta":
            return self._extend_block(event)
        elif kind == "message_delta":
            self._end(event)
        elif kind == "message_stop":
            self.ended = True
        return None

    def _start(self, message: Any) -> None:
        self.draft.model = message.model or self.draft.model
        usage = message.usage
        self.input_tokens = usage.input_tokens or 0
        self.cache_read = usage.cache_read_input_tokens or 0
        self.cache_write = usage.cache_creation_input_tokens or 0
        self.cache_write_1h = _written_1h(usage)
        self.output_tokens = usage.output_tokens or 0

    def _open_block(self, event: Any) -> StreamDelta | None:
        block = event.content_block
        if block.type == "thinking":
            entry = _Block("thinking", signature=getattr(block, "signature", None) or None)
            entry.fragments.append(getattr(block, "thinking", "") or "")
            self.blocks[event.index] = entry
        elif block.type == "redacted_thinking":
            self.blocks[event.index] = _Block("redacted", fragments=[block.data])
        elif block.type == "text":
            self.blocks[event.index] = _Block("text")
            if block.text:
                self.draft.text.append(block.text)
                return TextDelta(block.text)
        elif block.type == "tool_use":
            if self.structured and block.name == RESPOND_TOOL:
                self.blocks[event.index] = _Block("respond", id=block.id, name=block.name)
            else:
                ordinal = sum(1 for b in self.blocks.values() if b.kind == "tool")
                self.blocks[event.index] = _Block("tool", ordinal, block.id, block.name)
                return ToolCallDelta(index=ordinal, id=block.id, name=block.name)
        return None

    def _extend_block(self, event: Any) -> StreamDelta | None:
        entry = self.blocks.get(event.index)
        delta = event.delta
        if entry is None:
            return None
        if delta.type == "thinking_delta" and entry.kind == "thinking":
            entry.fragments.append(delta.thinking)
            return ReasoningDelta(delta.thinking) if delta.thinking else None
        if delta.type == "signature_delta" and entry.kind == "thinking":
            entry.signature = delta.signature
            return None
        if delta.type == "text_delta" and entry.kind == "text":
            self.draft.text.append(delta.text)
            return TextDelta(delta.text)
        if delta.type == "input_json_delta":
            entry.fragments.append(delta.partial_json)
            if entry.kind == "respond":
                return TextDelta(delta.partial_json)
            return ToolCallDelta(index=entry.ordinal, arguments=delta.partial_json)
        return None

    def _end(self, event: Any) -> None:
        """``message_delta``: the stop reason and the final usage (a count left out keeps its
        value from ``message_start``)."""
        self.draft.stop_reason = event.delta.stop_reason or self.draft.stop_reason
        self.ended = self.ended or self.draft.stop_reason is not None
        usage = event.usage
        self.output_tokens = usage.output_tokens or self.output_tokens
        self.input_tokens = getattr(usage, "input_tokens", None) or self.input_tokens
        self.cache_read = getattr(usage, "cache_read_input_tokens", None) or self.cache_read
        self.cache_write = getattr(usage, "cache_creation_input_tokens", None) or self.cache_write
        self.cache_write_1h = _written_1h(usage) or self.cache_write_1h

    def finish(self, output_schema: type[Schema] | None) -> Completion:
        """Parse the finished blocks, in stream order, into the completion."""
        draft = self.draft
        for entry in (self.blocks[i] for i in sorted(self.blocks)):
            text = "".join(entry.fragments)
            if entry.kind == "thinking":
                draft.reasoning.append(
                    Reasoning(provider=_PROVIDER, text=text, signature=entry.signature)
                )
            elif entry.kind == "redacted":
                draft.reasoning.append(Reasoning(provider=_PROVIDER, redacted=text))
            elif entry.kind == "tool":
                args = loads_args(text)
                draft.calls.append(ToolCall(id=entry.id, name=entry.name, args=args))
            elif entry.kind == "respond":
                self._take_answer(text)
        draft.usage = Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
            cache_write_1h_tokens=self.cache_write_1h,
        )
        draft.stop_reason = _stop_reason(draft.stop_reason, draft)
        return draft.finish(output_schema)

    def _take_answer(self, text: str) -> None:
        """The ``respond`` call's input is the structured answer."""
        try:
            value = json.loads(text or "{}")
        except ValueError:
            value = None
        if isinstance(value, dict):
            self.draft.structured = value
        else:  # let validation report the broken JSON as it was sent
            self.draft.text = [text]


def _stop_reason(raw: str | None, draft: Draft) -> str | None:
    # The forced "respond" call is the answer, not a tool to run.
    if raw == "tool_use" and not draft.calls and draft.structured is not None:
        return "end_turn"
    return raw


#: The most ``cache_control`` breakpoints one request may carry.
_BREAKPOINTS = 4


def _mark_history(turns: list[dict[str, Any]], mark: dict[str, str], room: int) -> None:
    """Put up to ``room`` (at most two) cache breakpoints on the history: the end of the
    request, and the end of the previous request — the turn before the latest assistant
    turn — so the next call reads this one's prefix and this call reads the last one's."""
    if room <= 0 or not turns:
        return
    ends = [len(turns) - 1]
    last_reply = next(
        (i for i in range(len(turns) - 1, -1, -1) if turns[i]["role"] == "assistant"), None
    )
    if last_reply is not None and last_reply > 0 and last_reply - 1 != ends[0]:
        ends.append(last_reply - 1)
    for index in ends[: min(room, 2)]:
        content = turns[index]["content"]
        if content:
            content[-1]["cache_control"] = dict(mark)


def _written_1h(usage: Any) -> int:
    """The one-hour cache writes of a usage report (``cache_creation`` breaks writes down by
    lifetime; absent where the API or an older SDK does not)."""
    detail = getattr(usage, "cache_creation", None)
    return int(getattr(detail, "ephemeral_1h_input_tokens", None) or 0)


def _to_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": [_block(b) for b in content_blocks(message)] or "",
        }
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    blocks = [_thinking(r) for r in message.reasoning if r.provider == _PROVIDER]
    blocks += [
        _block(b) for b in content_blocks(message) if not (isinstance(b, TextBlock) and not b.text)
    ]
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.args})
    return ("assistant" if message.role == "assistant" else "user"), blocks


def _names_uploaded_file(message: Message) -> bool:
    return isinstance(message.content, list) and any(
        isinstance(b, FileBlock) and b.file_id is not None for b in message.content
    )


def _document(block: FileBlock) -> dict[str, Any]:
    """A file as a ``document`` block: a PDF as base64 or by URL, plain text as text."""
    if block.is_audio:
        raise refuse_file(block, "Anthropic", "its models take no audio; transcribe it first.")
    source: dict[str, Any]
    if block.url is not None:
        source = {"type": "url", "url": block.url}
    elif block.file_id is not None:  # the Files API (beta): see FILES_BETA
        source = {"type": "file", "file_id": block.file_id}
    elif block.media_type == "text/plain":
        text = base64.b64decode(block.data or "").decode("utf-8", errors="replace")
        source = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    document: dict[str, Any] = {"type": "document", "source": source}
    if block.name:
        document["title"] = block.name
    return document


def _thinking(reasoning: Reasoning) -> dict[str, Any]:
    """A kept reasoning item as the thinking block it came as."""
    if reasoning.redacted is not None:
        return {"type": "redacted_thinking", "data": reasoning.redacted}
    return {"type": "thinking", "thinking": reasoning.text, "signature": reasoning.signature or ""}


def _block(block: TextBlock | ImageBlock | FileBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, FileBlock):
        return _document(block)
    inline = image_bytes(block)
    if inline is not None:
        media_type, data = inline
        source: dict[str, Any] = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": block.url}
    return {"type": "image", "source": source}
