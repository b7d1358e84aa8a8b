"""Tools: functions a model can call, with the JSON schema derived from the signature.

``@tool`` turns an ordinary (sync or async) function into a :class:`Tool`. The argument schema
comes from the annotations, per-parameter descriptions from the docstring (Google, NumPy or
Sphinx style), and a parameter annotated ``Context`` (or ``Context[MyDeps]``) is injected at
call time and never shown to the model; through it a tool reaches the run's dependencies
(``ctx.deps``), which is where a connection or client belongs, not in a parameter.
:meth:`Tool.from_schema` wraps a function described by a raw JSON schema (an MCP server's
tool) in the same type, so agents treat both alike.

The schema is byte-stable — keys sorted at every level, no titles, nothing that depends on
dict order or ids — so an agent's tool list renders to the same prompt prefix on every call
and a provider's prompt cache keeps hitting.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Literal, overload

import pydantic
from pydantic import ConfigDict

from tensorsketch._assignable import type_text
from tensorsketch._docstrings import parse_docstring
from tensorsketch._jsonschema import validate_json
from tensorsketch.context import Context
from tensorsketch.errors import ValidationError
from tensorsketch.runtime.workers import call_blocking

if typing.TYPE_CHECKING:
    from tensorsketch.messages import ToolCall

__all__ = ["Tool", "current_tool_call", "parse_docstring", "tool"]

#: The model's tool call being executed in this context (set by the agent loop).
_current_call: ContextVar[ToolCall | None] = ContextVar("tensorsketch_tool_call", default=None)


def current_tool_call() -> ToolCall | None:
    """The tool call an agent is running right now (``None`` outside one).

    Its ``id`` is stable across crashes and resumes, which makes it a good idempotency key
    for the external API a tool calls.
    """
    return _current_call.get()


_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Tool:
    """A callable the model can ask for: name, description, argument schema and the function.

    Build one with :func:`tool` (from a Python function) or :meth:`from_schema` (from a raw
    JSON schema). ``await tool.run(args)`` validates ``args`` first and raises
    :class:`~tensorsketch.errors.ValidationError` with a message written for the model to read.
    """

    __slots__ = (
        "_args_model",
        "_blocking",
        "_fn",
        "_is_async",
        "_passes_ctx",
        "_raw_args",
        "_schema",
        "_schema_text",
        "description",
        "in_doubt",
        "name",
        "requires_approval",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        schema: dict[str, Any],
        args_model: type[pydantic.BaseModel] | None,
        passes_ctx: bool,
        raw_args: bool = False,
        requires_approval: bool = False,
        blocking: bool = True,
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            msg = (
                f"tool name {name!r} is not usable by model APIs; use 1-64 letters, digits, "
                "'_' or '-' (pass `@tool(name=...)`)."
            )
            raise ValueError(msg)
        self._fn = fn
        self.name = name
        self.description = description
        self._schema = _stable(schema)
        self._schema_text = json.dumps(self._schema, sort_keys=True, separators=(",", ":"))
        self._args_model = args_model
        self._passes_ctx = passes_ctx
        self._raw_args = raw_args
        self._is_async = _is_async_callable(fn)
        if not isinstance(blocking, bool):
            msg = f"tool {name!r}: `blocking=` takes True or False, got {blocking!r}."
            raise TypeError(msg)
        self._blocking = blocking
        #: Whether each call must be approved by a human before it runs (the run suspends).
        self.requires_approval = requires_approval
        #: What a resumed durable run does with a call of this tool that started before a
        #: crash and recorded no result: ``"retry"``, ``"ask"`` (suspend, the call shown)
        #: or ``"fail"`` (see ``ctx.step``).
        self.in_doubt: Literal["retry", "ask", "fail"] = "retry"

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        blocking: bool = True,
    ) -> Tool:
        """Build a tool from a function's signature and docstring (what ``@tool`` does)."""
        if not callable(fn):
            msg = f"@tool needs a function, got {fn!r}."
            raise TypeError(msg)
        tool_name = name if name is not None else getattr(fn, "__name__", None)
        if tool_name is None:
            msg = f"cannot infer a tool name from {fn!r}; pass `@tool(name=...)`."
            raise TypeError(msg)
        summary, param_docs = parse_docstring(inspect.getdoc(fn) or "")
        args_model, passes_ctx = _args_model(fn, tool_name, param_docs)
        try:
            schema = args_model.model_json_schema()
        except pydantic.PydanticUserError as exc:
            raise TypeError(_no_schema(tool_name, args_model, exc)) from exc
        return cls(
            fn,
            name=tool_name,
            description=description if description is not None else summary,
            schema=schema,
            args_model=args_model,
            passes_ctx=passes_ctx,
            requires_approval=requires_approval,
            blocking=blocking,
        )

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        json_schema: Mapping[str, Any],
        fn: Callable[..., Any],
        *,
        requires_approval: bool = False,
        blocking: bool = True,
    ) -> Tool:
        """A tool described by a raw JSON schema (e.g. one served by an MCP server).

        ``fn(args)`` receives the validated argument dict (sync or async); if it declares a
        ``ctx`` parameter, the run context is passed as ``ctx=``. ``blocking`` is as for
        :func:`tool`.
        """
        if not isinstance(json_schema, Mapping):
            msg = f"Tool.from_schema() needs the argument schema as a dict, got {json_schema!r}."
            raise TypeError(msg)
        schema = dict(json_schema)
        schema.setdefault("type", "object")
        if schema.get("type") != "object":
            msg = (
                f"tool {name!r}: the argument schema must describe an object "
                f"(type 'object'), got type {schema.get('type')!r}."
            )
            raise ValueError(msg)
        schema.setdefault("properties", {})
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        return cls(
            fn,
            name=name,
            description=description,
            schema=schema,
            args_model=None,
            passes_ctx="ctx" in params,
            raw_args=True,
            requires_approval=requires_approval,
            blocking=blocking,
        )

    # -- the model-facing view --------------------------------------------------------------

    def json_schema(self) -> dict[str, Any]:
        """The argument schema advertised to the model (a fresh copy, keys sorted)."""
        result: dict[str, Any] = json.loads(self._schema_text)
        return result

    def schema_text(self) -> str:
        """The argument schema as canonical JSON text (identical bytes on every call)."""
        return self._schema_text

    def definition(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}``: what most chat APIs take per tool."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.json_schema(),
        }

    # -- running ----------------------------------------------------------------------------

    def validate(self, args: Any) -> dict[str, Any]:
        """Check ``args`` against the schema; return the arguments the function will get."""
        if type(args) is dict and self._args_model is not None:  # the usual case, fast
            return self._validated(args)
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                msg = (
                    f"arguments for tool {self.name!r} are not valid JSON ({exc}); send a JSON "
                    "object matching the tool's schema."
                )
                raise ValidationError(msg) from exc
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            msg = (
                f"arguments for tool {self.name!r} must be a JSON object, got "
                f"{type(args).__name__} ({args!r:.80})."
            )
            raise ValidationError(msg)
        if self._args_model is None:
            problems = validate_json(self._schema, dict(args))
            if problems:
                raise ValidationError(self._problem_text(problems), [{"msg": p} for p in problems])
            return dict(args)
        return self._validated(dict(args))

    def _validated(self, args: dict[str, Any]) -> dict[str, Any]:
        assert self._args_model is not None
        try:
            parsed = self._args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False)
            problems = []
            for err in errors:
                where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
                if err["type"] == "extra_forbidden":
                    problems.append(f"`{where}`: unexpected argument")
                elif err["type"] == "missing":
                    problems.append(f"`{where}`: missing required argument")
                else:
                    problems.append(f"`{where}`: {err['msg']} (got {err.get('input')!r:.60})")
            raise ValidationError(self._problem_text(problems), [dict(e) for e in errors]) from None
        # The model forbids extra keys, so its ``__dict__`` holds exactly its fields.
        return dict(parsed.__dict__)

    def _problem_text(self, problems: list[str]) -> str:
        return (
            f"invalid arguments for tool {self.name!r}: "
            + "; ".join(problems)
            + ". Call the tool again with arguments that match its schema."
        )

    async def run(self, args: Any, ctx: Context | None = None) -> Any:
        """Validate ``args``, then call the function: an async one is awaited, a sync one runs
        on a warm worker thread (inline on the loop if the tool was made ``blocking=False``)."""
        kwargs = self.validate(args)
        fn = self._fn
        if self._raw_args:
            call_args: tuple[Any, ...] = (kwargs,)
            call_kwargs: dict[str, Any] = {"ctx": ctx} if self._passes_ctx else {}
        else:
            call_args = ()
            call_kwargs = kwargs
            if self._passes_ctx:
                kwargs["ctx"] = ctx
        if self._is_async:
            return await fn(*call_args, **call_kwargs)
        if self._blocking:
            result = await call_blocking(fn, *call_args, **call_kwargs)
        else:
            result = fn(*call_args, **call_kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    @property
    def blocking(self) -> bool:
        """Whether a sync function runs on a worker thread (``False``: inline on the loop)."""
        return self._blocking

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation), as if undecorated."""
        return self._fn(*args, **kwargs)

    @property
    def fn(self) -> Callable[..., Any]:
        """The wrapped function."""
        return self._fn

    def __repr__(self) -> str:
        flag = ", requires_approval=True" if self.requires_approval else ""
        if not self._blocking:
            flag += ", blocking=False"
        return f"Tool({self.name!r}{flag})"


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    in_doubt: Literal["retry", "ask", "fail"] = "retry",
    blocking: bool = True,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    in_doubt: Literal["retry", "ask", "fail"] = "retry",
    blocking: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function callable by a model: ``@tool`` or ``@tool(name=..., description=...)``.

    :param requires_approval: suspend the agent before each call until a human approves it.
    :param in_doubt: in a durable run, what a resume does with a call that started before a
        crash and recorded no result: ``"retry"`` (call again), ``"ask"`` (suspend with the
        call and its arguments shown) or ``"fail"``.
    :param blocking: for a plain ``def``: ``True`` (the default) runs each call on a worker
        thread, so a blocking call (I/O, ``time.sleep``, a heavy computation) never stalls the
        event loop; ``False`` runs it inline on the loop, saving the thread hop — only for
        functions that return at once (pure computation on small inputs). An ``async def``
        tool always runs on the loop; the flag does not change it.
    """
    if fn is not None:
        return Tool.from_function(fn)
    if in_doubt not in ("retry", "ask", "fail"):
        msg = f"@tool(in_doubt=...) must be 'retry', 'ask' or 'fail', got {in_doubt!r}."
        raise ValueError(msg)

    def decorate(f: Callable[..., Any]) -> Tool:
        made = Tool.from_function(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            blocking=blocking,
        )
        made.in_doubt = in_doubt
        return made

    return decorate


