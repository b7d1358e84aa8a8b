"""Composition patterns called inside a node body: map/reduce, parallel calls, sub-graphs,
and agents as tools.

Each journals its work under explicit, deterministic keys: a base key taken from the node's
context in call order (``superstep:node:call:name``), plus the item's position. Completion
order never enters a key, so after a crash only the items that had not finished run again.

A sub-graph run from a durable node is itself durable: it runs on a child thread of the same
backend (``<thread>/<key>``), so a crash inside it resumes it mid-way, and a suspension inside
it (a specialist's tool waiting for approval) suspends the caller too. Resuming the caller
with the decision resumes the child with it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from tensorsketch.context import Context
from tensorsketch.effects import INSIDE
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.schema import Schema
from tensorsketch.suspension import Interrupt
from tensorsketch.tools import Tool

__all__ = ["as_tool", "gather_map", "parallel", "run_subgraph"]

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S", bound=Schema)


async def _await(fn: Callable[[], Any]) -> Any:
    result = fn()
    if inspect.isawaitable(result):
        result = await result
    return result


async def _all(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run every call concurrently; results in call order.

    The first failure (in call order) cancels the rest and is raised as itself. Calls that
    suspend (:class:`Interrupt`) let the others finish, then suspend together.
    """
    if not calls:
        return []
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(_await(call)) for call in calls]
    try:
        pending: set[asyncio.Task[Any]] = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            failed = [
                t
                for t in tasks
                if t.done()
                and not t.cancelled()
                and t.exception() is not None
                and not isinstance(t.exception(), Interrupt)
            ]
            if failed:
                error = failed[0].exception()
                assert error is not None
                raise error
        interrupts = [t.exception() for t in tasks if isinstance(t.exception(), Interrupt)]
        if interrupts:
            raise Interrupt.merge([i for i in interrupts if isinstance(i, Interrupt)])
        return [t.result() for t in tasks]
    finally:
        leftover = [t for t in tasks if not t.done()]
        for t in leftover:
            t.cancel()
        if leftover:
            await asyncio.wait(leftover)


async def gather_map(
    ctx: Context | None,
    items: Iterable[T],
    fn: Callable[[T], Awaitable[R]],
    *,
    max_concurrency: int | None = None,
) -> list[R]:
    """Run ``fn`` over every item concurrently; results come back in item order.

    With ``ctx``, each item is journaled under ``<base>/<index>``: a resumed run replays the
    items that finished and runs only the rest. ``max_concurrency`` caps items in flight.
    """
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        msg = f"`max_concurrency` must be an int >= 1 (or None), got {max_concurrency!r}."
        raise ValueError(msg)
    values = list(items)
    base = ctx.next_key("gather_map") if ctx is not None else None
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    def item_call(index: int, item: T) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            async def work() -> Any:
                return await _await(lambda: fn(item))

            if limit is not None:
                async with limit:
                    return await _journal(ctx, base, index, "gather_map", work)
            return await _journal(ctx, base, index, "gather_map", work)

        return call

    results: list[R] = await _all([item_call(i, item) for i, item in enumerate(values)])
    return results


async def parallel(ctx: Context | None, *fns: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run independent zero-argument calls at once; results in argument order, each durable."""
    for fn in fns:
        if not callable(fn):
            msg = f"parallel() takes zero-argument callables (e.g. `lambda: fetch(x)`), got {fn!r}."
            raise TypeError(msg)
    base = ctx.next_key("parallel") if ctx is not None else None

    def call_at(index: int, fn: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            return await _journal(ctx, base, index, "parallel", lambda: _await(fn))

        return call

    return await _all([call_at(i, fn) for i, fn in enumerate(fns)])


async def _journal(
    ctx: Context | None,
    base: str | None,
    index: int,
    name: str,
    work: Callable[[], Awaitable[Any]],
) -> Any:
    if ctx is None or base is None:
        return await work()
    return await ctx.effects.once(f"{base}/{index}", work)


# -- sub-graphs -------------------------------------------------------------------------------


def _check_graph(graph: Any, where: str) -> None:
    if not isinstance(graph, CompiledGraph):
        msg = (
            f"{where} needs a compiled graph (`Graph(...).compile()` or `create_agent(...)`), "
            f"got {graph!r}."
        )
        raise TypeError(msg)


async def run_subgraph(
    graph: CompiledGraph[S],
    input: S | dict[str, Any] | None,
    ctx: Context | None = None,
    *,
    name: str = "run_subgraph",
    max_steps: int = 25,
) -> S:
    """Run a compiled graph from inside a node and return its final (typed) state.

    With ``ctx`` the whole call is one durable step of the caller (its result is journaled),
    its spans nest under the caller's, and its events join the caller's stream under a
    namespace. If the sub-graph suspends, so does the caller.
    """
    _check_graph(graph, "run_subgraph()")
    if ctx is None:
        return await graph.invoke(input, max_steps=max_steps)
    key = ctx.next_key(name)

    async def call() -> S:
        state: S = await ctx.run_nested(graph, input, key=key, label=name, max_steps=max_steps)
        return state

    result: S = await ctx.effects.once(key, call, INSIDE)  # the child journals its own
    return result


def as_tool(
    graph: CompiledGraph[Any],
    *,
    name: str,
    description: str,
    input_key: str = "query",
    output_key: str = "output",
    arg: str = "request",
    arg_description: str | None = None,
) -> Tool:
    """Wrap a compiled graph (typically an agent) as a tool another agent can call.

    The tool takes one string argument ``arg``; a call runs the graph with
    ``{input_key: <arg>}`` (through :func:`run_subgraph`, so it is durable and traced under
    the caller) and returns its ``output_key`` field as the tool result.
    """
    _check_graph(graph, "as_tool()")
    fields = graph.state_schema.model_fields
    for label, key in (("input_key", input_key), ("output_key", output_key)):
        if key not in fields:
            known = ", ".join(repr(f) for f in fields)
            msg = (
                f"as_tool({name!r}): {label}={key!r} is not a field of "
                f"{graph.state_schema.__name__} (fields: {known}); point {label} at the field "
                "the graph reads its request from / writes its answer to."
            )
            raise ValueError(msg)
    schema = {
        "type": "object",
        "properties": {
            arg: {
                "type": "string",
                "description": arg_description or f"What to ask {name!r} to do.",
            }
        },
        "required": [arg],
        "additionalProperties": False,
    }

    async def call(args: dict[str, Any], ctx: Context | None = None) -> Any:
        state = await run_subgraph(graph, {input_key: args[arg]}, ctx=ctx, name=f"as_tool:{name}")
        return getattr(state, output_key)

    return Tool.from_schema(name, description, schema, call)
