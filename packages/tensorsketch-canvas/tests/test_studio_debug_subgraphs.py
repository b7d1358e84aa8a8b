"""The debugger inside subgraph nodes (#42): a thread's child namespaces, each child's state
nested under its task in a checkpoint, the child's own checkpoint history read with the
child's graph, an interrupt inside a child answered through its namespace, and every bad
namespace refused with a 4xx — on the in-memory and SQLite backends (PostgreSQL marked)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_source import GraphSource
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.canvas.studio.trace import TraceTail, parse_spans
from tensorsketch.interrupts import run_info
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.services import POSTGRES_DSN, private_name

TOKEN = "debug-sub-token"
BASE = "http://127.0.0.1:8765"

#: A parent whose subgraph node Review polishes a draft and then asks for a verdict.
DOC = (Path(__file__).parent / "graphs" / "reviewed.py").read_text(encoding="utf-8")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield InMemoryBackend()
        return
    if request.param == "sqlite":
        store: Backend = SqliteBackend(tmp_path / "runs.db")
        yield store
        await store.aclose()
        return
    postgres_server = pytest.importorskip("tensorsketch.testing.postgres_server")
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    postgres_server.reachable(POSTGRES_DSN)
    schema = private_name("studio_sub")
    store = PostgresBackend(POSTGRES_DSN, schema=schema)
    yield store
    await store.aclose()
    postgres_server.drop_schema(POSTGRES_DSN, schema)


@pytest.fixture
def doc_file(tmp_path: Path) -> Path:
    path = tmp_path / "doc_graph.py"
    path.write_text(DOC, encoding="utf-8")
    return path


@pytest.fixture
async def client(doc_file: Path, backend: Backend) -> AsyncIterator[httpx.AsyncClient]:
    studio = Studio(path=doc_file, token=TOKEN, project=doc_file.parent)
    app = create_app(studio, debugger=Debugger(backend, path=doc_file))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        yield c


def _graphs(path: Path) -> tuple[CompiledGraph[Any], CompiledGraph[Any]]:
    loaded = GraphSource(path).get()
    assert loaded.graph is not None, loaded.error
    spec = loaded.graph.spec.nodes["Review"]
    return loaded.graph, spec.node.graph  # type: ignore[attr-defined]


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _url(thread: str) -> str:
    return "/api/debug/threads/" + quote(thread, safe="/:")


async def _suspended(backend: Backend, path: Path, thread: str) -> tuple[str, Any]:
    """Run the doc graph on ``thread`` until its child asks; the child's namespace."""
    app, _ = _graphs(path)
    await app.invoke({"draft": "v1"}, thread_id=thread, backend=backend)
    state = await app.aget_state(thread, backend, subgraphs=True)
    child = run_info(state).subgraphs["Review"]
    child_thread = run_info(child).thread_id
    assert child_thread is not None
    return child_thread, state


