"""``FakeProvider``: a deterministic model for tests and offline runs.

Drive it with a script (replies handed out in order) or a policy function that looks at the
conversation and decides. Every request is recorded on ``.calls``, so a test can assert exactly
what the model was sent. It streams its replies token by token like a real provider, and
honours ``output_schema`` by parsing the reply text as JSON (a bad reply raises
:class:`~tensorsketch.provider.StructuredOutputError`, which the repair loop handles).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from tensorsketch.messages import Message, assistant
from tensorsketch.provider import (
    Capabilities,
    ChatProvider,
    Completion,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    parse_structured,
)
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.tools import Tool

__all__ = ["FakeCall", "FakeProvider", "FakeStreamFailure"]


@dataclass(frozen=True, slots=True)
class FakeStreamFailure:
    """A script item that streams ``text`` and then fails with ``error`` (mid-reply)."""

    text: str
    error: BaseException


Reply: TypeAlias = Message | Completion | str | BaseException | FakeStreamFailure
Policy: TypeAlias = Callable[
    [list[Message], list[Any]],
    "Message | Completion | str | Awaitable[Message | Completion | str]",
]


@dataclass(slots=True)
class FakeCall:
    """One request the fake model received."""

    messages: list[Message]
    tools: list[Tool]
    output_schema: type[Schema] | None
    max_tokens: int
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools advertised on this call."""
        return [t.name for t in self.tools]

    @property
    def last(self) -> Message:
        """The last message of the request."""
        return self.messages[-1]


class FakeProvider(ChatProvider):
    """A scripted or policy-driven model.

    :param script: replies in order — a :class:`Message`, a :class:`Completion`, a plain
        string (an assistant text reply), an exception to raise, or a
        :class:`FakeStreamFailure`. A function passed here is taken as the ``policy``
        (``FakeProvider(decide)``), since a script is never callable.
    :param policy: ``policy(messages, tools) -> Message`` (sync or async) deciding each reply;
        used when there is no script. With neither, it echoes the last user message.
    :param usage: fixed token usage per call; by default it is estimated from the text
        (about four characters per token) so budgets and costs behave realistically.
    """

    provider_name = "fake"

    def __init__(
        self,
        script: Iterable[Reply] | Policy | None = None,
        *,
        policy: Policy | None = None,
        model: str = "fake-model",
        usage: Usage | None = None,
    ) -> None:
        if script is not None and policy is not None:
            msg = "FakeProvider takes a `script` or a `policy=`, not both."
            raise ValueError(msg)
        if callable(script):
            if isinstance(script, Iterable):  # both: say which it is rather than guess
                msg = (
                    f"FakeProvider got {script!r}, which is both callable and iterable; pass it "
                    "as `policy=` for a policy, or as `list(...)` for a script."
                )
                raise TypeError(msg)
            script, policy = None, script
        if isinstance(script, str | Message | Completion):
            msg = (
                f"FakeProvider(script) takes a list of replies, got one {type(script).__name__}; "
                "wrap it in a list: `FakeProvider([assistant('...')])`."
            )
            raise TypeError(msg)
        if policy is not None and not callable(policy):
            msg = (
                "FakeProvider(policy=...) needs a function (messages, tools) -> Message, got "
                f"{policy!r}."
            )
            raise TypeError(msg)
        self._script: list[Reply] | None = list(script) if script is not None else None
        self._policy = policy
        self._cursor = 0
        self.model = model
        self._usage = usage
        #: Every request received, oldest first.
        self.calls: list[FakeCall] = []

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(tools=True, strict_json=True, streaming=True, vision=True)

    @property
    def remaining(self) -> int | None:
        """Script replies not handed out yet (``None`` for a policy)."""
        return None if self._script is None else len(self._script) - self._cursor

    # -- the reply --------------------------------------------------------------------------

    async def _next(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> Reply:
        sent = list(messages)
        tool_list = list(tools or [])
        self.calls.append(FakeCall(sent, tool_list, output_schema, max_tokens, dict(options)))
        if self._script is not None:
            if self._cursor >= len(self._script):
                msg = (
                    f"FakeProvider script exhausted: it had {len(self._script)} replies and was "
                    f"asked for reply #{self._cursor + 1}; add more replies to the script (or "
                    "use `policy=`)."
                )
                raise RuntimeError(msg)
            item = self._script[self._cursor]
            self._cursor += 1
            return item
        if self._policy is None:
            last = next((m.text for m in reversed(sent) if m.role == "user"), "")
            return assistant(last)
        decided = self._policy(sent, tool_list)
        if inspect.isawaitable(decided):
            decided = await decided
        return decided

    def _finish(
        self,
        item: Message | Completion | str,
        messages: Sequence[Message],
        output_schema: type[Schema] | None,
    ) -> Completion:
        if isinstance(item, str):
            item = assistant(item)
        if isinstance(item, Message):
            if item.role != "assistant":
                msg = f"FakeProvider replies must be assistant messages, got role {item.role!r}."
                raise ValueError(msg)
            completion = Completion(
                message=item,
                usage=self._usage or _estimate(messages, item),
                model=self.model,
                stop_reason="tool_use" if item.tool_calls else "end_turn",
            )
        elif isinstance(item, Completion):
            completion = (
                item if item.model is not None else item.model_copy(update={"model": self.model})
            )
        else:
            msg = (
                f"FakeProvider cannot reply with {type(item).__name__} ({item!r:.60}); script "
                "Message, Completion, str or exception items, or return a Message from policy."
            )
            raise TypeError(msg)
        if (
            output_schema is not None
            and completion.parsed is None
            and not completion.message.tool_calls
        ):
            parsed = parse_structured(completion.message.text, output_schema, completion=completion)
            completion = completion.model_copy(update={"parsed": parsed})
        return completion

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> Completion:
        item = await self._next(messages, tools, output_schema, max_tokens, options)
        if isinstance(item, FakeStreamFailure):
            raise item.error
        if isinstance(item, BaseException):
            raise item
        return self._finish(item, messages, output_schema)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> AsyncIterator[StreamDelta | Completion]:
        item = await self._next(messages, tools, output_schema, max_tokens, options)
        if isinstance(item, FakeStreamFailure):
            for chunk in _chunks(item.text):
                yield TextDelta(chunk)
            raise item.error
        if isinstance(item, BaseException):
            raise item
        completion = self._finish(item, messages, output_schema)
        for reasoning in completion.message.reasoning:
            if reasoning.text:
                yield ReasoningDelta(reasoning.text)
        for chunk in _chunks(completion.message.text):
            yield TextDelta(chunk)
        for index, call in enumerate(completion.message.tool_calls):
            yield ToolCallDelta(index, call.id, call.name, json.dumps(call.args, sort_keys=True))
        yield completion


def _chunks(text: str) -> list[str]:
    """Split text into word-sized pieces that join back to exactly ``text``."""
    return re.findall(r"\s*\S+|\s+$", text) if text else []


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def _estimate(messages: Sequence[Message], reply: Message) -> Usage:
    sent = sum(_tokens(m.text) + 4 for m in messages)
    out = _tokens(reply.text) + sum(
        _tokens(json.dumps(c.args, sort_keys=True)) + 8 for c in reply.tool_calls
    )
    return Usage(input_tokens=sent, output_tokens=max(out, 1))
