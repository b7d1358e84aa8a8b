"""``GoogleProvider``: Gemini through the official ``google-genai`` SDK (``generateContent``).

Mapping notes:

* Roles: ``assistant`` is Gemini's ``model``; system messages become the
  ``systemInstruction``; a tool result is a ``functionResponse`` part (``{"output": ...}``, or
  ``{"error": ...}`` when the tool failed) in a user turn.
* Gemini may return function calls without ids; the provider then makes one up
  (``ts_call_...``) and leaves it out when the result goes back.
* Thinking (``model_options={"thinking_config": {"include_thoughts": True}}``): thought
  summaries come back as the message's ``reasoning`` (streamed as reasoning deltas), and
  thought signatures are kept with them — on a function call, as a
  :class:`~tensorsketch.messages.Reasoning` naming the call (``call_id``). Both live in the
  transcript (journaled, checkpointed) and go back on the parts they came on: Gemini 3 models
  reject a replayed call without its signature. For a call whose signature is unknown (history
  written elsewhere) the provider sends Google's documented ``skip_thought_signature_validator``
  placeholder.
* Structured output uses ``responseMimeType: application/json`` with ``responseJsonSchema``;
  tools are declared with ``parametersJsonSchema`` — both take plain JSON Schema.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

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
from tensorsketch.providers._base import SDKProvider
from tensorsketch.providers._common import (
    TOOL_ID_PREFIX,
    Draft,
    check_tools,
    content_blocks,
    guess_media_type,
    image_bytes,
    import_sdk,
    new_tool_id,
    output_json_schema,
    refuse_file,
)
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

__all__ = ["SKIP_SIGNATURE", "GoogleProvider"]

_genai = import_sdk("google.genai", "google")
_types = import_sdk("google.genai.types", "google")

#: Google's documented placeholder for a function call whose thought signature is unknown.
SKIP_SIGNATURE = "skip_thought_signature_validator"
# The SDK base64-encodes ``bytes`` (urlsafe) on the wire, so the placeholder travels as these
# bytes to arrive as the literal string above.
_SKIP_SIGNATURE_BYTES = base64.urlsafe_b64decode(SKIP_SIGNATURE)

_FINISH = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "MALFORMED_FUNCTION_CALL": "malformed_tool_call",
}
_OPTION_ALIASES = {"stop": "stop_sequences"}
_KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
_PLACEHOLDER_KEY = "not-needed"


class GoogleProvider(SDKProvider):
    """Gemini models through the Gemini API (or Vertex AI, with ``vertexai=True``).

    :param model: the model id, e.g. ``"gemini-2.5-flash"``.
    :param api_key: defaults to ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``.
    :param base_url: another endpoint speaking the Gemini REST API (a proxy, a gateway).
    :param http_options: extra ``google.genai.types.HttpOptions`` fields (``api_version``,
        ``headers``, ...), as a dict or the SDK object.
    :param client: a ready ``google.genai.Client`` to use instead of building one.
    :param max_retries: retries the SDK itself makes; set 0 when middleware retries.
    :param timeout: seconds per request.
    :param vertexai: use Vertex AI instead of the Gemini API.
    :param project: the Google Cloud project, for Vertex AI.
    :param location: the Google Cloud region, for Vertex AI.
    """

    provider_name = "gcp.gemini"
    _NAME = "GoogleProvider"
    _CAPABILITIES = Capabilities(tools=True, strict_json=True, streaming=True, vision=True)

    def __init__(
        self,
        model: str = "gemini-2.5-flash",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_options: Any = None,
        client: Any = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        vertexai: bool | None = None,
        project: str | None = None,
        location: str | None = None,
    ) -> None:
        self._check_model(model)
        self.model = model
        if self._adopt_client(
            client, api_key=api_key, base_url=base_url, http_options=http_options
        ):
            return
        if vertexai:
            self.provider_name = "gcp.vertex_ai"
        elif api_key is None and not any(os.environ.get(k) for k in _KEY_VARIABLES):
            if base_url is None:
                msg = (
                    "no Gemini API key: set the `GEMINI_API_KEY` environment variable or pass "
                    "`GoogleProvider(api_key=...)` (or use Vertex AI with `vertexai=True`)."
                )
                raise AuthenticationError(msg, provider=self.provider_name, model=model)
            api_key = _PLACEHOLDER_KEY  # a gateway at `base_url` may not need one
        options: dict[str, Any] = {}
        if http_options is not None:
            options = (
                dict(http_options)
                if isinstance(http_options, dict)
                else http_options.model_dump(exclude_none=True)
            )
        if base_url is not None:
            options["base_url"] = base_url
        options.setdefault("timeout", int(timeout * 1000))
        options.setdefault("retry_options", {"attempts": max(max_retries, 0) + 1})
        self._client = _genai.Client(
            api_key=api_key,
            vertexai=vertexai,
            project=project,
            location=location,
            http_options=_types.HttpOptions(**options),
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self._client.aio.aclose()

    # -- calls ---------------------------------------------------------------------------------

    async def _send(self, request: dict[str, Any]) -> Any:
        return await self._client.aio.models.generate_content(**request)

    def parse_response(self, response: Any, output_schema: type[Schema] | None) -> Completion:
        """A ``GenerateContentResponse`` from the SDK as a :class:`Completion`."""
        draft = Draft(model=self.model)
        self._absorb(draft, response)
        return self._finish(draft, output_schema)

    async def _stream(
        self, request: dict[str, Any], output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        draft = Draft(model=self.model)
        opening = functools.partial(self._client.aio.models.generate_content_stream, **request)
        async for chunk in self._events(opening):
            thoughts, texts, calls = self._absorb(draft, chunk)
            for thought in thoughts:
                yield ReasoningDelta(thought)
            for text in texts:
                yield TextDelta(text)
            for index, call in calls:
                yield ToolCallDelta(
                    index=index, id=call.id, name=call.name, arguments=json.dumps(call.args)
                )
        if draft.stop_reason is None:
            raise self._cut_off("chunk with a `finishReason`")
        yield self._finish(draft, output_schema)

    # -- mapping: ours -> generateContent ----------------------------------------------------

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The keyword arguments for ``client.aio.models.generate_content``."""
        tool_list = check_tools(tools)
        system: list[str] = []
        contents: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        for message in messages:
            if message.role == "system":
                if message.text:
                    system.append(message.text)
                continue
            role = "model" if message.role == "assistant" else "user"
            parts = self._parts(message, names)
            if not parts:
                continue
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)
            else:
                contents.append({"role": role, "parts": parts})
        config: dict[str, Any] = {"max_output_tokens": max_tokens}
        if system:
            config["system_instruction"] = "\n\n".join(system)
        if tool_list:
            config["tools"] = [
                {
                    "function_declarations": [
                        {
                            "name": t.name,
                            "description": t.description,
                            "parameters_json_schema": t.json_schema(),
                        }
                        for t in tool_list
                    ]
                }
            ]
        if output_schema is not None:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = output_json_schema(output_schema)
        fields = _types.GenerateContentConfig.model_fields
        for key, value in options.items():
            name = _OPTION_ALIASES.get(key, key)
            if name not in fields:
                msg = (
                    f"`GoogleProvider` does not know the option {key!r}; options are "
                    "`google.genai.types.GenerateContentConfig` fields (temperature, top_p, "
                    "top_k, stop_sequences, seed, thinking_config, ...)."
                )
                raise TypeError(msg)
            config[name] = value
        # Typed SDK objects (not plain dicts), so the SDK writes the documented camelCase
        # field names at every depth.
        return {
            "model": self.model,
            "contents": [_types.Content.model_validate(c) for c in contents],
            "config": _types.GenerateContentConfig.model_validate(config),
        }

    def _parts(self, message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            name = message.name or names.get(call_id)
            if not name:
                msg = (
                    f"the tool result for call {call_id!r} has no tool name, which Gemini "
                    "needs; build it with `tool_result(call, content)` from the ToolCall."
                )
                raise ValueError(msg)
            text = "".join(b.text for b in content_blocks(message) if isinstance(b, TextBlock))
            response = {"error": text} if message.is_error else {"output": text}
            function_response: dict[str, Any] = {"name": name, "response": response}
            if not call_id.startswith(TOOL_ID_PREFIX):
                function_response["id"] = call_id
            parts: list[dict[str, Any]] = [{"function_response": function_response}]
            parts.extend(_part(image) for image in message.images)
            return parts
        kept = [r for r in message.reasoning if r.provider == self.provider_name]
        parts = [_thought(r) for r in kept if r.call_id is None and r.text]
        content = [
            _part(b)
            for b in content_blocks(message)
            if not (isinstance(b, TextBlock) and not b.text)
        ]
        text_signature = next(
            (r.signature for r in kept if r.call_id is None and not r.text and r.signature), None
        )
        if text_signature is not None and content and "text" in content[-1]:
            content[-1]["thought_signature"] = _unb64(text_signature)
        parts += content
        signatures = {r.call_id: r.signature for r in kept if r.call_id and r.signature}
        for position, call in enumerate(message.tool_calls):
            names[call.id] = call.name
            function_call: dict[str, Any] = {"name": call.name, "args": call.args}
            if not call.id.startswith(TOOL_ID_PREFIX):
                function_call["id"] = call.id
            part: dict[str, Any] = {"function_call": function_call}
            signature = signatures.get(call.id)
            if signature is not None:
                part["thought_signature"] = _unb64(signature)
            elif position == 0 and (self.model or "").startswith("gemini-3"):
                part["thought_signature"] = _SKIP_SIGNATURE_BYTES
            parts.append(part)
        return parts

    # -- mapping: generateContent -> ours ----------------------------------------------------

    def _absorb(
        self, draft: Draft, response: Any
    ) -> tuple[list[str], list[str], list[tuple[int, ToolCall]]]:
        """Fold one response (or stream chunk) into ``draft``; return what it added: thought
        text, reply text, and tool calls with their index."""
        thoughts: list[str] = []
        texts: list[str] = []
        calls: list[tuple[int, ToolCall]] = []
        draft.model = getattr(response, "model_version", None) or draft.model
        usage = getattr(response, "usage_metadata", None)
        if usage is not None:
            draft.usage = _usage(usage)
        candidates = getattr(response, "candidates", None) or []
        if not candidates:
            feedback = getattr(response, "prompt_feedback", None)
            if feedback is not None and getattr(feedback, "block_reason", None):
                draft.stop_reason = "content_filter"
            return thoughts, texts, calls
        candidate = candidates[0]
        content = getattr(candidate, "content", None)
        for part in getattr(content, "parts", None) or []:
            signature = getattr(part, "thought_signature", None)
            function_call = getattr(part, "function_call", None)
            if getattr(part, "thought", None):
                if part.text:
                    thoughts.append(part.text)
                self._keep_thought(draft, part.text or "", signature)
                continue
            if part.text:
                draft.text.append(part.text)
                texts.append(part.text)
            if function_call is not None:
                call = ToolCall(
                    id=function_call.id or new_tool_id(),
                    name=function_call.name or "",
                    args=dict(function_call.args or {}),
                )
                calls.append((len(draft.calls), call))
                draft.calls.append(call)
                if signature:
                    draft.reasoning.append(self._signed(signature, call_id=call.id))
            elif signature:  # a signature on the reply's text (or an empty closing part)
                draft.reasoning.append(self._signed(signature))
        reason = getattr(candidate, "finish_reason", None)
        if reason is not None:
            raw = getattr(reason, "value", reason)
            draft.stop_reason = _FINISH.get(str(raw), str(raw).lower())
        return thoughts, texts, calls

    def _keep_thought(self, draft: Draft, text: str, signature: bytes | None) -> None:
        """A thought part: streamed thoughts arrive in pieces, kept as one reasoning entry."""
        last = draft.reasoning[-1] if draft.reasoning else None
        if last is not None and last.call_id is None and last.text and last.signature is None:
            draft.reasoning[-1] = last.model_copy(
                update={"text": last.text + text, "signature": _b64(signature)}
            )
        else:
            draft.reasoning.append(
                Reasoning(provider=self.provider_name, text=text, signature=_b64(signature))
            )

    def _signed(self, signature: bytes, *, call_id: str | None = None) -> Reasoning:
        return Reasoning(provider=self.provider_name, signature=_b64(signature), call_id=call_id)

    def _finish(self, draft: Draft, output_schema: type[Schema] | None) -> Completion:
        if draft.calls and draft.stop_reason in (None, "end_turn"):
            draft.stop_reason = "tool_use"
        return draft.finish(output_schema)


def _usage(usage: Any) -> Usage:
    prompt = getattr(usage, "prompt_token_count", None) or 0
    cached = getattr(usage, "cached_content_token_count", None) or 0
    output = (getattr(usage, "candidates_token_count", None) or 0) + (
        getattr(usage, "thoughts_token_count", None) or 0
    )
    return Usage(
        input_tokens=max(prompt - cached, 0), output_tokens=output, cache_read_tokens=cached
    )


def _b64(signature: bytes | None) -> str | None:
    """A thought signature as text, for the transcript (the SDK hands it over as bytes)."""
    return base64.b64encode(signature).decode() if signature else None


def _unb64(signature: str) -> bytes:
    return base64.b64decode(signature)


def _thought(reasoning: Reasoning) -> dict[str, Any]:
    """A kept thought summary as the thought part it came as."""
    part: dict[str, Any] = {"text": reasoning.text, "thought": True}
    if reasoning.signature:
        part["thought_signature"] = _unb64(reasoning.signature)
    return part


def _part(block: TextBlock | ImageBlock | FileBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"text": block.text}
    if isinstance(block, FileBlock):  # documents and audio, inline or by URI
        if block.file_id is not None:
            raise refuse_file(
                block,
                "Gemini",
                "it names uploaded files by URI; pass the file's `uri` (from "
                "`client.files.upload`) as `url=`.",
            )
        if block.data is not None:
            raw = base64.b64decode(block.data)
            return {"inline_data": {"mime_type": block.media_type, "data": raw}}
        return {"file_data": {"file_uri": block.url, "mime_type": block.media_type}}
    inline = image_bytes(block)
    if inline is not None:
        media_type, data = inline
        return {"inline_data": {"mime_type": media_type, "data": base64.b64decode(data)}}
    url = block.url or ""
    return {"file_data": {"file_uri": url, "mime_type": block.media_type or guess_media_type(url)}}
