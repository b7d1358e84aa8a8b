"""A model call in a run somebody streams: a provider that only implements ``complete()``
gives the same ``token`` event the default ``ChatProvider.stream`` would, without being
driven through that async generator (issue 49: what a runner run costs)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from tensorsketch import ChatProvider, Completion, InMemoryBackend, create_agent
from tensorsketch._modelcall import call_provider
from tensorsketch.messages import assistant
from tensorsketch.provider import TextDelta


class Completing(ChatProvider):
    """Implements ``complete`` only; remembers the options of every call."""

    model = "completing"

    def __init__(self, reply: str = "all done") -> None:
        self.reply = reply
        self.options: list[dict[str, Any]] = []

    async def complete(self, messages: Any, **options: Any) -> Completion:
        self.options.append(options)
        return Completion(message=assistant(self.reply), model="completing")


class Streaming(Completing):
    """Streams its reply in two pieces."""

    async def stream(self, messages: Any, **options: Any) -> AsyncIterator[Any]:
        yield TextDelta("all ")
        yield TextDelta("done")
        yield await self.complete(messages, **options)


async def _tokens(provider: ChatProvider) -> list[Any]:
    agent = create_agent(provider)
    run = agent.stream({"query": "go"}, thread_id="t", backend=InMemoryBackend())
    return [e.data for e in [e async for e in run] if e.type == "token"]


async def test_a_completing_provider_streams_its_text_without_the_default_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entered: list[str] = []
    default_stream = ChatProvider.stream

    async def watched(self: ChatProvider, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        entered.append(type(self).__name__)
        async for item in default_stream(self, *args, **kwargs):
            yield item

    monkeypatch.setattr(ChatProvider, "stream", watched)
    provider = Completing()
    assert await _tokens(provider) == [{"text": "all done"}]  # what the default one yields
    assert entered == []
    assert [o["max_tokens"] for o in provider.options] == [1024]


async def test_a_provider_that_streams_is_still_streamed() -> None:
    assert await _tokens(Streaming()) == [{"text": "all "}, {"text": "done"}]


class _Streamed:
    """The little of a ``Context`` a model call reads, in a run somebody streams."""

    streaming = True
    tracer = SimpleNamespace(enabled=False)

    def span(self, *args: Any, **kwargs: Any) -> Any:
        return contextlib.nullcontext()

    async def emit(self, type: str, data: Any = None) -> None:
        raise AssertionError("a reply without text streams no token")


async def test_max_tokens_is_passed_on_as_the_default_stream_passes_it() -> None:
    provider = Completing(reply="")
    ctx: Any = _Streamed()
    await call_provider(ctx, provider, [], tools=None, output_schema=None, options={})
    await call_provider(
        ctx, provider, [], tools=None, output_schema=None, options={"max_tokens": 7}
    )
    assert [o["max_tokens"] for o in provider.options] == [1024, 7]