# -- signature -> pydantic model --------------------------------------------------------------


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


def _is_context(annotation: Any) -> bool:
    """``Context``, ``Context[Deps]``, or either in a union (``Context | None``)."""
    if annotation is Context:
        return True
    origin = typing.get_origin(annotation)
    if origin is Context:
        return True
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        return any(
            a is Context or typing.get_origin(a) is Context for a in typing.get_args(annotation)
        )
    return False


def _no_schema(tool_name: str, args_model: type[pydantic.BaseModel], exc: Exception) -> str:
    """Why a tool's arguments have no JSON Schema, naming the parameter (found by trying each
    alone), with the way out for a dependency passed as a parameter."""
    for pname, info in args_model.model_fields.items():
        probe = pydantic.create_model(
            "probe",
            __config__=ConfigDict(arbitrary_types_allowed=True),
            **{pname: (info.annotation, ...)},  # type: ignore[call-overload]
        )
        try:
            probe.model_json_schema()
        except pydantic.PydanticUserError:
            return (
                f"tool {tool_name!r}: parameter {pname!r} is a {type_text(info.annotation)}, "
                "which has no JSON Schema, so a model cannot be told what to send for it. A "
                "connection, client or other dependency is not an argument: pass it as "
                "`invoke(..., deps=...)` and read it as `ctx.deps` from a `ctx: Context` "
                "parameter (docs/tools.md, 'Dependencies'). A value the model sends needs a "
                "JSON type (str, int, list, a Schema, ...)."
            )
    return f"tool {tool_name!r}: its arguments have no JSON Schema ({exc})."


