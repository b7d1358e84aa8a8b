"""The Studio's debugger API (``/api/debug``) in-process, on SQLite and PostgreSQL: browse a
recorded thread against ``get_state``/``aget_state_at``, fork with an edited value, step
superstep by superstep, approve a suspended agent's tool call, replay a node, and every
hostile request refused with a 4xx."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_source import (
    GraphSource,
    backend_label,
    open_backend,
    parse_options,
)
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.canvas.studio.server import StudioServer
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.services import POSTGRES_DSN, private_name

TOKEN = "debug-token-1"
BASE = "http://127.0.0.1:8765"
#: A password in the DSN the page must never see (the test server trusts any password).
SECRET = "hunter2-not-for-the-page"

LOOP = textwrap.dedent(
    """
    from operator import add
    from typing import Annotated

    from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


    class Counter(Schema):
        count: int = 0
        limit: int = 3
        log: Annotated[list[str], Reducer(add)] = []


    class Increment(Node):
        class In(Schema):
            count: int

        class Out(Schema):
            count: int
            log: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            n = inp.count + 1
            note = await ctx.step("note", lambda: f"effect {n}")
            return self.Out(count=n, log=[f"step {ctx.superstep}: {n} ({note})"])


    def keep_going(state: Counter) -> str:
        return END if state.count >= state.limit else "Increment"


    app = (
        Graph(Counter).add(Increment).edge(START, "Increment").conditional("Increment", keep_going)
    ).compile()
    """
)

AGENT = textwrap.dedent(
    '''
    from pathlib import Path

    from tensorsketch import FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    LOG = Path(__file__).with_name("refunds.log")


    @tool(requires_approval=True)
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        with LOG.open("a", encoding="utf-8") as out:
            out.write(order_id + "\\n")
        return f"refunded {order_id}"


    def policy(messages, tools):
        if messages and messages[-1].role == "tool":
            return assistant("refund issued")
        call = ToolCall(id="call_1", name="issue_refund", args={"order_id": "A-17"})
        return assistant(tool_calls=[call])


    app = create_agent(FakeProvider(policy=policy), tools=[issue_refund])
    '''
)


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
    schema = private_name("studio")  # private to this test, dropped after
    store = PostgresBackend(_with_password(POSTGRES_DSN), schema=schema)
    yield store
    await store.aclose()
    postgres_server.drop_schema(POSTGRES_DSN, schema)


def _with_password(dsn: str) -> str:
    scheme, _, rest = dsn.partition("://")
    user, at, host = rest.partition("@")
    if not at:
        return dsn
    return f"{scheme}://{user.split(':')[0]}:{SECRET}@{host}"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _load(path: Path) -> CompiledGraph[Any]:
    loaded = GraphSource(path).get()
    assert loaded.graph is not None, loaded.error
    return loaded.graph


def _client(path: Path, backend: Backend | None, url: str | None = None) -> httpx.AsyncClient:
    studio = Studio(path=path, token=TOKEN, project=path.parent)
    debugger = Debugger(backend, path=path, url=url) if backend is not None else None
    app = create_app(studio, debugger=debugger)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    )


@pytest.fixture
def loop_file(tmp_path: Path) -> Path:
    return _write(tmp_path, "loop_graph.py", LOOP)


@pytest.fixture
async def client(loop_file: Path, backend: Backend) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(loop_file, backend, _with_password(POSTGRES_DSN)) as c:
        yield c


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


# -- browsing ----------------------------------------------------------------------------------


async def test_status_names_the_backend_and_graph(client: httpx.AsyncClient, backend: Backend):
    status = _ok(await client.get("/api/debug/status"))
    assert status["enabled"] is True
    assert status["backend"] == backend.name
    assert status["graph"] == "app"
    assert status["graph_error"] is None
    assert status["tasks"] is True


async def test_browse_a_thread_matches_get_state(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 3}, thread_id="t-browse", backend=backend)
    history = await app.aget_history("t-browse", backend)

    listed = _ok(await client.get("/api/debug/threads"))["threads"]
    row = next(t for t in listed if t["thread_id"] == "t-browse")
    assert row["checkpoints"] == len(history)
    assert row["status"] == "completed" and row["run_id"] is None  # from the head checkpoint

    detail = _ok(await client.get("/api/debug/threads/t-browse"))
    assert [c["id"] for c in detail["checkpoints"]] == [c.id for c in history]
    assert detail["head"] == history[-1].id
    assert detail["status"] == "completed"
    assert [c["ran"] for c in detail["checkpoints"]] == [
        [],
        ["Increment"],
        ["Increment"],
        ["Increment"],
    ]
    assert detail["checkpoints"][-1]["next"] == []

    for checkpoint in history:
        shown = _ok(await client.get(f"/api/debug/threads/t-browse/checkpoints/{checkpoint.id}"))
        expected = (await app.aget_state_at("t-browse", backend, checkpoint.id)).model_dump()
        assert {k: v["value"] for k, v in shown["state"].items()} == expected
        assert shown["next"] == list(checkpoint.next)
    latest = app.get_state("t-browse", backend)
    assert latest is not None
    last = _ok(await client.get(f"/api/debug/threads/t-browse/checkpoints/{history[-1].id}"))
    assert last["state"]["count"] == {
        "value": latest.count,
        "truncated": False,
        "changed": True,
        "previous": 2,
        "present": True,
    }
    assert last["state"]["limit"]["changed"] is False
    # the effect journaled by the superstep that produced the checkpoint
    assert [(e["key"], e["node"], e["preview"]) for e in last["effects"]] == [
        ("2:Increment:0:note", "Increment", "effect 3")
    ]


async def test_large_values_are_truncated_with_a_full_value_endpoint(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.aupdate_state("t-big", backend, {"log": ["x" * 5000]})
    head = _ok(await client.get("/api/debug/threads/t-big"))["head"]
    shown = _ok(await client.get(f"/api/debug/threads/t-big/checkpoints/{head}"))
    assert shown["state"]["log"]["truncated"] is True
    assert isinstance(shown["state"]["log"]["value"], str)
    assert len(shown["state"]["log"]["value"].encode()) <= 2048 + 3
    full = _ok(await client.get(f"/api/debug/threads/t-big/checkpoints/{head}/value?channel=log"))
    assert full == {"channel": "log", "value": ["x" * 5000]}
    missing = await client.get(f"/api/debug/threads/t-big/checkpoints/{head}/value?channel=nope")
    assert missing.status_code == 404


async def test_threads_are_this_graphs_newest_first_paged_and_searchable(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path, tmp_path: Path
):
    app = _load(loop_file)
    for n in range(5):
        await app.invoke({"limit": 1}, thread_id=f"loop-{n}", backend=backend)
    (tmp_path / "other").mkdir()
    other = _load(_write(tmp_path / "other", "agent_graph.py", AGENT))
    await other.invoke({"query": "hi"}, thread_id="agent-thread", backend=backend)

    ids = [t["thread_id"] for t in _ok(await client.get("/api/debug/threads"))["threads"]]
    assert ids == [f"loop-{n}" for n in reversed(range(5))]  # not the agent's thread

    first = _ok(await client.get("/api/debug/threads?limit=2"))
    assert [t["thread_id"] for t in first["threads"]] == ["loop-4", "loop-3"]
    second = _ok(await client.get(f"/api/debug/threads?limit=2&cursor={first['next_cursor']}"))
    assert [t["thread_id"] for t in second["threads"]] == ["loop-2", "loop-1"]

    found = _ok(await client.get("/api/debug/threads?q=OOP-3"))["threads"]
    assert [t["thread_id"] for t in found] == ["loop-3"]


async def test_search_by_run_label_and_status_from_the_run_record(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    from tensorsketch.runs import AsyncRunner

    app = _load(loop_file)
    runner = AsyncRunner(app, backend=backend)
    try:
        record = await runner.submit({"limit": 2}, labels={"customer": "acme-corp"})
        await runner.await_run(record.run_id, timeout=30)
    finally:
        await runner.aclose()
    await app.invoke({"limit": 1}, thread_id="unlabelled", backend=backend)
    found = _ok(await client.get("/api/debug/threads?q=acme"))["threads"]
    assert [t["thread_id"] for t in found] == [record.thread_id]
    assert found[0]["status"] == "completed"
    assert found[0]["label"] == "customer=acme-corp"
    detail = _ok(await client.get(f"/api/debug/threads/{record.thread_id}"))
    assert detail["run"]["run_id"] == record.run_id


async def test_thread_ids_with_slashes_and_fork_branches(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 2}, thread_id="team/a b/run#1", backend=backend)
    history = await app.aget_history("team/a b/run#1", backend)
    quoted = "team/a%20b/run%231"
    detail = _ok(await client.get(f"/api/debug/threads/{quoted}"))
    assert detail["thread_id"] == "team/a b/run#1" and len(detail["checkpoints"]) == 3
    shown = _ok(await client.get(f"/api/debug/threads/{quoted}/checkpoints/{history[1].id}"))
    assert shown["state"]["count"]["value"] == 1
    await app.fork(
        backend, "team/a b/run#1", history[1].id, "team/fork", {"limit": 3}, effects="rerun"
    )
    forked = _ok(await client.get("/api/debug/threads/team/fork"))
    first = forked["checkpoints"][0]
    assert first["parent_id"] == history[1].id and first["fork"] is True
    assert first["source"] == "fork"
    root = _ok(await client.get(f"/api/debug/threads/team/fork/checkpoints/{first['id']}"))
    assert not any(v["changed"] for v in root["state"].values())  # its parent is elsewhere
    suspended = _ok(await client.get("/api/debug/threads?q=team/"))["threads"]
    assert {t["thread_id"]: t["status"] for t in suspended} == {
        "team/fork": "completed",
        "team/a b/run#1": "completed",
    }


# -- writing -----------------------------------------------------------------------------------


async def test_fork_with_an_edited_value(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 3}, thread_id="t-fork", backend=backend)
    history = await app.aget_history("t-fork", backend)
    at = history[1]

    refused = await client.post(
        "/api/debug/threads/t-fork/fork", json={"checkpoint_id": at.id, "values": {"limit": 5}}
    )
    assert refused.status_code == 403
    bad = await client.post(
        "/api/debug/threads/t-fork/fork",
        json={"checkpoint_id": at.id, "values": {"limit": "five"}, "confirm": True},
    )
    assert bad.status_code == 422
    assert bad.json()["channel"] == "limit"
    assert "valid integer" in bad.json()["error"]
    unknown = await client.post(
        "/api/debug/threads/t-fork/fork",
        json={"checkpoint_id": at.id, "values": {"limt": 5}, "confirm": True},
    )
    assert unknown.status_code == 422 and unknown.json()["channel"] == "limt"

    forked = _ok(
        await client.post(
            "/api/debug/threads/t-fork/fork",
            json={
                "checkpoint_id": at.id,
                "values": {"limit": 5},
                "new_thread_id": "t-fork-alt",
                "confirm": True,
            },
        )
    )
    assert forked["thread_id"] == "t-fork-alt"
    assert forked["status"] == "pending"  # branched, not run
    state = await app.aget_state("t-fork-alt", backend)
    assert state is not None and state.limit == 5 and state.count == at.values["count"]
    fork_history = await app.aget_history("t-fork-alt", backend)
    assert fork_history[0].parent_id == at.id  # the fork point
    assert len(await app.aget_history("t-fork", backend)) == len(history)  # untouched

    run = {"checkpoint_id": at.id, "values": {"limit": 4}, "run": True, "confirm": True}
    wrong = await client.post("/api/debug/threads/t-fork/fork", json={**run, "effects": "skip"})
    assert wrong.status_code == 400 and "effects= takes 'reuse'" in wrong.json()["error"]
    # The origin ran the loop's effects after the fork point: the fork must be told what to
    # do with them, or it stops before the first one.
    stopped = await client.post("/api/debug/threads/t-fork/fork", json=run)
    assert "effects='rerun'" in stopped.text
    ran = _ok(await client.post("/api/debug/threads/t-fork/fork", json={**run, "effects": "rerun"}))
    done = await app.aget_state(ran["thread_id"], backend)
    assert done is not None and done.count == 4 and ran["status"] == "completed"
    again = await client.post(
        "/api/debug/threads/t-fork/fork",
        json={"checkpoint_id": at.id, "new_thread_id": "t-fork-alt", "confirm": True},
    )
    assert again.status_code == 409


ROUTER = textwrap.dedent(
    """
    from typing import Literal

    from tensorsketch import END, START, Context, Graph, Node, Schema


    class Ticket(Schema):
        query: str = ""
        intent: Literal["billing", "tech"] = "billing"
        answer: str = ""


    class Classify(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            intent: Literal["billing", "tech"]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(intent="tech" if "crash" in inp.query else "billing")


    class Billing(Node):
        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: None) -> Out:
            return self.Out(answer="billing")


    class Tech(Node):
        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: None) -> Out:
            return self.Out(answer="tech")


    def route(state: Ticket) -> str:
        return {"billing": "Billing", "tech": "Tech"}[state.intent]


    app = (
        Graph(Ticket).add(Classify).add(Billing).add(Tech)
        .edge(START, "Classify").conditional("Classify", route)
        .edge("Billing", END).edge("Tech", END)
    ).compile()
    """
)


async def test_an_edit_applied_as_a_node_routes_again(backend: Backend, tmp_path: Path) -> None:
    """The issue's case: at a checkpoint where Billing is next, intent edited to "tech". Kept
    plan: Billing still runs (the answer's ``next`` says so before anything runs); applied as
    Classify: the route reads the edited state and Tech runs — for a fork and for an update."""
    path = _write(tmp_path, "router.py", ROUTER)
    app = _load(path)
    await app.invoke(
        {"query": "refund please"}, thread_id="t-r", backend=backend, interrupt_before=["Billing"]
    )
    head = (await app.aget_history("t-r", backend))[-1]
    url = "/api/debug/threads/t-r/fork"
    edit = {"checkpoint_id": head.id, "values": {"intent": "tech"}, "confirm": True}
    async with _client(path, backend) as client:
        kept = _ok(await client.post(url, json={**edit, "run": False}))
        assert kept["next"] == ["Billing"]
        routed = _ok(await client.post(url, json={**edit, "run": False, "as_node": "Classify"}))
        assert routed["next"] == ["Tech"]
        ran = _ok(await client.post(url, json={**edit, "run": True, "as_node": "Classify"}))
        done = await app.aget_state(ran["thread_id"], backend)
        assert done is not None and done.answer == "tech" and ran["status"] == "completed"
        bad = await client.post(url, json={**edit, "as_node": "Nope"})
        assert bad.status_code == 404 and "Classify" in bad.json()["error"]
        update = _ok(
            await client.post(
                "/api/debug/threads/t-r/update",
                json={"values": {"intent": "tech"}, "as_node": "Classify", "confirm": True},
            )
        )
        assert update["next"] == ["Tech"]


async def test_forks_and_their_origin_link_each_other(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 3}, thread_id="t-tree", backend=backend)
    history = await app.aget_history("t-tree", backend)
    alone = _ok(await client.get("/api/debug/threads/t-tree"))
    assert alone["forked_from"] is None
    assert all(c["forks"] == [] for c in alone["checkpoints"])
    # One fork from the page's API, one in code, both from history[1]; one from history[2].
    body = {"checkpoint_id": history[1].id, "new_thread_id": "t-tree-a", "confirm": True}
    _ok(await client.post("/api/debug/threads/t-tree/fork", json=body))
    await app.fork(backend, "t-tree", history[1].id, "t-tree-b", {"limit": 5}, effects="rerun")
    await app.fork(backend, "t-tree", history[2].id, "t-tree-c", run=False)
    firsts = {t: (await app.aget_history(f"t-tree-{t}", backend))[0].id for t in "abc"}

    origin = _ok(await client.get("/api/debug/threads/t-tree"))
    forks = {c["id"]: c["forks"] for c in origin["checkpoints"]}
    assert forks[history[1].id] == [
        {"thread_id": "t-tree-a", "checkpoint_id": firsts["a"]},
        {"thread_id": "t-tree-b", "checkpoint_id": firsts["b"]},
    ]
    assert forks[history[2].id] == [{"thread_id": "t-tree-c", "checkpoint_id": firsts["c"]}]
    assert forks[history[0].id] == [] and forks[history[-1].id] == []
    for name, at in (("a", history[1]), ("b", history[1]), ("c", history[2])):
        fork = _ok(await client.get(f"/api/debug/threads/t-tree-{name}"))
        expected = {"thread_id": "t-tree", "checkpoint_id": at.id, "step": at.step}
        assert fork["forked_from"] == expected
        assert fork["checkpoints"][0]["id"] == firsts[name]
    # A fork of a fork hangs off the fork, not the origin.
    await app.fork(backend, "t-tree-a", firsts["a"], "t-tree-a2", run=False)
    deeper = _ok(await client.get("/api/debug/threads/t-tree-a"))
    assert deeper["checkpoints"][0]["forks"][0]["thread_id"] == "t-tree-a2"
    assert _ok(await client.get("/api/debug/threads/t-tree-a2"))["forked_from"]["thread_id"] == (
        "t-tree-a"
    )
    assert {f["thread_id"] for c in origin["checkpoints"] for f in c["forks"]} == {
        "t-tree-a",
        "t-tree-b",
        "t-tree-c",
    }


async def test_a_fork_written_without_forked_from_still_loads(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    """Forks written before the fork point recorded its origin thread: the same rows, the
    metadata without ``forked_from`` (re-encoded by hand: no older release is installed)."""
    app = _load(loop_file)
    await app.invoke({"limit": 2}, thread_id="t-old", backend=backend)
    history = await app.aget_history("t-old", backend)
    await app.fork(backend, "t-old", history[1].id, "t-old-new", run=False)
    new_first = (await backend.list_checkpoints("t-old-new"))[0]
    payload = backend.serializer.loads(new_first.payload)
    assert payload.pop("meta") == {"forked_from": "t-old"}
    old_first = StoredCheckpoint(
        thread_id="t-old-fork",
        checkpoint_id=uuid.uuid4().hex,
        parent_id=history[1].id,
        step=new_first.step,
        created_at=new_first.created_at,
        payload=backend.serializer.dumps(payload),
    )
    await backend.save_checkpoint(old_first)
    old = _ok(await client.get("/api/debug/threads/t-old-fork"))
    assert old["forked_from"] is None  # no origin thread recorded: not linked back
    assert [c["source"] for c in old["checkpoints"]] == ["fork"]
    shown = _ok(
        await client.get(f"/api/debug/threads/t-old-fork/checkpoints/{old_first.checkpoint_id}")
    )
    assert shown["state"]["count"]["value"] == history[1].values["count"]
    # From the origin, the tree itself (the fork's first row's parent) still shows it.
    origin = _ok(await client.get("/api/debug/threads/t-old"))
    forks = {c["id"]: [f["thread_id"] for f in c["forks"]] for c in origin["checkpoints"]}
    assert forks[history[1].id] == ["t-old-fork", "t-old-new"]


async def test_update_state_in_place(client: httpx.AsyncClient, backend: Backend, loop_file: Path):
    app = _load(loop_file)
    await app.invoke(
        {"limit": 3}, thread_id="t-edit", backend=backend, interrupt_before=["Increment"]
    )
    head = _ok(await client.get("/api/debug/threads/t-edit"))["head"]
    edited = _ok(
        await client.post(
            "/api/debug/threads/t-edit/update",
            json={"checkpoint_id": head, "values": {"count": 1}, "confirm": True},
        )
    )
    state = await app.aget_state("t-edit", backend)
    assert state is not None and state.count == 1
    assert edited["checkpoint_id"] != head
    # Found by QA: the answer lacked `error`, `ran` and `next`, which every write action
    # documents (docs/studio.md, "Write actions"). An edit runs nothing: `ran` is the
    # `as_node` it was written as, `next` what the new head plans.
    assert set(edited) == {"checkpoint_id", "status", "interrupts", "error", "ran", "next"}
    assert (edited["error"], edited["ran"], edited["next"]) == (None, [], ["Increment"])
    assert edited["status"] == "suspended"  # still at the breakpoint before Increment
    stale = await client.post(
        "/api/debug/threads/t-edit/update",
        json={"checkpoint_id": head, "values": {"count": 2}, "confirm": True},
    )
    assert stale.status_code == 409  # only the latest checkpoint is edited in place
    as_node = _ok(
        await client.post(
            "/api/debug/threads/t-edit/update",
            json={"values": {"count": 2}, "as_node": "Increment", "confirm": True},
        )
    )
    assert (as_node["error"], as_node["ran"]) == (None, ["Increment"])
    assert as_node["next"] == ["Increment"]  # keep_going: 2 < 3, so Increment runs again
    assert as_node["checkpoint_id"] == (await app.aget_history("t-edit", backend))[-1].id


async def test_step_superstep_by_superstep(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke(
        {"limit": 3}, thread_id="t-step", backend=backend, interrupt_before=["Increment"]
    )
    counts = []
    for _ in range(5):
        stepped = _ok(await client.post("/api/debug/threads/t-step/step", json={"confirm": True}))
        state = await app.aget_state("t-step", backend)
        assert state is not None
        counts.append(state.count)
        assert stepped["checkpoint_id"] == (await app.aget_history("t-step", backend))[-1].id
        if stepped["status"] == "completed":
            assert stepped["next"] == [] and stepped["ran"] == []
            break
        # a step stops after its superstep, the last one too (with nothing next) ...
        assert stepped["status"] == "suspended" and stepped["ran"] == ["Increment"]
        assert stepped["next"] == (["Increment"] if state.count < 3 else [])
    assert counts == [1, 2, 3, 3]  # ... and the step after it ends the run, running nothing


async def test_run_to_completion(client: httpx.AsyncClient, backend: Backend, loop_file: Path):
    app = _load(loop_file)
    await app.invoke(
        {"limit": 4}, thread_id="t-run", backend=backend, interrupt_before=["Increment"]
    )
    done = _ok(await client.post("/api/debug/threads/t-run/run", json={"confirm": True}))
    assert done["status"] == "completed"
    state = await app.aget_state("t-run", backend)
    assert state is not None and state.count == 4


async def test_step_or_run_on_a_completed_thread_runs_nothing(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    # Found by QA: a step on a completed thread answered `"ran": ["Increment"]` — the head's
    # own superstep — though the call wrote no checkpoint. Nothing ran, so `ran` is empty.
    app = _load(loop_file)
    await app.invoke({"limit": 2}, thread_id="t-done", backend=backend)
    head = (await app.aget_history("t-done", backend))[-1].id
    for action in ("step", "run"):
        r = _ok(await client.post(f"/api/debug/threads/t-done/{action}", json={"confirm": True}))
        assert (r["checkpoint_id"], r["status"], r["ran"], r["next"]) == (
            head,
            "completed",
            [],
            [],
        ), action
        assert (await app.aget_history("t-done", backend))[-1].id == head


async def test_approve_a_suspended_agents_tool_call_runs_it_once(backend: Backend, tmp_path: Path):
    path = _write(tmp_path, "agent_graph.py", AGENT)
    log = tmp_path / "refunds.log"
    app = _load(path)
    out = await app.invoke({"query": "refund A-17"}, thread_id="t-agent", backend=backend)
    assert out.status == "suspended"
    async with _client(path, backend) as client:
        detail = _ok(await client.get("/api/debug/threads/t-agent"))
        assert detail["status"] == "suspended"
        waiting = detail["waiting"]
        assert waiting["kind"] == "approval" and waiting["tool"] == "issue_refund"
        assert waiting["args"] == {"order_id": "A-17"} and waiting["interrupt_id"] == "call_1"
        assert not log.exists()
        done = _ok(
            await client.post(
                "/api/debug/threads/t-agent/resume",
                json={"interrupt_id": "call_1", "action": "approve", "confirm": True},
            )
        )
        assert done["status"] == "completed" and done["via"] == "invoke"
        nothing = await client.post(
            "/api/debug/threads/t-agent/resume", json={"action": "approve", "confirm": True}
        )
        assert nothing.status_code == 409
    assert log.read_text(encoding="utf-8") == "A-17\n"
    state = await app.aget_state("t-agent", backend)
    assert state is not None and state.output == "refund issued"


DEFERRING = textwrap.dedent(
    '''
    from tensorsketch import END, START, Agent, AgentState, Context, Graph, Node, Schema
    from tensorsketch import FakeProvider, RetryLater, tool
    from tensorsketch.messages import ToolCall, assistant


    class Desk(AgentState):
        note: str = ""


    @tool
    def later() -> str:
        """Not yet."""
        raise RetryLater("not ready", delay=3600)


    class Note(Node):
        class Out(Schema):
            note: str

        async def run(self, ctx: Context, inp: Schema) -> Out:
            return self.Out(note="noted")


    call = ToolCall(id="l1", name="later", args={})
    agent = Agent(FakeProvider([assistant(tool_calls=[call])]), [later], name="agent")
    app = (
        Graph(Desk)
        .add(agent)
        .add(Note)
        .edge(START, "agent")
        .edge(START, "Note")
        .edge("agent", END)
        .edge("Note", END)
        .compile()
    )
    '''
)


async def _journal_entries(path: Path, backend: Backend, thread_id: str) -> list[Any]:
    """Every checkpoint's journal entries as the debugger lists them: (key, kind, node)."""
    shown = []
    async with _client(path, backend) as client:
        for checkpoint in await _load(path).aget_history(thread_id, backend):
            url = f"/api/debug/threads/{thread_id}/checkpoints/{checkpoint.id}"
            effects = _ok(await client.get(url))["effects"]
            shown += [(e["key"], e["kind"], e["node"]) for e in effects]
    return shown


async def test_an_agents_journal_entries_name_their_kind_and_node(backend: Backend, tmp_path: Path):
    path = _write(tmp_path, "agent_graph.py", AGENT)
    app = _load(path)
    await app.invoke({"query": "refund A-17"}, thread_id="t-keys", backend=backend)
    await app.invoke(thread_id="t-keys", backend=backend, resume={"call_1": True})
    ran = [
        ("0:agent:agent:0:model", "effect", "agent"),
        ("0:agent:agent:0:tool:0:call_1", "effect", "agent"),
        ("0:agent:agent:1:model", "effect", "agent"),
        ("0:agent:agent:shown0", "effect", "agent"),  # what the suspension showed
        ("resume:0:call_1", "decision", None),
    ]
    # the suspended checkpoint and the one closing the superstep both show it
    assert await _journal_entries(path, backend, "t-keys") == ran + ran


async def test_a_deferred_tool_and_a_finished_sibling_are_listed(backend: Backend, tmp_path: Path):
    path = _write(tmp_path, "deferring.py", DEFERRING)
    app = _load(path)
    out = await app.invoke({"query": "go"}, thread_id="t-defer", backend=backend)
    assert out.status == "suspended"
    plan = (await app.aget_history("t-defer", backend))[-1].parent_id
    assert await _journal_entries(path, backend, "t-defer") == [
        ("0:agent:agent:0:model", "effect", "agent"),
        ("0:agent:agent:0:tool:0:l1:defer0", "effect", "agent"),
        ("0:agent:agent:shown0", "effect", "agent"),
        (f"writes:{plan}:Note", "writes", "Note"),
    ]


async def test_approve_through_the_runner_when_a_run_record_exists(
    backend: Backend, tmp_path: Path
):
    from tensorsketch.runs import AsyncRunner

    path = _write(tmp_path, "agent_graph.py", AGENT)
    log = tmp_path / "refunds.log"
    app = _load(path)
    runner = AsyncRunner(app, backend=backend)
    try:
        record = await runner.submit({"query": "refund A-17"})
        suspended = await runner.await_run(record.run_id, timeout=30)
    finally:
        await runner.aclose()
    assert suspended.status == "suspended"
    async with _client(path, backend) as client:
        assert _ok(await client.get(f"/api/debug/threads/{record.thread_id}"))["status"] == (
            "suspended"
        )
        done = _ok(
            await client.post(
                f"/api/debug/threads/{record.thread_id}/resume",
                json={"action": "approve", "confirm": True},
            )
        )
    assert done["via"] == "runner" and done["status"] == "completed"
    assert (done["error"], done["next"]) == (None, [])  # the documented write-action fields
    assert isinstance(done["ran"], list)
    assert log.read_text(encoding="utf-8") == "A-17\n"
    store = backend.run_store()
    assert store is not None
    final = await store.get(record.run_id)
    assert final is not None and final.status == "succeeded"


async def test_reject_tells_the_model(backend: Backend, tmp_path: Path):
    path = _write(tmp_path, "agent_graph.py", AGENT)
    app = _load(path)
    await app.invoke({"query": "refund A-17"}, thread_id="t-reject", backend=backend)
    async with _client(path, backend) as client:
        done = _ok(
            await client.post(
                "/api/debug/threads/t-reject/resume",
                json={"action": "reject", "value": "not eligible", "confirm": True},
            )
        )
    assert done["status"] == "completed"
    assert not (tmp_path / "refunds.log").exists()


async def test_replay_a_node_never_writes(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 3}, thread_id="t-replay", backend=backend)
    history = await app.aget_history("t-replay", backend)
    rows = await backend.list_checkpoints("t-replay")
    journal = await backend.list_effects("t-replay")
    events = await backend.read_events("t-replay")
    replayed = _ok(
        await client.post(
            "/api/debug/threads/t-replay/replay-node",
            json={"checkpoint_id": history[1].id, "node": "Increment"},
        )
    )
    assert replayed["output"] == {"count": 2, "log": ["step 1: 2 (effect 2)"]}
    assert replayed["effects"] == {"replayed": 1, "live": 0}
    assert replayed["error"] is None
    assert await backend.list_checkpoints("t-replay") == rows
    assert await backend.list_effects("t-replay") == journal
    assert await backend.read_events("t-replay") == events

    live = await client.post(
        "/api/debug/threads/t-replay/replay-node",
        json={"checkpoint_id": history[1].id, "node": "Increment", "live": True},
    )
    assert live.status_code == 403  # a live replay calls out: it needs the confirmation
    live = await client.post(
        "/api/debug/threads/t-replay/replay-node",
        json={"checkpoint_id": history[1].id, "node": "Increment", "live": True, "confirm": True},
    )
    assert _ok(live)["effects"] == {"replayed": 0, "live": 1}
    assert await backend.list_effects("t-replay") == journal
    not_planned = await client.post(
        "/api/debug/threads/t-replay/replay-node",
        json={"checkpoint_id": history[-1].id, "node": "Increment"},
    )
    assert not_planned.status_code == 404


