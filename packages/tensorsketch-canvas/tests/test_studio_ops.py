# ruff: noqa: ASYNC240  -- the tests read small temporary files inline
"""The Studio's operations on code and runs, through its API in-process: the fill action's
model choice, effects in doubt in the debugger (listed with their policy, answered in place),
and the "Optimize" action (a real optimization in a subprocess, written only on confirm).
Every hostile request is refused with a 4xx."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch import FakeProvider
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_source import GraphSource
from tensorsketch.canvas.studio.fill_routes import FillSettings
from tensorsketch.canvas.studio.optimize_routes import OptimizeSettings, agents_in
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.effect_keys import intent_key
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.services import POSTGRES_DSN, private_name

TOKEN = "ops-token-1"
BASE = "http://127.0.0.1:8765"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

PAY = textwrap.dedent(
    """
    from pathlib import Path

    from tensorsketch import END, START, Context, Graph, Node, Schema

    LOG = Path(__file__).with_name("charges.log")
    POLICY = "ask"


    class Paid(Schema):
        receipt: str = ""


    class Pay(Node):
        class Out(Schema):
            receipt: str

        async def run(self, ctx: Context, inp: Paid) -> Out:
            def charge() -> str:
                with LOG.open("a", encoding="utf-8") as out:
                    out.write("charged\\n")
                return "r-live"

            receipt = await ctx.step("pay", charge, in_doubt=POLICY, args={"amount": 5})
            return self.Out(receipt=receipt)


    app = Graph(Paid).add(Pay).edge(START, "Pay").edge("Pay", END).compile()
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
    schema = private_name("studio_ops")
    store = PostgresBackend(POSTGRES_DSN, schema=schema)
    yield store
    await store.aclose()
    postgres_server.drop_schema(POSTGRES_DSN, schema)


async def plant_in_doubt(path: Path, backend: Backend, thread: str, *, key: str) -> Any:
    """A thread stopped before ``Pay`` whose journal holds the payment's intent and no
    result: what a crash between the call and its record leaves."""
    loaded = GraphSource(path).get()
    assert loaded.graph is not None, loaded.error
    graph = loaded.graph
    await graph.invoke({}, thread_id=thread, backend=backend, interrupt_before=["Pay"])
    intent = {"effect": "pay", "node": "Pay", "step": 0, "args": {"amount": 5}, "policy": "ask"}
    if "POLICY = " in path.read_text():
        policy = path.read_text().split('POLICY = "')[1].split('"')[0]
        intent["policy"] = policy
    await backend.record_effect(thread, intent_key(key), backend.serializer.dumps([intent]))
    return graph


# -- effects in doubt ---------------------------------------------------------------------------