def _args_model(
    fn: Callable[..., Any], tool_name: str, param_docs: dict[str, str]
) -> tuple[type[pydantic.BaseModel], bool]:
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        msg = (
            f"cannot resolve the annotations of tool {tool_name!r} ({type(exc).__name__}: "
            f"{exc}); define the types it uses at module level."
        )
        raise TypeError(msg) from exc
    fields: dict[str, Any] = {}
    passes_ctx = False
    for pname, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            msg = (
                f"tool {tool_name!r}: `*{pname}`/`**{pname}` parameters cannot be described to a "
                "model; list each argument explicitly."
            )
            raise TypeError(msg)
        annotation = hints.get(pname, inspect.Parameter.empty)
        if _is_context(annotation) or (pname == "ctx" and annotation is inspect.Parameter.empty):
            passes_ctx = True
            continue
        if annotation is inspect.Parameter.empty:
            msg = (
                f"tool {tool_name!r}: parameter {pname!r} has no type annotation; annotate it "
                f"(e.g. `{pname}: str`) so the model knows what to send."
            )
            raise TypeError(msg)
        default: Any = ... if param.default is inspect.Parameter.empty else param.default
        description = param_docs.get(pname)
        field = (
            pydantic.Field(default, description=description)
            if description
            else pydantic.Field(default)
        )
        fields[pname] = (annotation, field)
    model: type[pydantic.BaseModel] = pydantic.create_model(
        f"{tool_name}_args",
        __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
        **fields,
    )
    return model, passes_ctx


# -- byte-stable schemas ----------------------------------------------------------------------

_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _stable(schema: Any, *, in_names: bool = False) -> Any:
    """Drop titles and sort keys at every level (``properties`` keeps its field names)."""
    if isinstance(schema, dict):
        result: dict[str, Any] = {}
        for key in sorted(schema):
            value = schema[key]
            if in_names:
                result[key] = _stable(value)
            elif key == "title" and isinstance(value, str):
                continue
            elif key in _NAME_MAPS and isinstance(value, dict):
                result[key] = _stable(value, in_names=True)
            else:
                result[key] = _stable(value)
        return result
    if isinstance(schema, list):
        return [_stable(v) for v in schema]
    return schema
