"""Resources and prompts a TensorSketch MCP server serves, written as plain Python functions.

``@resource("docs://readme")`` turns a function returning ``str`` (text) or ``bytes`` (a
blob) into a static resource; a URI with ``{placeholders}`` (``"notes://{topic}"``) makes a
resource template whose placeholders are the function's arguments. ``@prompt`` turns a
function returning ``str`` (one user message), a :class:`~tensorsketch.messages.Message` or a
list of them into a prompt whose arguments are the function's parameters. ``complete=`` gives
an argument's completions: a list of values (filtered by what the user typed) or a function
of the typed prefix. Pass them to :func:`build_mcp_server` as ``resources=`` and ``prompts=``.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import mcp_types as types

from tensorsketch.messages import ImageBlock, Message, TextBlock

__all__ = ["Completer", "MCPPrompt", "MCPResource", "prompt", "resource"]

#: Completions of one argument: every value (filtered by the typed prefix), or a function
#: of the typed prefix returning the values (sync or async).
Completer = Sequence[str] | Callable[[str], Iterable[str] | Awaitable[Iterable[str]]]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: The most values one completion answer may carry (the MCP spec's limit).
MAX_COMPLETIONS = 100


async def _call(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    """Call a sync function in a thread, an async one directly."""
    if inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    result = await asyncio.to_thread(fn, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


async def complete_values(completer: Completer, typed: str) -> types.Completion:
    """The completion answer for what the user typed, at most :data:`MAX_COMPLETIONS`."""
    if callable(completer):
        produced = completer(typed)
        values = list(await produced) if inspect.isawaitable(produced) else list(produced)
    else:
        values = [v for v in completer if v.startswith(typed)]
    shown = [str(v) for v in values[:MAX_COMPLETIONS]]
    return types.Completion(values=shown, total=len(values), has_more=len(values) > len(shown))


def _check_completers(
    owner: str, complete: Mapping[str, Completer] | None, known: Iterable[str]
) -> dict[str, Completer]:
    chosen = dict(complete or {})
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        msg = f"{owner}: complete= names {unknown}, which are not its arguments {sorted(known)}."
        raise ValueError(msg)
    return chosen


def _summary(fn: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(fn)
    return doc.strip().split("\n\n")[0] if doc else None


class MCPResource:
    """A resource (fixed ``uri``) or resource template (``uri`` with ``{placeholders}``)
    served by :func:`build_mcp_server`; made by :func:`resource`. Calling it calls the
    function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        uri: str,
        *,
        name: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        complete: Mapping[str, Completer] | None = None,
    ) -> None:
        self.fn = fn
        self.uri = uri
        self.name: str = name or str(getattr(fn, "__name__", uri))
        self.description = description if description is not None else _summary(fn)
        self.mime_type = mime_type
        #: The placeholders of a template, in order (empty for a fixed resource).
        self.params = tuple(_PLACEHOLDER.findall(uri))
        accepted = set(inspect.signature(fn).parameters)
        missing = [p for p in self.params if p not in accepted]
        if missing:
            msg = (
                f"resource {uri!r}: the function {self.name!r} has no parameter for "
                f"{missing}; add them (every {{placeholder}} becomes an argument)."
            )
            raise TypeError(msg)
        self.complete = _check_completers(f"resource {uri!r}", complete, self.params)
        self._pattern = re.compile(
            "".join(
                f"(?P<{part[1:-1]}>[^/]+)" if _PLACEHOLDER.fullmatch(part) else re.escape(part)
                for part in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", uri)
            )
        )

    @property
    def is_template(self) -> bool:
        return bool(self.params)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def match(self, uri: str) -> dict[str, str] | None:
        """The placeholder values if ``uri`` is this resource's (``None`` otherwise)."""
        found = self._pattern.fullmatch(uri)
        return None if found is None else found.groupdict()

    def describe(self) -> types.Resource:
        return types.Resource(
            uri=self.uri, name=self.name, description=self.description, mime_type=self.mime_type
        )

    def describe_template(self) -> types.ResourceTemplate:
        return types.ResourceTemplate(
            uri_template=self.uri,
            name=self.name,
            description=self.description,
            mime_type=self.mime_type,
        )

    async def read(self, uri: str, values: Mapping[str, str]) -> types.ReadResourceResult:
        """Run the function and wrap what it returned as the resource's contents."""
        value = await _call(self.fn, values)
        parts = value if isinstance(value, list) else [value]
        return types.ReadResourceResult(contents=[self._content(uri, part) for part in parts])

    def _content(
        self, uri: str, part: Any
    ) -> types.TextResourceContents | types.BlobResourceContents:
        if isinstance(part, types.TextResourceContents | types.BlobResourceContents):
            return part
        if isinstance(part, bytes | bytearray):
            blob = base64.b64encode(bytes(part)).decode("ascii")
            mime = self.mime_type or "application/octet-stream"
            return types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob)
        if isinstance(part, str):
            return types.TextResourceContents(
                uri=uri, mime_type=self.mime_type or "text/plain", text=part
            )
        msg = (
            f"resource {self.uri!r}: the function {self.name!r} returned "
            f"{type(part).__name__}; return str (text), bytes (binary) or a list of them."
        )
        raise TypeError(msg)