async def test_a_suspended_child_is_nested_under_its_task(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-1")
    listed = _ok(await client.get("/api/debug/threads"))["threads"]
    assert [t["thread_id"] for t in listed] == ["doc-1"]  # the child is nested, not listed

    detail = _ok(await client.get(_url("doc-1")))
    assert detail["namespace"] == []
    assert [(s["task"], s["thread_id"]) for s in detail["subgraphs"]] == [("Review", child_thread)]
    assert detail["waiting"]["path"] == ["Review"]
    assert detail["waiting"]["node"] == "Ask"

    head = _ok(await client.get(f"{_url('doc-1')}/checkpoints/{detail['head']}"))
    (nested,) = head["subgraphs"]
    assert nested["task"] == "Review" and nested["relation"] == "next"
    assert nested["thread_id"] == child_thread
    assert nested["status"] == "suspended"
    assert nested["state"]["draft"]["value"] == "v1!"
    assert nested["state"]["notes"]["value"] == "polished"  # a field only the child has
    assert nested["waiting"]["node"] == "Ask"


async def test_the_child_namespace_reads_with_the_childs_graph(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-2")
    _, review = _graphs(doc_file)
    history = await review.aget_history(child_thread, backend)

    detail = _ok(await client.get(_url(child_thread)))
    assert detail["thread_id"] == child_thread
    assert [c["id"] for c in detail["checkpoints"]] == [c.id for c in history]
    assert detail["namespace"] == [{"task": "Review", "node": "Review", "graph": "Review"}]
    assert detail["root_thread"] == "doc-2"
    assert detail["status"] == "suspended"
    ran = [c["ran"] for c in detail["checkpoints"]]
    assert ["Polish"] in ran

    for cp in history:
        shown = _ok(await client.get(f"{_url(child_thread)}/checkpoints/{cp.id}"))
        expected = await review.aget_state_at(child_thread, backend, cp.id)
        assert {k: v["value"] for k, v in shown["state"].items() if v["present"]} == (
            expected.model_dump()
        ) or cp.source == "input"
    value = _ok(
        await client.get(
            f"{_url(child_thread)}/checkpoints/{history[-1].id}/value", params={"channel": "notes"}
        )
    )
    assert value == {"channel": "notes", "value": "polished"}


async def test_answering_in_the_child_namespace_resumes_the_run(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-3")
    waiting = _ok(await client.get(_url(child_thread)))["waiting"]
    assert waiting["kind"] == "question" and waiting["node"] == "Ask"
    done = _ok(
        await client.post(
            f"{_url(child_thread)}/resume",
            json={"action": "answer", "value": "ok", "confirm": True},
        )
    )
    assert done["status"] == "completed" and done["thread_id"] == "doc-3"
    app, _ = _graphs(doc_file)
    state = await app.aget_state("doc-3", backend)
    assert state is not None and state.draft == "v1! (ok)" and state.published is True

    detail = _ok(await client.get(_url("doc-3")))
    ran_review = next(c for c in detail["checkpoints"] if c["ran"] == ["Review"])
    shown = _ok(await client.get(f"{_url('doc-3')}/checkpoints/{ran_review['id']}"))
    (nested,) = shown["subgraphs"]
    assert nested["relation"] == "ran" and nested["status"] == "completed"
    assert nested["state"]["draft"]["value"] == "v1! (ok)"
    child = _ok(await client.get(_url(child_thread)))
    assert child["status"] == "completed" and child["waiting"] is None


async def test_an_edit_in_the_child_namespace_is_the_childs_update_state(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-4")
    refused = await client.post(
        f"{_url(child_thread)}/update", json={"values": {"published": True}, "confirm": True}
    )
    assert refused.status_code == 422  # `published` is the parent's field, not the child's
    edited = _ok(
        await client.post(
            f"{_url(child_thread)}/update",
            json={"values": {"draft": "v1-edited"}, "confirm": True},
        )
    )
    assert edited["status"] == "suspended"
    await client.post(
        f"{_url(child_thread)}/resume", json={"action": "answer", "value": "ok", "confirm": True}
    )
    app, _ = _graphs(doc_file)
    state = await app.aget_state("doc-4", backend)
    assert state is not None and state.draft == "v1-edited (ok)"


async def test_replay_and_apply_as_a_childs_node_in_its_namespace(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-6")
    detail = _ok(await client.get(_url(child_thread)))
    planned = next(c for c in detail["checkpoints"] if c["next"] == ["Polish"])
    replayed = _ok(
        await client.post(
            f"{_url(child_thread)}/replay-node",
            json={"checkpoint_id": planned["id"], "node": "Polish"},
        )
    )
    assert replayed["output"] == {"draft": "v1!", "notes": "polished"}
    assert _ok(await client.get(_url(child_thread)))["head"] == detail["head"]  # wrote nothing
    wrong = await client.post(
        f"{_url(child_thread)}/update",
        json={"values": {"draft": "x"}, "as_node": "Publish", "confirm": True},
    )
    assert wrong.status_code == 404 and "Polish" in wrong.json()["error"]  # the child's nodes
    applied = _ok(
        await client.post(
            f"{_url(child_thread)}/update",
            json={"values": {"draft": "again"}, "as_node": "Polish", "confirm": True},
        )
    )
    assert applied["ran"] == ["Polish"] and applied["next"] == ["Ask"]


async def test_bad_namespaces_are_4xx(
    client: httpx.AsyncClient, backend: Backend, doc_file: Path
) -> None:
    child_thread, _ = await _suspended(backend, doc_file, "doc-5")
    step, _, rest = child_thread.partition("/")[2].partition(":")
    cases = [
        (await client.get(_url("doc-5/0:Publish:0:subgraph")), 404, "not a subgraph node"),
        (await client.get(_url("doc-5/0:Nope:0:subgraph")), 404, "Nope"),
        (await client.get(_url("doc-5/zz:subgraph")), 400, "namespace"),
        (await client.get(_url("doc-5/7:Review:0:subgraph")), 404, "no thread"),
        (await client.get(_url(f"{child_thread}/0:Ask:0:subgraph")), 404, "Ask"),
        (
            await client.post(f"{_url(child_thread)}/step", json={"confirm": True}),
            409,
            "doc-5",
        ),
        (await client.post(f"{_url(child_thread)}/run", json={"confirm": True}), 409, "doc-5"),
        (
            await client.post(
                f"{_url(child_thread)}/fork", json={"checkpoint_id": "x", "confirm": True}
            ),
            409,
            "doc-5",
        ),
        (
            await client.get(_url(child_thread), headers={"X-Studio-Token": "wrong"}),
            403,
            "",
        ),
        (
            await client.get(_url(child_thread), headers={"Origin": "http://evil.example"}),
            403,
            "",
        ),
    ]
    for response, status, words in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert words in response.json()["error"], response.text
    assert step.isdigit() and rest.startswith("Review")


# -- the live overlay inside a subgraph ----------------------------------------------------------


def _spans(tracer: Any) -> list[dict[str, Any]]:
    """The spans a tracer recorded, as the Studio's trace tail takes them (closing order)."""
    from tensorsketch.observability.export import span_json

    return parse_spans({"spans": [json.loads(span_json(s)) for s in tracer.spans]})


async def test_the_overlay_folds_a_childs_nodes_under_its_subgraph(doc_file: Path) -> None:
    from tensorsketch.observability.memory import InMemoryTracer

    app, _ = _graphs(doc_file)
    tracer = InMemoryTracer()
    await app.invoke({"draft": "v1"}, thread_id="t", backend=InMemoryBackend(), tracer=tracer)
    spans = _spans(tracer)
    tail = TraceTail()
    (run,) = tail.add(spans)
    folded = tail.run(run)
    assert folded is not None
    assert set(folded["nodes"]) == {"Review"}  # the child's nodes are not the parent's
    assert folded["nodes"]["Review"]["status"] == "suspended"
    inside = folded["subgraphs"]["Review"]
    assert {name: n["status"] for name, n in inside["nodes"].items()} == {
        "Polish": "ok",
        "Ask": "suspended",
    }
    (listed,) = tail.runs()
    assert listed["thread_id"] == "t" and listed["graph"] == app.name  # the root run's
    # the run waits on the child's Ask: the run picker says so, not "ok"
    assert listed["status"] == folded["status"] == "suspended"

    # while the child runs, its finished nodes show and its subgraph node is running
    until = next(i for i, s in enumerate(spans) if s["name"] == "Polish")
    partial = TraceTail()
    partial.add(spans[: until + 1])
    early = partial.run(run)
    assert early is not None and early["status"] == "running"
    assert early["nodes"]["Review"]["status"] == "running"
    assert early["subgraphs"]["Review"]["nodes"]["Polish"]["status"] == "ok"


FANOUT = textwrap.dedent(
    """
    import operator
    from typing import Annotated

    from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send


    class Job(Schema):
        item: str = ""
        out: Annotated[list[str], Reducer(operator.add)] = []


    class Work(Node):
        class In(Schema):
            item: str

        class Out(Schema):
            out: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(out=[f"did {inp.item}"])


    worker = Graph(Job, name="Worker").add(Work).edge(START, "Work").edge("Work", END).compile()


    class Batch(Schema):
        items: list[str] = []
        item: str = ""
        out: Annotated[list[str], Reducer(operator.add)] = []


    class Split(Node):
        async def run(self, ctx: Context, inp: Schema) -> None:
            return None


    g = Graph(Batch).add(Split).add(worker)
    g.edge(START, "Split")
    g.router("Split", lambda s: [Send("Worker", {"item": x}) for x in s.items])
    g.edge("Worker", END)
    app = g.compile()
    """
)


async def test_each_send_instance_of_a_subgraph_is_its_own_namespace(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "fanout.py"
    path.write_text(FANOUT, encoding="utf-8")
    loaded = GraphSource(path).get()
    assert loaded.graph is not None and loaded.name == "app", loaded.error
    await loaded.graph.invoke({"items": ["a", "b"]}, thread_id="f", backend=backend)
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    app = create_app(studio, debugger=Debugger(backend, path=path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as client:
        detail = _ok(await client.get(_url("f")))
        assert [(c["task"], c["thread_id"]) for c in detail["subgraphs"]] == [
            ("Worker#0", "f/1:Worker#0:0:subgraph"),
            ("Worker#1", "f/1:Worker#1:0:subgraph"),
        ]
        ran = next(c for c in detail["checkpoints"] if c["ran"] == ["Worker"])
        shown = _ok(await client.get(f"{_url('f')}/checkpoints/{ran['id']}"))
        assert [
            (n["task"], n["relation"], n["state"]["out"]["value"]) for n in shown["subgraphs"]
        ] == [
            ("Worker#0", "ran", ["did a"]),
            ("Worker#1", "ran", ["did b"]),
        ]
        child = _ok(await client.get(_url("f/1:Worker#1:0:subgraph")))
        assert child["namespace"] == [{"task": "Worker#1", "node": "Worker", "graph": "Worker"}]


DEEP = textwrap.dedent(
    """
    from tensorsketch import END, START, Context, Graph, Node, Schema
    from tensorsketch.interrupts import interrupt


    class Draft(Schema):
        draft: str = ""


    class Ask(Node):
        class In(Schema):
            draft: str

        class Out(Schema):
            draft: str

        async def run(self, ctx: Context, inp: In) -> Out:
            verdict = await interrupt(ctx, "deep?")
            return self.Out(draft=f"{inp.draft} ({verdict})")


    inner = Graph(Draft, name="Inner").add(Ask).edge(START, "Ask").edge("Ask", END).compile()
    mid = Graph(Draft, name="Mid").add(inner).edge(START, "Inner").edge("Inner", END).compile()
    app = Graph(Draft).add(mid).edge(START, "Mid").edge("Mid", END).compile()
    """
)


async def test_an_interrupt_two_levels_deep_is_answered_in_its_namespace(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "deep.py"
    path.write_text(DEEP, encoding="utf-8")
    loaded = GraphSource(path).get()
    assert loaded.graph is not None and loaded.name == "app", loaded.error
    await loaded.graph.invoke({"draft": "d"}, thread_id="deep", backend=backend)
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    app = create_app(studio, debugger=Debugger(backend, path=path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as client:
        root = _ok(await client.get(_url("deep")))
        assert root["waiting"]["path"] == ["Mid", "Inner"]
        head = _ok(await client.get(f"{_url('deep')}/checkpoints/{root['head']}"))
        (mid,) = head["subgraphs"]
        (inner,) = mid["subgraphs"]
        assert (mid["task"], inner["task"], inner["status"]) == ("Mid", "Inner", "suspended")
        deepest = _ok(await client.get(_url(inner["thread_id"])))
        assert [level["task"] for level in deepest["namespace"]] == ["Mid", "Inner"]
        assert deepest["root_thread"] == "deep"
        done = _ok(
            await client.post(
                f"{_url(inner['thread_id'])}/resume",
                json={"action": "answer", "value": "yes", "confirm": True},
            )
        )
        assert done["status"] == "completed" and done["thread_id"] == "deep"
    state = await loaded.graph.aget_state("deep", backend)
    assert state is not None and state.draft == "d (yes)"
