"""The debugger's view of what a thread read from and wrote to its memory store
(``GET /api/debug/memory?thread=ID``): every journaled ``ctx.memory`` call, with namespace,
key, operation, value and revision, and the superstep, node and checkpoint it belongs to."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_source import GraphSource
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.effect_keys import intent_key
from tensorsketch.memory import HashingEmbedder, InMemoryStore
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.services import POSTGRES_DSN, private_name

TOKEN = "memory-token-1"
BASE = "http://127.0.0.1:8765"

#: Two supersteps: ``Recall`` reads (a hit, a miss, a search), ``Note`` writes and deletes.
VISITS = textwrap.dedent(
    """
    from tensorsketch import END, START, Context, Graph, Node, Schema


    class Visit(Schema):
        user: str = ""
        theme: str = ""
        count: int = 0


    class Recall(Node):
        class In(Schema):
            user: str

        class Out(Schema):
            theme: str

        async def run(self, ctx: Context, inp: In) -> Out:
            ns = ("users", inp.user)
            prefs = await ctx.memory.get(ns, "prefs")
            await ctx.memory.get(ns, "nickname")
            await ctx.memory.search(("notes", inp.user), "green tea", limit=2)
            return self.Out(theme=prefs.value["theme"] if prefs else "light")


    class Note(Node):
        class In(Schema):
            user: str
            theme: str

        class Out(Schema):
            count: int

        async def run(self, ctx: Context, inp: In) -> Out:
            ns = ("users", inp.user)
            await ctx.memory.put(ns, "visits", {"count": 1, "theme": inp.theme})
            await ctx.memory.delete(ns, "draft")
            return self.Out(count=1)


    app = (
        Graph(Visit)
        .add(Recall)
        .add(Note)
        .edge(START, "Recall")
        .edge("Recall", "Note")
        .edge("Note", END)
        .compile()
    )
    """
)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url=BASE,
        headers={"X-Studio-Token": TOKEN},
    )


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        store: Backend = SqliteBackend(tmp_path / "runs.db")
        yield store
        await store.aclose()
        return
    postgres_server = pytest.importorskip("tensorsketch.testing.postgres_server")
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    postgres_server.reachable(POSTGRES_DSN)
    schema = private_name("studio_memory")
    store = PostgresBackend(POSTGRES_DSN, schema=schema)
    yield store
    await store.aclose()
    postgres_server.drop_schema(POSTGRES_DSN, schema)


async def seed_memory() -> InMemoryStore:
    store = InMemoryStore(embedder=HashingEmbedder(), index={("notes",): ["text"]})
    await store.put(("users", "ana"), "prefs", {"theme": "dark"})
    await store.put(("users", "ana"), "draft", {"text": "half"})
    await store.put(("notes", "ana"), "n1", {"text": "drinks green tea"})
    return store


async def run_visit(path: Path, backend: Backend, thread: str, store: InMemoryStore) -> None:
    """Run the visits graph of ``path`` durably on ``thread`` against ``store``."""
    loaded = GraphSource(path).get()
    assert loaded.graph is not None, loaded.error
    await loaded.graph.invoke({"user": "ana"}, thread_id=thread, backend=backend, memory=store)


async def test_the_items_a_thread_read_and_wrote_are_listed_per_step(
    tmp_path: Path, backend: Backend
) -> None:
    path = tmp_path / "visits.py"
    path.write_text(VISITS, encoding="utf-8")
    store = await seed_memory()
    await run_visit(path, backend, "visit-ana", store)
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
        view = _ok(await client.get("/api/debug/memory", params={"thread": "visit-ana"}))
        thread = _ok(await client.get("/api/debug/threads/visit-ana"))
    assert view["supported"] is True and view["thread_id"] == "visit-ana"
    rows = [
        (o["step"], o["node"], o["op"], o["namespace"], o["key"], o["rev"], o["value"])
        for o in view["ops"]
    ]
    assert rows == [
        (0, "Recall", "get", ["users", "ana"], "prefs", 1, {"theme": "dark"}),
        (0, "Recall", "get", ["users", "ana"], "nickname", None, None),
        (0, "Recall", "search", ["notes", "ana"], "n1", 1, {"text": "drinks green tea"}),
        (1, "Note", "put", ["users", "ana"], "visits", 1, {"count": 1, "theme": "dark"}),
        (1, "Note", "delete", ["users", "ana"], "draft", None, None),
    ]
    found = {o["key"]: o["found"] for o in view["ops"]}
    assert found == {"prefs": True, "nickname": False, "n1": True, "visits": True, "draft": True}
    assert [o["query"] for o in view["ops"] if o["op"] == "search"] == ["green tea"]
    assert all(o["recorded"] for o in view["ops"])
    # each op names the checkpoint its superstep produced (the barrier that closed it)
    by_step = {c["step"]: c["id"] for c in thread["checkpoints"] if c["source"] == "loop"}
    assert [o["checkpoint_id"] for o in view["ops"]] == [by_step[1]] * 3 + [by_step[2]] * 2
    assert (await store.get(("users", "ana"), "visits")).value == {"count": 1, "theme": "dark"}


async def test_a_write_in_doubt_and_an_old_journal_are_shown_not_refused(tmp_path: Path) -> None:
    """A write whose intent has no result is listed as not recorded; an intent written before
    intents carried their arguments shows the op without its address (never a 500)."""
    path = tmp_path / "visits.py"
    path.write_text(VISITS, encoding="utf-8")
    backend = SqliteBackend(tmp_path / "runs.db")
    await run_visit(path, backend, "t-old", await seed_memory())
    intent = {"effect": "memory.put", "node": "Note", "step": 5, "args": None, "policy": "retry"}
    await backend.record_effect("t-old", intent_key("5:Note:1:memory.put"), _dumps(backend, intent))
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    try:
        async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
            view = _ok(await client.get("/api/debug/memory?thread=t-old"))
    finally:
        await backend.aclose()
    [doubt] = [o for o in view["ops"] if not o["recorded"]]
    assert (doubt["op"], doubt["step"], doubt["namespace"], doubt["key"]) == ("put", 5, None, None)
    assert doubt["checkpoint_id"] is None


def _dumps(backend: Backend, value: Any) -> bytes:
    return backend.serializer.dumps([value])


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("", 400, "?thread=ID"),
        ("?thread=", 400, "?thread=ID"),
        ("?thread=nobody", 404, "no thread 'nobody'"),
    ],
)
async def test_bad_requests_are_4xx(tmp_path: Path, query: str, status: int, says: str) -> None:
    path = tmp_path / "visits.py"
    path.write_text(VISITS, encoding="utf-8")
    backend = SqliteBackend(tmp_path / "runs.db")
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    try:
        async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
            answer = _ok(await client.get(f"/api/debug/memory{query}"), status)
    finally:
        await backend.aclose()
    assert says in answer["error"]


async def test_without_a_backend_the_view_is_off(tmp_path: Path) -> None:
    path = tmp_path / "visits.py"
    path.write_text(VISITS, encoding="utf-8")
    async with _client(create_app(Studio(path=path, token=TOKEN, project=tmp_path))) as client:
        answer = _ok(await client.get("/api/debug/memory?thread=t"), 409)
    assert "--backend" in answer["error"]