async def test_an_effect_in_doubt_is_listed_and_answered_in_place(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "pay.py"
    path.write_text(PAY, encoding="utf-8")
    graph = await plant_in_doubt(path, backend, "t-pay", key="0:Pay:0:pay")
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
        view = _ok(await client.get("/api/debug/in-doubt", params={"thread": "t-pay"}))
        [doubt] = view["effects"]
        assert doubt["effect"] == "pay" and doubt["node"] == "Pay"
        assert doubt["args"] == {"amount": 5} and doubt["policy"] == "ask"
        assert doubt["action"] == "ask" and "waits for a person" in doubt["explains"]
        assert doubt["waiting"] is False  # nothing has resumed it yet
        # the run reaches the payment and asks instead of charging again
        ran = _ok(await client.post("/api/debug/threads/t-pay/run", json={"confirm": True}))
        assert ran["status"] == "suspended" and ran["interrupts"][0]["kind"] == "in_doubt"
        [doubt] = _ok(await client.get("/api/debug/in-doubt?thread=t-pay"))["effects"]
        assert doubt["waiting"] is True and doubt["interrupt_id"] == "0:Pay:0:pay"
        # the checkpoint of that superstep marks it among its journal entries
        at = f"/api/debug/threads/t-pay/checkpoints/{ran['checkpoint_id']}"
        marked = [e for e in _ok(await client.get(at))["effects"] if e["kind"] == "in_doubt"]
        assert [(e["key"], e["node"]) for e in marked] == [("0:Pay:0:pay", "Pay")]
        assert marked[0]["preview"] == {"policy": "ask", "args": {"amount": 5}}
        # the person says it went through, with the receipt: the run ends on it
        answer = {
            "action": "answer",
            "interrupt_id": doubt["interrupt_id"],
            "value": {"result": "r-from-bank"},
            "confirm": True,
        }
        done = _ok(await client.post("/api/debug/threads/t-pay/resume", json=answer))
        assert done["status"] == "completed", done
        assert _ok(await client.get("/api/debug/in-doubt?thread=t-pay"))["effects"] == []
        head = _ok(await client.get("/api/debug/threads/t-pay"))["head"]
        entries = _ok(await client.get(f"/api/debug/threads/t-pay/checkpoints/{head}"))["effects"]
        assert not [e for e in entries if e["kind"] == "in_doubt"]
    state = await graph.aget_state("t-pay", backend)
    assert state is not None and state.receipt == "r-from-bank"
    assert not (tmp_path / "charges.log").exists()  # never charged twice


@pytest.mark.parametrize(
    ("policy", "key", "action"),
    [
        ("retry", "0:Pay:0:pay", "retry"),
        ("fail", "0:Pay:0:pay", "fail"),
        ("fail", "idem:order-17", "retry"),  # an idempotency key makes a retry safe
    ],
)
async def test_each_policy_says_what_a_resume_will_do(
    tmp_path: Path, policy: str, key: str, action: str
) -> None:
    path = tmp_path / "pay.py"
    path.write_text(PAY.replace('POLICY = "ask"', f'POLICY = "{policy}"'), encoding="utf-8")
    backend = SqliteBackend(tmp_path / "runs.db")
    await plant_in_doubt(path, backend, "t-1", key=key)
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
        [doubt] = _ok(await client.get("/api/debug/in-doubt?thread=t-1"))["effects"]
    await backend.aclose()
    assert doubt["action"] == action and doubt["policy"] == policy
    assert doubt["idempotency_key"] is key.startswith("idem:")


async def test_in_doubt_hostile_requests_are_4xx(tmp_path: Path) -> None:
    path = tmp_path / "pay.py"
    path.write_text(PAY, encoding="utf-8")
    backend = SqliteBackend(tmp_path / "runs.db")
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
        missing = await client.get("/api/debug/in-doubt")
        assert missing.status_code == 400 and "?thread=ID" in missing.json()["error"]
        long = await client.get("/api/debug/in-doubt", params={"thread": "x" * 5000})
        assert long.status_code == 400
        unknown = await client.get("/api/debug/in-doubt", params={"thread": "nope"})
        assert unknown.status_code == 404 and "no thread 'nope'" in unknown.json()["error"]
        tokenless = await client.get(
            "/api/debug/in-doubt?thread=nope", headers={"X-Studio-Token": ""}
        )
        assert tokenless.status_code == 403
    async with _client(create_app(studio)) as client:
        off = await client.get("/api/debug/in-doubt?thread=t")
        assert off.status_code == 409 and "--backend" in off.json()["error"]
    await backend.aclose()


# -- the fill action's model choice -------------------------------------------------------------

HOLE = textwrap.dedent(
    """
    from tensorsketch import END, START, Context, Graph, Hole, Node, Schema


    class State(Schema):
        query: str
        answer: str = ""


    class Shout(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise Hole("Return the query in upper case")


    graph = Graph(State).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    """
)


async def test_the_fill_offers_the_configured_and_registered_providers(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text(HOLE, encoding="utf-8")
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    settings = FillSettings(FakeProvider(["no code"]), attempts=2)
    async with _client(create_app(studio, fill=settings)) as client:
        view = _ok(await client.get("/api/holes/fill"))
        names = [c["provider"] for c in view["choices"]]
        assert names[0] == "scripted" and view["choices"][0]["configured"] is True
        assert "openai" in names and "fake" not in names and view["attempts"] == 2
        bad = [
            ({"node": "Shout", "provider": "evil:module"}, "'provider' must be one of"),
            ({"node": "Shout", "provider": ["openai"]}, "'provider' must be one of"),
            ({"node": "Shout", "provider": "openai"}, "name the model openai should ask"),
            ({"node": "Shout", "provider": "openai", "model": "x\n"}, "'model' must be"),
            ({"node": "Shout", "provider": "openai", "model": "m" * 500}, "'model' must be"),
            ({"node": "Shout", "model": 7}, "'model' must be"),
        ]
        for body, message in bad:
            r = await client.post("/api/holes/fill", json=body)
            assert r.status_code == 400 and message in r.json()["error"], (body, r.text)
        assert view["fills"] == []  # nothing was started by a refused request
        r = await client.post("/api/holes/fill", json={"node": "Shout", "provider": "scripted"})
        job = _ok(r, 202)
        assert job["provider"] == "scripted" and job["stage"] == "starting"
    assert "raise Hole" in path.read_text()


# -- the optimize action ------------------------------------------------------------------------


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "optimize_example", EXAMPLES / "optimize_agent.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def triage(tmp_path: Path) -> Path:
    """The optimizing example's project: the agent, its suite and a scripted proposer."""
    example = _example()
    (tmp_path / "triage.py").write_text(example.AGENT, encoding="utf-8")
    (tmp_path / "triage_suite.py").write_text(example.SUITE, encoding="utf-8")
    (tmp_path / "proposer.py").write_text(example.PROPOSER, encoding="utf-8")
    return tmp_path / "triage.py"


def _settings(triage: Path) -> OptimizeSettings:
    return OptimizeSettings(proposers={"scripted": f"{triage.parent / 'proposer.py'}:proposer"})


async def _settle(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    for _ in range(600):  # the optimization runs in a subprocess: poll until it ends
        jobs = {j["id"]: j for j in _ok(await client.get("/api/optimize"))["jobs"]}
        if jobs[job_id]["status"] != "running":
            return jobs[job_id]
        await asyncio.sleep(0.25)
    raise AssertionError("the optimization did not end")


async def test_optimize_runs_in_a_subprocess_and_writes_only_on_confirm(triage: Path) -> None:
    studio = Studio(path=triage, token=TOKEN, project=triage.parent)
    before = triage.read_text()
    async with _client(create_app(studio, optimize=_settings(triage))) as client:
        view = _ok(await client.get("/api/optimize"))
        assert view["agents"] == ["agent"] and view["suites"] == ["triage_suite.py"]
        assert view["choices"][0] == {"provider": "scripted", "model": None, "configured": True}
        body = {"agent": "agent", "suite": "triage_suite.py", "provider": "scripted"}
        job = _ok(await client.post("/api/optimize", json=body), 202)
        assert job["status"] == "running"
        busy = await client.post("/api/optimize", json=body)
        assert busy.status_code == 409 and "already running" in busy.json()["error"]
        done = await _settle(client, job["id"])
        assert done["status"] == "done", done
        result = done["result"]
        assert result["improved"] is True
        assert result["scores"]["before"]["rate"] < result["scores"]["after"]["rate"]
        assert result["before"].startswith("0%") and result["after"].startswith("100%")
        assert done["rounds"][0]["round"] == 0 and len(done["rounds"]) >= 2
        assert result["initial"]["instructions"] == "You triage customer support tickets."
        assert "exactly one word" in result["best"]["instructions"]
        assert "-agent = create_agent(model, system=" in result["diff"]
        assert triage.read_text() == before  # a dry run until the user confirms
        unconfirmed = await client.post("/api/optimize/write", json={"job": job["id"]})
        assert unconfirmed.status_code == 403 and "confirm" in unconfirmed.json()["error"]
        assert triage.read_text() == before
        wrote = _ok(
            await client.post("/api/optimize/write", json={"job": job["id"], "confirm": True})
        )
        assert wrote["written"] is True
        again = await client.post("/api/optimize/write", json={"job": job["id"], "confirm": True})
        assert again.status_code == 409
    text = triage.read_text()
    assert "exactly one word" in text and "Examples:" in text
    changed = [line for line in text.splitlines() if line not in before.splitlines()]
    assert changed and all(
        "system=" in line or not line.startswith(("def ", "import")) for line in changed
    )


async def test_optimize_refuses_to_write_over_a_changed_file(triage: Path) -> None:
    studio = Studio(path=triage, token=TOKEN, project=triage.parent)
    async with _client(create_app(studio, optimize=_settings(triage))) as client:
        body = {"agent": "agent", "suite": "triage_suite.py"}
        job = _ok(await client.post("/api/optimize", json=body), 202)
        assert (await _settle(client, job["id"]))["status"] == "done"
        triage.write_text(triage.read_text() + "\n# edited meanwhile\n", encoding="utf-8")
        edited = hashlib.sha256(triage.read_bytes()).hexdigest()
        r = await client.post("/api/optimize/write", json={"job": job["id"], "confirm": True})
        assert r.status_code == 409 and "changed since the optimization" in r.json()["error"]
    assert hashlib.sha256(triage.read_bytes()).hexdigest() == edited


async def test_an_optimization_that_fails_says_why(triage: Path) -> None:
    (triage.parent / "proposer.py").write_text("proposer = 42\n", encoding="utf-8")
    studio = Studio(path=triage, token=TOKEN, project=triage.parent)
    async with _client(create_app(studio, optimize=_settings(triage))) as client:
        body = {"agent": "agent", "suite": "triage_suite.py"}
        job = _ok(await client.post("/api/optimize", json=body), 202)
        failed = await _settle(client, job["id"])
    assert failed["status"] == "error" and "not a chat provider" in failed["error"]


async def test_optimize_hostile_requests_are_4xx(triage: Path) -> None:
    studio = Studio(path=triage, token=TOKEN, project=triage.parent)
    before = triage.read_text()
    async with _client(create_app(studio, optimize=_settings(triage))) as client:
        ok = {"agent": "agent", "suite": "triage_suite.py"}
        bad = [
            ({**ok, "agent": "os.system"}, 400, "'agent' must name an agent"),
            ({**ok, "agent": None}, 400, "'agent' must name an agent"),
            ({**ok, "suite": "../../etc/passwd"}, 400, "'suite' must be one of"),
            ({**ok, "suite": "/tmp/suite.py"}, 400, "'suite' must be one of"),
            ({**ok, "provider": "proposer.py:proposer"}, 400, "'provider' must be one of"),
            ({**ok, "max_rounds": 10_000}, 400, "'max_rounds' must be"),
            ({**ok, "max_rounds": True}, 400, "'max_rounds' must be"),
            ({**ok, "budget_usd": -1}, 400, "'budget_usd' must be"),
            ({**ok, "budget_usd": "1e9"}, 400, "'budget_usd' must be"),
            ([1, 2], 400, "JSON object"),
        ]
        for body, status, message in bad:
            r = await client.post("/api/optimize", json=body)
            assert r.status_code == status and message in r.json()["error"], (body, r.text)
        nan = await client.post(
            "/api/optimize",
            content=b'{"agent": "agent", "suite": "triage_suite.py", "budget_usd": NaN}',
            headers={"Content-Type": "application/json"},
        )
        assert 400 <= nan.status_code < 500
        for body in ({"job": "nope", "confirm": True}, {"job": 3}, {}):
            r = await client.post("/api/optimize/write", json=body)
            assert r.status_code == 404 and "no optimization" in r.json()["error"]
        tokenless = await client.post("/api/optimize", json=ok, headers={"X-Studio-Token": ""})
        assert tokenless.status_code == 403
        assert _ok(await client.get("/api/optimize"))["jobs"] == []
    assert triage.read_text() == before


def test_agents_are_names_bound_to_a_call_with_a_system_prompt() -> None:
    source = textwrap.dedent(
        """
        agent = create_agent(model, system="You help.")
        helper: Agent = Agent(model, system=PROMPT)
        other = create_agent(model)
        a = b = create_agent(model, system="x")
        def make(): return create_agent(model, system="y")
        """
    )
    assert agents_in(source) == ["agent", "helper"]
    assert agents_in("def (") == []


@pytest.mark.parametrize("spec", ["proposer.py:proposer", "x y=proposer.py:p", "s=proposer"])
def test_the_cli_refuses_a_proposer_that_is_not_name_file_attr(
    spec: str, triage: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from tensorsketch.canvas._cli import configure_studio, run_studio

    parser = argparse.ArgumentParser()
    configure_studio(parser)
    assert run_studio(parser.parse_args([str(triage), "--proposer", spec])) == 2
    assert "--proposer takes NAME=FILE.py:ATTR" in capsys.readouterr().err


async def test_a_tool_that_deferred_itself_is_not_in_doubt(tmp_path: Path) -> None:
    """Its intent is followed by its wake-up time, not a result: it is waiting, not unknown."""
    spec = importlib.util.spec_from_file_location(
        "_debug_cases", Path(__file__).with_name("test_studio_debug.py")
    )
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    path = tmp_path / "deferring.py"
    path.write_text(cases.DEFERRING, encoding="utf-8")
    backend = SqliteBackend(tmp_path / "runs.db")
    loaded = GraphSource(path).get()
    assert loaded.graph is not None, loaded.error
    out = await loaded.graph.invoke({"query": "go"}, thread_id="t-defer", backend=backend)
    assert out.status == "suspended"
    intents = await backend.list_effects("t-defer", "intent:")
    assert intents  # the tool did write its intent
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    async with _client(create_app(studio, debugger=Debugger(backend, path=path))) as client:
        view = _ok(await client.get("/api/debug/in-doubt?thread=t-defer"))
    await backend.aclose()
    assert view == {"thread_id": "t-defer", "supported": True, "effects": []}
