"""Node result caching (``add(Node, cache=CachePolicy(...))``, ``compile(cache=...)``) on the
stores core ships; tensorsketch-backends runs the same check on PostgreSQL and Redis.

Mirrors LangGraph's node caching test ``test_in_one_fan_out_state_graph_waiting_edge_multiple``
(libs/langgraph/tests/test_pregel.py, parametrized ``with_cache``): ported below under that
name — a cached node is not re-run for an input it has seen, and clearing the cache re-runs it.
The other tests here check the same contract piece by piece.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema
from tensorsketch.cache import CachePolicy, InMemoryCache, NodeCache, SqlCache, SqliteCache
from tensorsketch.observability.memory import InMemoryTracer
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.cache_conformance import check_node_cache


@pytest.mark.parametrize("kind", ["memory", "sqlite-file", "sqlite-backend"])
async def test_the_cache_contract(kind: str, tmp_path: Path) -> None:
    cache: NodeCache
    if kind == "memory":
        cache = InMemoryCache()
    elif kind == "sqlite-file":
        cache = SqliteCache(tmp_path / "cache.db")
    else:  # beside a graph's checkpoints, in the same file
        cache = SqlCache(SqliteBackend(tmp_path / "runs.db"))
    await check_node_cache(cache)


class Q(Schema):
    question: str = ""
    request_id: str = ""
    answer: str = ""


RAN: list[str] = []


class Ask(Node):
    class In(Schema):
        question: str
        request_id: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        RAN.append(inp.question)
        return self.Out(answer=inp.question[::-1])


def _app(policy: CachePolicy, cache: NodeCache) -> Any:
    g = Graph(Q, name="qa").add(Ask, cache=policy).edge(START, "Ask").edge("Ask", END)
    return g.compile(cache=cache)


async def test_a_key_function_ignores_what_does_not_change_the_result() -> None:
    RAN.clear()
    app = _app(CachePolicy(key=lambda inp: inp.question), InMemoryCache())
    await app.invoke({"question": "abc", "request_id": "r1"})
    out = await app.invoke({"question": "abc", "request_id": "r2"})
    assert out.answer == "cba" and RAN == ["abc"]
    by_input = _app(CachePolicy(), InMemoryCache())  # default: the whole input is the key
    await by_input.invoke({"question": "abc", "request_id": "r1"})
    await by_input.invoke({"question": "abc", "request_id": "r2"})
    assert RAN == ["abc", "abc", "abc"]


async def test_a_hit_is_an_event_and_a_span_attribute() -> None:
    RAN.clear()
    tracer = InMemoryTracer()
    app = _app(CachePolicy(ttl=30), InMemoryCache())
    await app.invoke({"question": "x"})
    events = [(e.type, e.node, e.data) async for e in app.stream({"question": "x"}, tracer=tracer)]
    assert ("cached", "Ask") in [(t, n) for t, n, _ in events]
    end = next(d for t, _, d in events if t == "node_end")
    assert end["cached"] is True and end["writes"] == {"answer": "x"}
    (span,) = [s for s in tracer.spans if s.name == "Ask"]
    assert span.attributes["tensorsketch.cached"] is True
    assert RAN == ["x"]


async def test_without_a_cache_store_a_policy_changes_nothing() -> None:
    RAN.clear()
    g = Graph(Q).add(Ask, cache=CachePolicy()).edge(START, "Ask").edge("Ask", END)
    app = g.compile()
    await app.invoke({"question": "x"})
    await app.invoke({"question": "x"})
    assert RAN == ["x", "x"]


def test_bad_arguments_say_what_to_pass() -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        CachePolicy(ttl=0)
    with pytest.raises(TypeError, match="takes a CachePolicy"):
        Graph(Q).add(Ask, cache=60)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a NodeCache"):
        Graph(Q).add(Ask).edge(START, "Ask").compile(cache={})  # type: ignore[arg-type]


async def test_an_input_without_a_json_form_asks_for_a_key() -> None:
    class Odd(Schema):
        thing: object = None
        out: str = ""

    class UsesThing(Node):
        class In(Schema):
            thing: object

        class Out(Schema):
            out: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(out="ok")

    g = Graph(Odd).add(UsesThing, cache=CachePolicy()).edge(START, "UsesThing")
    app = g.compile(cache=InMemoryCache())
    with pytest.raises(TypeError, match=r"give the policy a key: CachePolicy\(key="):
        await app.invoke({"thing": object()})


# -- LangGraph's test_in_one_fan_out_state_graph_waiting_edge_multiple, ported ------------------


class Docs(Schema):
    query: str = ""
    answer: str = ""
    docs: Annotated[list[str], Reducer(lambda old, new: sorted(old + new))] = []


REWRITES: list[str] = []


class RewriteQuery(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        REWRITES.append(inp.query)
        return self.Out(query=f"query: {inp.query}")


class AnalyzerOne(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(query=f"analyzed: {inp.query}")


def _retriever(found: list[str]) -> type[Node]:
    class Retriever(Node):
        class Out(Schema):
            docs: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(docs=found)

    return Retriever


class Decider(Node):
    async def run(self, ctx: Context, inp: Any) -> None:
        return None


class Qa(Node):
    class In(Schema):
        docs: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(answer=",".join(inp.docs))


def _waiting_edge_multiple(cache: NodeCache, with_cache: bool) -> Any:
    g = Graph(Docs).add(
        RewriteQuery, name="rewrite_query", cache=CachePolicy() if with_cache else None
    )
    g.add(AnalyzerOne, name="analyzer_one").add(Decider, name="decider").add(Qa, name="qa")
    g.add(_retriever(["doc1", "doc2"]), name="retriever_one")
    g.add(_retriever(["doc3", "doc4"]), name="retriever_two")
    g.edge(START, "rewrite_query").edge("rewrite_query", "analyzer_one")
    g.edge("analyzer_one", "retriever_one").edge("rewrite_query", "retriever_two")
    g.edge(["retriever_one", "retriever_two"], "decider")
    g.conditional(
        "decider",
        lambda s: "qa" if s.query.count("analyzed") > 1 else "rewrite_query",
        {"qa": "qa", "rewrite_query": "rewrite_query"},
    )
    return g.edge("qa", END).compile(cache=cache)


@pytest.mark.parametrize("with_cache", [True, False])
async def test_in_one_fan_out_state_graph_waiting_edge_multiple(with_cache: bool) -> None:
    """LangGraph's ``test_in_one_fan_out_state_graph_waiting_edge_multiple`` (test_pregel.py):
    ``rewrite_query`` runs twice per run (the decider loops back once); cached, a second run
    with the same question hits the cache both times, and a cleared cache runs it again."""
    REWRITES.clear()
    cache = InMemoryCache()
    app = _waiting_edge_multiple(cache, with_cache)
    question = {"query": "what is weather in sf"}
    expected = {
        "query": "analyzed: query: analyzed: query: what is weather in sf",
        "answer": "doc1,doc1,doc2,doc2,doc3,doc3,doc4,doc4",
        "docs": ["doc1", "doc1", "doc2", "doc2", "doc3", "doc3", "doc4", "doc4"],
    }
    assert (await app.invoke(question)).model_dump() == expected
    events = [(e.type, e.node) async for e in app.stream(question)]
    hits = [node for kind, node in events if kind == "cached"]
    assert hits == (["rewrite_query", "rewrite_query"] if with_cache else [])
    assert len(REWRITES) == (2 if with_cache else 4)
    if with_cache:
        await cache.clear()
        assert (await app.invoke(question)).model_dump() == expected
        assert len(REWRITES) == 4
