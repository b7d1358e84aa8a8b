"""The run panel's API (``/api/run``) in-process, in memory, on SQLite and on PostgreSQL: the
form built from
the state schema, a run started from it (traced into the overlay's tail, listed by the
debugger on a durable backend), a question and an approval answered, an agent thread's
messages, and every hostile request refused with a 4xx."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.services import POSTGRES_DSN, private_name

TOKEN = "run-token-1"
BASE = "http://127.0.0.1:8765"

#: Every widget the form builds: str, int, float, bool, a Literal, a list and a nested model.
ORDER = textwrap.dedent(
    """
    from typing import Literal

    from tensorsketch import END, START, Context, Graph, Node, Schema


    class Address(Schema):
        city: str


    class Order(Schema):
        item: str
        count: int = 1
        price: float = 0.0
        gift: bool = False
        speed: Literal["slow", "fast"] = "slow"
        tags: list[str] = []
        ship_to: Address | None = None
        total: float = 0.0


    class Price(Node):
        class In(Schema):
            count: int
            price: float

        class Out(Schema):
            total: float

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(total=inp.count * inp.price)


    app = Graph(Order).add(Price).edge(START, "Price").edge("Price", END).compile()
    """
)

#: ``Order``'s fields, in the schema's order (the form's and a stopped thread's state's).
ORDER_FIELDS = ["item", "count", "price", "gift", "speed", "tags", "ship_to", "total"]

TRIAGE = textwrap.dedent(
    """
    from tensorsketch import END, START, Context, Graph, Node, Schema, interrupt


    class Ask(Schema):
        query: str
        desk: str = ""


    class Triage(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            desk: str

        async def run(self, ctx: Context, inp: In) -> Out:
            desk = await interrupt(ctx, f"Which desk takes: {inp.query}?")
            return self.Out(desk=str(desk))


    app = Graph(Ask).add(Triage).edge(START, "Triage").edge("Triage", END).compile()
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
            return assistant(f"done: {messages[-1].text}")
        call = ToolCall(id="call_1", name="issue_refund", args={"order_id": messages[-1].text})
        return assistant(tool_calls=[call])


    app = create_agent(FakeProvider(policy=policy), tools=[issue_refund])
    '''
)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend | None]:
    if request.param == "memory":
        yield None
        return
    if request.param == "sqlite":
        store: Backend = SqliteBackend(tmp_path / "runs.db")
        yield store
        await store.aclose()
        return
    postgres_server = pytest.importorskip("tensorsketch.testing.postgres_server")
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    postgres_server.reachable(POSTGRES_DSN)
    schema = private_name("studiorun")  # private to this test, dropped after
    store = PostgresBackend(POSTGRES_DSN, schema=schema)
    yield store
    await store.aclose()
    postgres_server.drop_schema(POSTGRES_DSN, schema)


def _client(path: Path, backend: Backend | None) -> tuple[httpx.AsyncClient, Any]:
    studio = Studio(path=path, token=TOKEN, project=path.parent)
    debugger = Debugger(backend, path=path) if backend is not None else None
    app = create_app(studio, debugger=debugger)
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    )
    return client, app


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def _settled(client: httpx.AsyncClient, thread: str) -> dict[str, Any]:
    """The thread once its run stopped (the run goes on in the background). "pending" (a
    checkpoint with tasks still to run, read between two commits) is not a stop."""
    for _ in range(400):
        view = _ok(await client.get(f"/api/run/threads/{thread}"))
        if view["status"] not in ("running", "pending"):
            return view  # type: ignore[no-any-return]
        await asyncio.sleep(0.02)
    raise AssertionError(f"thread {thread} is still running")


async def test_the_form_describes_every_input_field(tmp_path: Path) -> None:
    client, _ = _client(_write(tmp_path, "order.py", ORDER), None)
    async with client:
        form = _ok(await client.get("/api/run"))
    assert form["agent"] is False and form["durable"] is False
    assert form["backend"] == "in memory"
    fields = {f["name"]: f for f in form["fields"]}
    assert list(fields) == ORDER_FIELDS
    assert fields["item"]["required"] and not fields["count"]["required"]
    assert fields["count"]["schema"]["type"] == "integer"
    assert fields["price"]["schema"]["type"] == "number"
    assert fields["gift"]["schema"]["type"] == "boolean"
    assert fields["speed"]["schema"]["enum"] == ["slow", "fast"]
    assert fields["tags"]["schema"]["type"] == "array"
    assert "Address" in form["defs"]


async def test_a_run_from_the_form_is_traced_and_durable_on_the_backend(
    tmp_path: Path, backend: Backend | None
) -> None:
    path = _write(tmp_path, "order.py", ORDER)
    client, app = _client(path, backend)
    async with client:
        started = _ok(
            await client.post(
                "/api/run", json={"input": {"item": "pen", "count": 3, "price": 1.5}}
            ),
            202,
        )
        thread = started["thread_id"]
        assert started["status"] == "running" and started["run"]
        done = await _settled(client, thread)
        assert done["status"] == "completed", done
        assert done["messages"] is None  # not an agent graph
        # what the run answered: the state it stopped with, every field in the schema's order
        shown = {f["name"]: f["value"] for f in done["state"]}
        assert list(shown) == ORDER_FIELDS
        assert shown["total"] == 4.5 and shown["item"] == "pen" and shown["ship_to"] is None
        assert not any(f["truncated"] for f in done["state"])
        # the overlay's trace tail holds the run, on its thread, with the node it ran
        runs = _ok(await client.get("/api/trace"))["runs"]
        assert any(r["run"] == started["run"] and r["thread_id"] == thread for r in runs)
        folded = _ok(await client.get(f"/api/trace?run={started['run']}"))
        assert folded["nodes"]["Price"]["status"] == "ok"
        runs_state = app.state.runs
        state = await runs_state.source.get().graph.aget_state(thread, runs_state.backend)
        assert state.total == 4.5
        if backend is not None:  # durable: the debugger lists and opens the same thread
            listed = _ok(await client.get("/api/debug/threads"))["threads"]
            assert thread in [t["thread_id"] for t in listed]
            assert _ok(await client.get(f"/api/debug/threads/{thread}"))["status"] == "completed"
            assert (await backend.latest_checkpoint(thread)) is not None


async def test_a_question_is_answered_and_the_run_resumes(
    tmp_path: Path, backend: Backend | None
) -> None:
    client, _ = _client(_write(tmp_path, "triage.py", TRIAGE), backend)
    async with client:
        started = _ok(await client.post("/api/run", json={"input": {"query": "vpn down"}}), 202)
        thread = started["thread_id"]
        waiting = await _settled(client, thread)
        assert waiting["status"] == "suspended"
        assert {f["name"]: f["value"] for f in waiting["state"]} == {
            "query": "vpn down",
            "desk": "",
        }
        [ask] = waiting["waiting"]
        assert ask["kind"] == "question" and ask["node"] == "Triage"
        assert ask["question"] == "Which desk takes: vpn down?"
        refused = await client.post(f"/api/run/threads/{thread}/resume", json={"action": "approve"})
        assert refused.status_code == 400 and "answer it instead" in refused.json()["error"]
        _ok(
            await client.post(
                f"/api/run/threads/{thread}/resume", json={"action": "answer", "value": "tech"}
            ),
            202,
        )
        done = await _settled(client, thread)
        assert done["status"] == "completed" and done["waiting"] == []
        again = await client.post(
            f"/api/run/threads/{thread}/resume", json={"action": "answer", "value": "x"}
        )
        assert again.status_code == 409


async def test_an_agent_chat_asks_approval_and_shows_its_messages(
    tmp_path: Path, backend: Backend | None
) -> None:
    path = _write(tmp_path, "refunds.py", AGENT)
    client, _ = _client(path, backend)
    async with client:
        form = _ok(await client.get("/api/run"))
        assert form["agent"] is True and form["chat_field"] == "query"
        started = _ok(await client.post("/api/run", json={"message": "A-17"}), 202)
        thread = started["thread_id"]
        waiting = await _settled(client, thread)
        assert waiting["status"] == "suspended"
        [ask] = waiting["waiting"]
        assert ask["kind"] == "approval" and ask["tool"] == "issue_refund"
        assert ask["args"] == {"order_id": "A-17"}
        assert not (tmp_path / "refunds.log").exists()
        _ok(
            await client.post(f"/api/run/threads/{thread}/resume", json={"action": "approve"}),
            202,
        )
        done = await _settled(client, thread)
    assert done["status"] == "completed", done
    assert (tmp_path / "refunds.log").read_text() == "A-17\n"  # ran once
    roles = [m["role"] for m in done["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    user, call, result, answer = done["messages"]
    assert user["text"] == "A-17"
    assert call["tool_calls"] == [
        {"id": "call_1", "name": "issue_refund", "args": {"order_id": "A-17"}}
    ]
    assert result["tool_call_id"] == "call_1" and result["text"] == "refunded A-17"
    assert answer["text"] == "done: refunded A-17"


async def test_a_rejection_with_a_reason_is_told_to_the_agent(tmp_path: Path) -> None:
    client, _ = _client(_write(tmp_path, "refunds.py", AGENT), None)
    async with client:
        thread = _ok(await client.post("/api/run", json={"message": "B-2"}), 202)["thread_id"]
        await _settled(client, thread)
        _ok(
            await client.post(
                f"/api/run/threads/{thread}/resume",
                json={"action": "reject", "value": "over the limit"},
            ),
            202,
        )
        done = await _settled(client, thread)
    assert not (tmp_path / "refunds.log").exists()
    tool = next(m for m in done["messages"] if m["role"] == "tool")
    assert "over the limit" in tool["text"], tool


async def test_hostile_requests_are_4xx(tmp_path: Path) -> None:
    path = _write(tmp_path, "triage.py", TRIAGE)
    client, _ = _client(path, None)
    async with client:
        thread = _ok(await client.post("/api/run", json={"input": {"query": "q"}}), 202)[
            "thread_id"
        ]
        await _settled(client, thread)
        resume = f"/api/run/threads/{thread}/resume"
        deep = b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        cases: list[tuple[httpx.Response, int, str]] = [
            (await client.post("/api/run", content=b"{nope"), 400, "not valid JSON"),
            (await client.post("/api/run", content=b"[1]"), 400, "JSON object"),
            (await client.post("/api/run", content=deep), 400, "nest"),
            (
                await client.post("/api/run", content=b'{"input": {"query": "\\ud800"}}'),
                400,
                "lone UTF-16 surrogate",
            ),
            (await client.post("/api/run", content=b"x" * (1024 * 1024 + 1)), 413, "the limit"),
            (await client.post("/api/run", json={}), 400, "either 'input'"),
            (await client.post("/api/run", json={"input": [1]}), 400, "'input' must be"),
            (await client.post("/api/run", json={"input": {"nope": 1}}), 422, "not a field"),
            (await client.post("/api/run", json={"input": {"query": 7}}), 422, "query"),
            (await client.post("/api/run", json={"input": {}}), 422, "missing required"),
            (
                await client.post("/api/run", json={"input": {"query": "q"}, "code": "1"}),
                400,
                "unknown key",
            ),
            (await client.post("/api/run", json={"message": "hi"}), 400, "no 'messages'"),
            (
                await client.post("/api/run", json={"input": {"query": "q"}, "max_steps": 0}),
                400,
                "max_steps",
            ),
            (
                await client.post(
                    "/api/run", json={"input": {"query": "q"}, "thread_id": "a" * 300}
                ),
                400,
                "thread_id",
            ),
            (
                await client.post(
                    "/api/run",
                    json={"input": {"query": "__import__('os').system('touch pwned')"}},
                ),
                202,
                "",
            ),
            (await client.get("/api/run/threads/no-such-thread"), 404, "no thread"),
            (await client.post(resume, json={"action": "explode"}), 400, "'action'"),
            (await client.post(resume, json={"action": "answer"}), 400, "needs 'value'"),
            (
                await client.post(resume, json={"action": "answer", "value": 1, "eval": 1}),
                400,
                "unknown key",
            ),
            (
                await client.post(resume, json={"action": "answer", "interrupt_id": 5}),
                400,
                "interrupt_id",
            ),
            (
                await client.post(resume, json={"action": "answer", "interrupt_id": "zz"}),
                404,
                "waits on",
            ),
            (await client.post(f"/api/run/threads/{thread}/explode", json={}), 404, "resume"),
            (await client.get("/api/run", headers={"X-Studio-Token": "wrong"}), 403, "token"),
            (
                await client.post(
                    "/api/run",
                    json={"input": {"query": "q"}},
                    headers={"Origin": "http://evil.example"},
                ),
                403,
                "cross-origin",
            ),
            (await client.get("/api/run", headers={"Host": "evil.example"}), 403, ""),
            (
                await client.post(
                    "/api/run",
                    json={"input": {"query": "q"}},
                    headers={"Origin": "https://127.0.0.1:8765"},
                ),
                403,
                "cross-origin",
            ),
            (
                await client.post(
                    "/api/run",
                    json={"input": {"query": "q"}},
                    headers={"X-Studio-Token": ""},
                ),
                403,
                "token",
            ),
        ]
        for response, status, needle in cases:
            assert response.status_code == status, (response.request.url, response.text)
            if status != 202:
                assert needle in response.json().get("error", needle), response.text
        assert not (tmp_path / "pwned").exists()  # a value is data, never code
        path.write_text(TRIAGE + "\ndef broken(:\n", encoding="utf-8")
        closed = await client.post("/api/run", json={"input": {"query": "q"}})
        assert closed.status_code == 409 and "does not parse" in closed.json()["error"]
