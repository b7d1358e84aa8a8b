"""The scaffold the vendor providers share: checking the model id, adopting a ready SDK client,
the ``client`` property, ``aclose``, mapping SDK errors onto the core taxonomy, and the
``complete``/``stream`` preamble.

A vendor module subclasses :class:`SDKProvider` and writes only what is its own: building the
client, ``build_request``, the one SDK call (``_send``), ``parse_response`` and the body of
the stream (``_stream``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from tensorsketch.messages import Message
from tensorsketch.provider import (
    Capabilities,
    ChatProvider,
    Completion,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    StreamDelta,
    StructuredOutputError,
    TextDelta,
    ToolCallDelta,
)
from tensorsketch.providers._errors import classify, reraise
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

__all__ = ["SDKProvider", "WholeReply"]


@dataclass
class WholeReply:
    """What :meth:`SDKProvider._events` yields, alone, when the server answered a streaming
    request with one plain JSON body (a server that ignores ``stream``): the decoded body,
    or None when it was not JSON."""

    body: Any


class _BodyError(Exception):
    """A JSON error object received with HTTP 200, shaped for :func:`classify`."""

    def __init__(self, body: Any) -> None:
        super().__init__("the server answered with an error")
        self.body = body


class SDKProvider(ChatProvider):
    """A :class:`ChatProvider` backed by a vendor SDK client."""

    #: How the class is named in error messages (the public class, not a user's subclass).
    _NAME: ClassVar[str]
    #: What the provider supports; every instance of a vendor class supports the same.
    _CAPABILITIES: ClassVar[Capabilities]

    model: str
    _client: Any

    def _check_model(self, model: Any) -> None:
        if not isinstance(model, str) or not model:
            msg = f"`{self._NAME}(model=...)` needs a model id, got {model!r}."
            raise ValueError(msg)

    def _adopt_client(self, client: Any, **settings: Any) -> bool:
        """Use ``client`` when one was passed (then no other connection setting may be)."""
        if client is None:
            return False
        if any(value is not None for value in settings.values()):
            names = "/".join(f"`{name}=`" for name in settings)
            carries = "its key and endpoint" if len(settings) == 2 else "its settings"
            msg = (
                f"pass either `client=` or {names} to `{self._NAME}`, not both: the client "
                f"already carries {carries}."
            )
            raise ValueError(msg)
        self._client = client
        return True

    @property
    def client(self) -> Any:
        """The vendor SDK's client (built from the arguments, or the ``client=`` passed)."""
        return self._client

    @property
    def capabilities(self) -> Capabilities:
        return self._CAPABILITIES

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self._client.close()

    # -- calls ---------------------------------------------------------------------------------

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> Completion:
        request = self.build_request(messages, tools, output_schema, max_tokens, options)
        try:
            response = await self._send(request)
        except Exception as exc:
            self._reraise(exc)
        return self.parse_response(response, output_schema)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> AsyncIterator[StreamDelta | Completion]:
        request = self.build_request(messages, tools, output_schema, max_tokens, options)
        async for item in self._stream(request, output_schema):
            yield item

    async def _events(
        self, opening: Callable[[], Awaitable[AsyncIterable[Any]]]
    ) -> AsyncIterator[Any]:
        """The SDK's stream, opened by calling ``opening``, with its errors mapped like
        ``complete``'s."""
        try:
            events = await opening()
            response = _json_response(events)
            if response is not None:
                raw = await response.aread()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                yield WholeReply(body)
                return
            async for event in events:
                yield event
        except Exception as exc:
            self._reraise(exc)

    @property
    def _where(self) -> str:
        return f"{self.provider_name} model {self.model!r}"

    def _cut_off(self, missing: str) -> ProviderConnectionError:
        """The error for a stream that ended before its terminal event: retryable, like the
        dropped connection it almost always is."""
        return ProviderConnectionError(
            f"{self._where} stream ended before the reply was complete (no {missing} "
            "arrived); the connection was probably dropped, so the partial reply is discarded.",
            provider=self.provider_name,
            model=self.model,
        )

    async def _whole(
        self, reply: WholeReply, reply_type: Any, output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        """A streaming request answered with one JSON body, as a stream: the reply's text and
        tool calls as single deltas, then the :class:`Completion` ``complete`` would return."""
        body = reply.body
        if isinstance(body, dict) and body.get("error"):  # a reply may carry `"error": null`
            error = classify(_BodyError(body), provider=self.provider_name, model=self.model)
            if error is None:
                error = ProviderServerError(
                    f"{self._where} failed on the server side: {json.dumps(body)[:300]}",
                    provider=self.provider_name,
                    model=self.model,
                )
            raise error
        if not isinstance(body, dict):
            raise self._not_a_reply()
        try:
            completion = self.parse_response(reply_type.construct(**body), output_schema)
        except (StructuredOutputError, ProviderError):
            raise
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise self._not_a_reply() from exc
        if completion.message.text:
            yield TextDelta(completion.message.text)
        for index, call in enumerate(completion.message.tool_calls):
            yield ToolCallDelta(
                index=index, id=call.id, name=call.name, arguments=json.dumps(call.args)
            )
        yield completion

    def _not_a_reply(self) -> ProviderServerError:
        return ProviderServerError(
            f"{self._where} answered a streaming request with a body that is neither an event "
            "stream nor a reply.",
            provider=self.provider_name,
            model=self.model,
        )

    def _reraise(self, exc: BaseException) -> NoReturn:
        reraise(exc, provider=self.provider_name, model=self.model)

    # -- what each vendor writes ---------------------------------------------------------------

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The keyword arguments of the SDK call."""
        raise NotImplementedError

    def parse_response(self, response: Any, output_schema: type[Schema] | None) -> Completion:
        """The SDK's reply as a :class:`Completion`."""
        raise NotImplementedError

    async def _send(self, request: dict[str, Any]) -> Any:
        """Make the one SDK call ``complete`` needs."""
        raise NotImplementedError

    def _stream(
        self, request: dict[str, Any], output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        """The deltas and the final :class:`Completion` of a streamed call."""
        raise NotImplementedError


def _json_response(events: Any) -> Any:
    """The HTTP response under the SDK's stream object when it is a plain JSON body rather
    than an event stream (the Anthropic and OpenAI SDKs expose it as ``.response``)."""
    response = getattr(events, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        kind = str(headers.get("content-type", "")).lower()
    except (AttributeError, TypeError):
        return None
    return response if "json" in kind and "event-stream" not in kind else None