class MCPPrompt:
    """A prompt template served by :func:`build_mcp_server`; made by :func:`prompt`.
    Calling it calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        complete: Mapping[str, Completer] | None = None,
    ) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "prompt"))
        self.description = description if description is not None else _summary(fn)
        signature = inspect.signature(fn)
        self.arguments = [
            types.PromptArgument(name=param.name, required=param.default is inspect.Parameter.empty)
            for param in signature.parameters.values()
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        ]
        self.complete = _check_completers(
            f"prompt {self.name!r}", complete, [a.name for a in self.arguments]
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def describe(self) -> types.Prompt:
        return types.Prompt(name=self.name, description=self.description, arguments=self.arguments)

    async def render(self, arguments: Mapping[str, str]) -> types.GetPromptResult:
        """Run the function with the client's arguments; a missing required one is an
        error naming it."""
        missing = [a.name for a in self.arguments if a.required and a.name not in arguments]
        unknown = sorted(set(arguments) - {a.name for a in self.arguments})
        if missing or unknown:
            msg = (
                f"prompt {self.name!r} takes {[a.name for a in self.arguments]}: "
                + (f"missing {missing}" if missing else f"unknown {unknown}")
                + "."
            )
            raise ValueError(msg)
        value = await _call(self.fn, arguments)
        items = value if isinstance(value, list) else [value]
        messages = [_prompt_message(self.name, item) for item in items]
        return types.GetPromptResult(description=self.description, messages=messages)


def _prompt_message(name: str, item: Any) -> types.PromptMessage:
    if isinstance(item, types.PromptMessage):
        return item
    if isinstance(item, str):
        return types.PromptMessage(role="user", content=types.TextContent(type="text", text=item))
    if isinstance(item, Message) and item.role in ("user", "assistant"):
        content = item.content
        block: Any = (
            content if isinstance(content, str) else (content[0] if len(content) == 1 else None)
        )
        if isinstance(block, str):
            return types.PromptMessage(
                role=item.role, content=types.TextContent(type="text", text=block)
            )
        if isinstance(block, TextBlock):
            return types.PromptMessage(
                role=item.role, content=types.TextContent(type="text", text=block.text)
            )
        if isinstance(block, ImageBlock) and block.data is not None:
            image = types.ImageContent(
                type="image", data=block.data, mime_type=block.media_type or "image/png"
            )
            return types.PromptMessage(role=item.role, content=image)
    msg = (
        f"prompt {name!r} returned {item!r}; return str (a user message), a user/assistant "
        "Message with one text or image block, an mcp_types.PromptMessage, or a list of them."
    )
    raise TypeError(msg)


@overload
def prompt(fn: Callable[..., Any], /) -> MCPPrompt: ...
@overload
def prompt(
    *,
    name: str | None = None,
    description: str | None = None,
    complete: Mapping[str, Completer] | None = None,
) -> Callable[[Callable[..., Any]], MCPPrompt]: ...
def prompt(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    complete: Mapping[str, Completer] | None = None,
) -> MCPPrompt | Callable[[Callable[..., Any]], MCPPrompt]:
    """Make a function a prompt template (``@prompt`` or ``@prompt(complete=...)``).

    Its parameters are the prompt's arguments (those without a default are required; MCP
    sends every argument as a string); it returns ``str`` (one user message), a ``Message``
    or a list of them. The description is the docstring's first paragraph.
    """
    if fn is not None:
        return MCPPrompt(fn)

    def wrap(inner: Callable[..., Any]) -> MCPPrompt:
        return MCPPrompt(inner, name=name, description=description, complete=complete)

    return wrap


def resource(
    uri: str,
    *,
    name: str | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    complete: Mapping[str, Completer] | None = None,
) -> Callable[[Callable[..., Any]], MCPResource]:
    """Make a function the resource at ``uri`` (``@resource("docs://readme")``); a URI with
    ``{placeholders}`` is a template whose placeholders are the function's arguments.

    It returns ``str`` (text, ``mime_type`` default ``text/plain``), ``bytes`` (a blob,
    default ``application/octet-stream``) or a list of them.
    """
    if not isinstance(uri, str) or "://" not in uri:
        msg = f"resource() needs a URI such as 'docs://readme', got {uri!r}."
        raise ValueError(msg)

    def wrap(fn: Callable[..., Any]) -> MCPResource:
        return MCPResource(
            fn, uri, name=name, description=description, mime_type=mime_type, complete=complete
        )

    return wrap
