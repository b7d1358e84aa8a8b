"""What every :class:`~tensorsketch.cache.NodeCache` must do, as one check a store's tests
(first-party or a third party's) call with a fresh cache: ``await check_node_cache(cache)``.

It exercises the contract (entries by namespace and key, expiry, the three ways to clear) and
a graph over it (a cached node runs once per distinct input, its writes come back unchanged,
a ``Send`` instance is cached by its own input, a node that fails or suspends is not cached).
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

from tensorsketch.cache.policy import CachePolicy
from tensorsketch.cache.store import NodeCache
from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.graph import Graph
from tensorsketch.interrupts import interrupt, run_info
from tensorsketch.node import Node
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.schema import Schema
from tensorsketch.send import Send

__all__ = ["check_node_cache"]


async def check_node_cache(cache: NodeCache) -> None:
    """Raise ``AssertionError`` naming the first broken promise of ``cache``."""
    await _contract(cache)
    await _in_a_graph(cache)


async def _contract(cache: NodeCache) -> None:
    assert await cache.get("g:A", "k") is None, "a fresh cache has no entry"
    await cache.set("g:A", "k", b"one", None)
    await cache.set("g:A", "k2", b"two", None)
    await cache.set("g:B", "k", b"\x00\xffbytes", None)
    assert await cache.get("g:A", "k") == b"one"
    assert await cache.get("g:B", "k") == b"\x00\xffbytes", "namespaces are apart; bytes exact"
    await cache.set("g:A", "k", b"replaced", None)
    assert await cache.get("g:A", "k") == b"replaced", "set replaces an entry"
    await cache.set("g:A", "short", b"x", 0.2)
    assert await cache.get("g:A", "short") == b"x"
    await asyncio.sleep(0.4)
    assert await cache.get("g:A", "short") is None, "an entry past its ttl is gone"
    assert await cache.clear("g:A", ["k2"]) == 1 and await cache.get("g:A", "k2") is None
    assert await cache.get("g:A", "k") == b"replaced", "clearing one key keeps the others"
    assert await cache.clear("g:A") >= 1 and await cache.get("g:A", "k") is None
    assert await cache.get("g:B", "k") is not None, "clearing a namespace keeps the others"
    await cache.clear()
    assert await cache.get("g:B", "k") is None, "clear() drops everything"
    try:
        await cache.clear(keys=["k"])
    except ValueError:
        pass
    else:
        raise AssertionError("clear(keys=...) without a namespace must be a ValueError")


class _Calls:
    def __init__(self) -> None:
        self.seen: list[str] = []


async def _in_a_graph(cache: NodeCache) -> None:
    calls = _Calls()

    class Job(Schema):
        items: list[str] = []
        item: str = ""
        out: Annotated[list[str], Reducer(operator.add)] = []

    class Work(Node):
        class In(Schema):
            item: str

        class Out(Schema):
            out: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            calls.seen.append(inp.item)
            if inp.item == "boom":
                raise RuntimeError("failed on purpose")
            if inp.item == "ask":
                await interrupt(ctx, "ok?")
            return self.Out(out=[inp.item.upper()])

    class Split(Node):
        async def run(self, ctx: Context, inp: Any) -> None:
            return None

    g = Graph(Job, name="conformance").add(Split).add(Work, cache=CachePolicy(ttl=60))
    g.edge(START, "Split")
    g.router("Split", lambda s: [Send("Work", {"item": x}) for x in s.items])
    g.edge("Work", END)
    app = g.compile(cache=cache)
    first = await app.invoke({"items": ["a", "b"]})
    again = await app.invoke({"items": ["b", "a", "c"]})
    assert first.out == ["A", "B"] and again.out == ["B", "A", "C"], "writes come back unchanged"
    assert calls.seen == ["a", "b", "c"], f"each distinct input runs once, ran {calls.seen}"
    for item in ("boom", "boom"):
        try:
            await app.invoke({"items": [item]})
        except RuntimeError:
            pass
    assert calls.seen.count("boom") == 2, "a node that failed is not cached"
    backend = InMemoryBackend()
    for thread in ("t1", "t2"):
        out = await app.invoke({"items": ["ask"]}, thread_id=thread, backend=backend)
        assert run_info(out).suspended
    assert calls.seen.count("ask") == 2, "a node that suspended is not cached"
    assert await cache.clear("conformance:Work") >= 3
    await app.invoke({"items": ["a"]})
    assert calls.seen.count("a") == 2, "a cleared entry runs the node again"