# -- the graph as imported ---------------------------------------------------------------------


async def test_a_file_that_fails_to_import_still_reads(backend: Backend, tmp_path: Path):
    good = _write(tmp_path, "g.py", LOOP)
    app = _load(good)
    await app.invoke({"limit": 2}, thread_id="t-broken", backend=backend)
    good.write_text(LOOP + "\nraise RuntimeError('half-written file')\n", encoding="utf-8")
    os.utime(good, ns=(1, 1))
    async with _client(good, backend) as client:
        status = _ok(await client.get("/api/debug/status"))
        assert "half-written file" in status["graph_error"]
        detail = _ok(await client.get("/api/debug/threads/t-broken"))
        shown = _ok(await client.get(f"/api/debug/threads/t-broken/checkpoints/{detail['head']}"))
        assert shown["state"]["count"]["value"] == 2
        refused = await client.post("/api/debug/threads/t-broken/step", json={"confirm": True})
        assert refused.status_code == 409
        assert "half-written file" in refused.json()["error"]
        good.write_text(LOOP, encoding="utf-8")  # fixed on disk: imported again
        assert _ok(await client.get("/api/debug/status"))["graph_error"] is None


# -- hostile requests ------------------------------------------------------------------------


async def test_hostile_requests_are_4xx(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke({"limit": 1}, thread_id="t-host", backend=backend)
    head = _ok(await client.get("/api/debug/threads/t-host"))["head"]
    post = "/api/debug/threads/t-host/fork"
    cases: list[tuple[httpx.Response, int]] = [
        (
            await client.post(
                post, content=b"{not json", headers={"content-type": "application/json"}
            ),
            400,
        ),
        (await client.post(post, content=b"[1, 2]"), 400),
        (await client.post(post, content=b"x" * (1024 * 1024 + 1)), 413),
        (await client.get("/api/debug/threads/no-such-thread"), 404),
        (await client.get("/api/debug/threads/t-host/checkpoints/feedface"), 404),
        (await client.get("/api/debug/threads/..%2F..%2Fetc%2Fpasswd"), 404),
        (await client.get("/api/debug/threads/../../etc/passwd/checkpoints/x"), 404),
        (await client.get("/api/debug/threads/" + "a" * 300), 400),
        (await client.get("/api/debug/threads?limit=abc"), 400),
        (await client.get("/api/debug/threads?cursor=zz"), 400),
        (await client.get("/api/debug/threads", headers={"X-Studio-Token": "wrong"}), 403),
        (await client.get("/api/debug/status", headers={"Origin": "http://evil.example"}), 403),
        (await client.get("/api/debug/status", headers={"Host": "evil.example"}), 403),
        (await client.post(post, json={"checkpoint_id": head, "values": {}}), 403),
        (await client.post(post, json={"checkpoint_id": head, "confirm": "yes"}), 403),
        (await client.post(post, json={"checkpoint_id": "nope", "confirm": True}), 404),
        (await client.post(post, json={"checkpoint_id": 7, "confirm": True}), 400),
        (
            await client.post(post, json={"checkpoint_id": head, "values": [1], "confirm": True}),
            400,
        ),
        (await client.post("/api/debug/threads/t-host/explode", json={}), 404),
        (
            await client.post(
                "/api/debug/threads/t-host/update",
                json={"values": {"count": 1}, "as_node": "Nope", "confirm": True},
            ),
            404,
        ),
        (
            await client.post(
                "/api/debug/threads/t-host/resume", json={"action": "approve", "confirm": True}
            ),
            409,
        ),
        (
            await client.post(
                "/api/debug/threads/t-host/run", json={"max_steps": -1, "confirm": True}
            ),
            400,
        ),
    ]
    for response, expected in cases:
        assert response.status_code == expected, (response.request.url, response.text)
        assert "error" in response.json()


async def test_a_thread_another_process_runs_is_busy(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
):
    app = _load(loop_file)
    await app.invoke(
        {"limit": 3}, thread_id="t-busy", backend=backend, interrupt_before=["Increment"]
    )
    assert await backend.acquire_lease("t-busy", "another-runner", 30.0)
    before = len(await backend.list_checkpoints("t-busy"))
    for action, body in (("step", {}), ("run", {}), ("update", {"values": {"count": 2}})):
        busy = await client.post(
            f"/api/debug/threads/t-busy/{action}", json={**body, "confirm": True}
        )
        assert busy.status_code == 409, busy.text
        assert "another process" in busy.json()["error"]
    assert len(await backend.list_checkpoints("t-busy")) == before
    _ok(await client.get("/api/debug/threads/t-busy"))  # reading is never blocked
    await backend.release_lease("t-busy", "another-runner")


async def test_credentials_never_reach_the_page(backend: Backend, loop_file: Path):
    app = _load(loop_file)
    await app.invoke({"limit": 1}, thread_id="t-secret", backend=backend)
    url = _with_password(POSTGRES_DSN) if backend.name == "postgres" else "sqlite:///runs.db"
    async with _client(loop_file, backend, url) as client:
        status = _ok(await client.get("/api/debug/status"))
        bodies = [
            json.dumps(status),
            (await client.get("/api/debug/threads")).text,
            (await client.get("/api/debug/threads/t-secret")).text,
            (await client.get("/api/debug/threads/missing")).text,
            (await client.post("/api/debug/threads/t-secret/step", json={})).text,
        ]
    for body in bodies:
        assert SECRET not in body and "postgres@" not in body
    if backend.name == "postgres":
        assert status["backend_label"].startswith("127.0.0.1:5432/")
    else:
        assert status["backend_label"] == "runs.db"


async def test_without_a_backend_the_debugger_is_off(loop_file: Path):
    async with _client(loop_file, None) as client:
        status = _ok(await client.get("/api/debug/status"))
        assert status["enabled"] is False and "--backend" in status["error"]
        for response in (
            await client.get("/api/debug/threads"),
            await client.get("/api/debug/threads/t"),
            await client.post("/api/debug/threads/t/step", json={"confirm": True}),
        ):
            assert response.status_code == 409
            assert "--backend" in response.json()["error"]


def test_backend_label_drops_user_password_and_query() -> None:
    backend = SqliteBackend(":memory:")
    assert backend_label("postgresql://me:pw@db.internal:6543/app?sslmode=require", backend) == (
        "db.internal:6543/app"
    )
    assert backend_label("redis://:pw@127.0.0.1:6379/2", backend) == "127.0.0.1:6379/2"
    assert backend_label("sqlite:///data/runs.db", backend) == "runs.db"
    assert backend_label("memory", backend) == "sqlite"


def test_graph_source_picks_and_explains(tmp_path: Path) -> None:
    two = _write(
        tmp_path,
        "two.py",
        LOOP + "\nother = app.spec and app\nsecond = (\n    "
        "__import__('tensorsketch').Graph(Counter).add(Increment)"
        ".edge(__import__('tensorsketch').START, 'Increment').compile()\n)\n",
    )
    loaded = GraphSource(two).get()
    assert loaded.graph is None and "--graph" in (loaded.error or "")
    picked = GraphSource(two, "second").get()
    assert picked.graph is not None and picked.name == "second"
    none = GraphSource(_write(tmp_path, "none.py", "x = 1\n")).get()
    assert none.graph is None and "no compiled graph" in (none.error or "")
    missing = GraphSource(two, "nope").get()
    assert missing.graph is None and "'nope'" in (missing.error or "")


# -- the real server and the command line ------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tensorsketch.canvas", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.timeout(60)
def test_cli_backend_serves_the_debugger(loop_file: Path) -> None:
    db = loop_file.parent / "runs.db"
    asyncio.run(_load(loop_file).invoke({"limit": 2}, thread_id="cli-thread",
                                       backend=SqliteBackend(db)))  # fmt: skip
    process = _cli(loop_file.name, "--port", "0", "--backend", "sqlite:///runs.db",
                   cwd=loop_file.parent)  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.split("→ ", 1)[1].split()[0]
        base, token = url.split("/?token=")
        headers = {"X-Studio-Token": token}
        status = httpx.get(f"{base}/api/debug/status", headers=headers).json()
        assert status["backend"] == "sqlite" and status["backend_label"] == "runs.db"
        threads = httpx.get(f"{base}/api/debug/threads", headers=headers).json()["threads"]
        assert [t["thread_id"] for t in threads] == ["cli-thread"]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(15) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_cli_refuses_a_backend_it_cannot_open_without_printing_it(loop_file: Path) -> None:
    process = _cli(loop_file.name, "--backend", f"nosuch://admin:{SECRET}@db/x",
                   cwd=loop_file.parent)  # fmt: skip
    out, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "--backend (nosuch) could not be opened" in err
    assert SECRET not in err and SECRET not in out


@pytest.mark.timeout(60)
def test_a_write_publishes_a_debug_event(loop_file: Path) -> None:
    db = loop_file.parent / "runs.db"
    asyncio.run(_load(loop_file).invoke({"limit": 2}, thread_id="sse", backend=SqliteBackend(db),
                                       interrupt_before=["Increment"]))  # fmt: skip
    with StudioServer(loop_file, port=0, backend=f"sqlite:///{db}") as server:
        headers = {"X-Studio-Token": server.token}
        events = httpx.stream("GET", f"{server.base_url}/api/events?token={server.token}",
                              timeout=httpx.Timeout(30.0))  # fmt: skip
        with events as stream:
            lines = stream.iter_lines()
            assert next(lines) == "retry: 1000"
            stepped = httpx.post(f"{server.base_url}/api/debug/threads/sse/step",
                                 json={"confirm": True}, headers=headers).json()  # fmt: skip
            for line in lines:
                if line == "event: debug":
                    data = json.loads(next(lines)[len("data: ") :])
                    break
    assert data == {
        "thread_id": "sse",
        "source_thread_id": "sse",
        "checkpoint_id": stepped["checkpoint_id"],
        "action": "step",
    }


ORDERS = textwrap.dedent(
    """
    from pydantic import BaseModel

    from tensorsketch import END, START, Context, Graph, Node, Schema


    class Item(BaseModel):
        sku: str
        qty: int


    class Order(Schema):
        items: list[Item] = []
        total: int = 0


    class Count(Node):
        class In(Schema):
            items: list[Item]

        class Out(Schema):
            total: int

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(total=sum(i.qty for i in inp.items))


    app = Graph(Order).add(Count).edge(START, "Count").edge("Count", END).compile()
    """
)


@pytest.mark.timeout(60)
async def test_values_typed_by_the_users_module_read_back_in_the_studio(tmp_path: Path) -> None:
    """A thread recorded by another process that imported the file as ``orders``: its
    values carry ``orders.Item`` type tags, which must resolve to the Studio's import."""
    path = _write(tmp_path, "orders.py", ORDERS)
    script = (
        "import asyncio, orders\n"
        "from tensorsketch.runtime.backends.sqlite import SqliteBackend\n"
        "asyncio.run(orders.app.invoke({'items': [{'sku': 'a', 'qty': 2}]}, thread_id='o',\n"
        "    backend=SqliteBackend('runs.db'), interrupt_before=['Count']))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    backend = SqliteBackend(tmp_path / "runs.db")
    async with _client(path, backend) as client:
        head = _ok(await client.get("/api/debug/threads/o"))["head"]
        shown = _ok(await client.get(f"/api/debug/threads/o/checkpoints/{head}"))
        assert shown["state"]["items"]["value"] == [{"sku": "a", "qty": 2}]
        stepped = _ok(await client.post("/api/debug/threads/o/run", json={"confirm": True}))
        assert stepped["status"] == "completed" and stepped["error"] is None
        forked = _ok(
            await client.post(
                "/api/debug/threads/o/fork",
                json={
                    "checkpoint_id": head,
                    "values": {"items": [{"sku": "b", "qty": 5}]},
                    "run": True,
                    "confirm": True,
                },
            )
        )
    assert forked["status"] == "completed"
    final = await _load(path).aget_state(forked["thread_id"], backend)
    assert final is not None and final.total == 5


QUESTION = textwrap.dedent(
    """
    from tensorsketch import END, START, Context, Graph, Node, Schema, interrupt


    class Ship(Schema):
        confirmed: bool = False


    class Confirm(Node):
        class Out(Schema):
            confirmed: bool

        async def run(self, ctx: Context, inp: Schema) -> Out:
            answer = await interrupt(ctx, {"question": "Ship it?"})
            return self.Out(confirmed=answer == "yes")


    app = Graph(Ship).add(Confirm).edge(START, "Confirm").edge("Confirm", END).compile()
    """
)


async def test_answer_a_question(backend: Backend, tmp_path: Path) -> None:
    path = _write(tmp_path, "ship.py", QUESTION)
    app = _load(path)
    await app.invoke({}, thread_id="t-ask", backend=backend)
    async with _client(path, backend) as client:
        waiting = _ok(await client.get("/api/debug/threads/t-ask"))["waiting"]
        assert waiting["kind"] == "question"
        assert waiting["question"] == {"question": "Ship it?"}
        wrong = await client.post(
            "/api/debug/threads/t-ask/resume", json={"action": "approve", "confirm": True}
        )
        assert wrong.status_code == 409  # a question is answered, not approved
        missing = await client.post(
            "/api/debug/threads/t-ask/resume", json={"action": "answer", "confirm": True}
        )
        assert missing.status_code == 400
        done = _ok(
            await client.post(
                "/api/debug/threads/t-ask/resume",
                json={"action": "answer", "value": "yes", "confirm": True},
            )
        )
    assert done["status"] == "completed"
    state = await app.aget_state("t-ask", backend)
    assert state is not None and state.confirmed is True


async def test_a_traced_run_names_its_thread_for_the_debugger(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
) -> None:
    from tensorsketch.observability.memory import InMemoryTracer

    app = _load(loop_file)
    tracer = InMemoryTracer()
    await app.invoke({"limit": 2}, thread_id="t-live", backend=backend, tracer=tracer)
    spans = [span.to_dict() for span in tracer.spans]
    _ok(await client.post("/api/trace", json={"spans": spans}))
    runs = _ok(await client.get("/api/trace"))["runs"]
    assert [r["thread_id"] for r in runs] == ["t-live"]
    detail = _ok(await client.get(f"/api/debug/threads/{runs[0]['thread_id']}"))
    assert detail["status"] == "completed"


async def test_a_node_that_raises_is_a_failed_step_not_an_http_error(
    backend: Backend, tmp_path: Path
) -> None:
    failing = LOOP.replace(
        "        n = inp.count + 1\n",
        "        n = inp.count + 1\n        if n == 2:\n            raise ValueError('two is bad')\n",
    )
    path = _write(tmp_path, "failing.py", failing)
    app = _load(path)
    await app.invoke(
        {"limit": 3}, thread_id="t-fail", backend=backend, interrupt_before=["Increment"]
    )
    async with _client(path, backend) as client:
        first = _ok(await client.post("/api/debug/threads/t-fail/step", json={"confirm": True}))
        assert first["status"] == "suspended" and first["error"] is None  # the after-stop
        second = _ok(await client.post("/api/debug/threads/t-fail/step", json={"confirm": True}))
        assert second["status"] == "failed"
        assert "two is bad" in second["error"]
        detail = _ok(await client.get("/api/debug/threads/t-fail"))
        assert detail["status"] == "failed"
        head = detail["checkpoints"][-1]
        assert head["source"] == "error" and "Increment: ValueError: two is bad" in head["error"]
        shown = _ok(await client.get(f"/api/debug/threads/t-fail/checkpoints/{head['id']}"))
        assert shown["errors"][0]["node"] == "Increment"
        # the node is its own field: the text does not repeat it ("Increment: Increment: ...")
        assert shown["errors"][0]["error"] == "ValueError: two is bad"


async def test_resume_with_an_unknown_action_is_a_400_whatever_the_thread(
    client: httpx.AsyncClient, backend: Backend, loop_file: Path
) -> None:
    app = _load(loop_file)
    await app.invoke({"limit": 1}, thread_id="t-done", backend=backend)
    url = "/api/debug/threads/t-done/resume"
    for action in ("explode", None, 3):
        r = await client.post(url, json={"action": action, "confirm": True})
        assert r.status_code == 400, (action, r.text)
        assert "'approve', 'reject' or 'answer'" in r.json()["error"]
    r = await client.post(url, json={"action": "approve", "confirm": True})
    assert r.status_code == 409 and "not waiting" in r.json()["error"]


@pytest.mark.postgres
async def test_open_backend_from_a_url_with_options(loop_file: Path) -> None:
    psycopg = pytest.importorskip("psycopg")
    postgres_server = pytest.importorskip("tensorsketch.testing.postgres_server")
    schema = private_name("studio")
    store = open_backend(POSTGRES_DSN, parse_options([f"schema={schema}"]))
    try:
        assert store.name == "postgres"
        await _load(loop_file).invoke({"limit": 1}, thread_id="in-schema", backend=store)
        with psycopg.connect(POSTGRES_DSN) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchone()
        assert tables is not None and tables[0] > 0  # written where the option said
    finally:
        await store.aclose()
        postgres_server.drop_schema(POSTGRES_DSN, schema)


def test_backend_options_are_key_value_pairs(loop_file: Path) -> None:
    assert parse_options(["schema=a", "prefix=b=c"]) == {"schema": "a", "prefix": "b=c"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options(["schema"])
    process = _cli(loop_file.name, "--backend", "sqlite:///x.db", "--backend-option", "oops",
                   cwd=loop_file.parent)  # fmt: skip
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2 and "KEY=VALUE" in err


DOCS = Path(__file__).resolve().parents[3] / "docs" / "studio.md"


def _debugging_snippet() -> str:
    """The first Python block of docs/studio.md's "Debugging" section (the `app.py` to save)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("\n## Debugging\n") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_the_docs_debugging_app_records_only_when_run_not_when_the_studio_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by QA: the snippet called record() at module level, so following the doc
    # (`python app.py`, then `tensorsketch studio app.py --backend sqlite:///runs.db`) the
    # Studio's import of app.py recorded every ticket again.
    path = _write(tmp_path, "app.py", _debugging_snippet())
    ran = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "['ticket-0', 'ticket-1']"
    db = tmp_path / "runs.db"  # where the doc's `--backend sqlite:///runs.db` looks

    async def checkpoints() -> list[int]:
        backend = SqliteBackend(db)
        try:
            return [len(await backend.list_checkpoints(f"ticket-{n}")) for n in range(2)]
        finally:
            await backend.aclose()

    recorded = asyncio.run(checkpoints())
    assert all(recorded)
    monkeypatch.chdir(tmp_path)  # `tensorsketch studio app.py ...` runs beside it
    assert _load(path) is not None  # what the Studio does to run a thread: import the file
    assert asyncio.run(checkpoints()) == recorded
