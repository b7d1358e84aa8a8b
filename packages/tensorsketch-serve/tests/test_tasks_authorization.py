"""Per-resource authorization of the task API (``task_app(authorize=Authorization())``) over
a real uvicorn server with httpx, on SQLite, PostgreSQL and Redis (runs, memory and sessions
on the same store): two users try each other's runs, threads, memory and sessions on every
route, listings are filtered, an admin reaches everything, and the app's routes are
enumerated so that a route without an authorization decision (or without a case here) fails.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import task_graphs
from authz_servers import as_user, authenticate, make_stores, serve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error, status_code_conformance
from starlette.routing import Route

from tensorsketch import FakeProvider, create_agent
from tensorsketch.agents import memory_tools
from tensorsketch.memory import HashingEmbedder, InMemorySessionStore, InMemoryStore
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.memory.sqlite_sessions import SqliteSessionStore
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import Access, Authorization, Identity, owner_or_admin, task_app
from tensorsketch.serve._authorization import ROUTES

_as = as_user
__all__ = ["make_stores", "serve"]  # the shared fixtures, found by pytest here


def _routes(app: Any) -> set[str]:
    """Every ``METHOD path`` the app serves."""
    return {
        f"{method} {route.path}"
        for route in app.routes
        if isinstance(route, Route)
        for method in (route.methods or ()) - {"HEAD"}
    }


# -- what each route does for the owner, for another user and for an admin -------------------

NS = ["users", "ana", "prefs"]
ITEM = [("namespace", label) for label in NS] + [("key", "lang")]


def _missing_run(client: httpx.Client) -> str:
    return str(client.get("/tasks/no-such-run", headers=_as("bob")).json()["error"]["message"])


def _run_route(method: str, suffix: str, body: Any = None) -> Callable[..., None]:
    """A route on ana's run: bob gets the very 404 of a run that does not exist (nothing
    leaks), ana and the admin get past authorization (whatever the run's state says)."""

    def case(client: httpx.Client, task_id: str) -> None:
        path = f"/tasks/{task_id}{suffix}"
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        refused = client.request(method, path, headers=_as("bob"), **kwargs)
        assert refused.status_code == 404, refused.text
        missing = _missing_run(client).replace("'no-such-run'", repr(task_id))
        assert refused.json()["error"]["message"] == missing
        for who in ("ana", "root"):
            allowed = client.request(method, path, headers=_as(who), **kwargs)
            assert allowed.status_code in (200, 202, 409), (who, allowed.text)

    return case


def _create(path: str, created: int) -> Callable[..., None]:
    def case(client: httpx.Client, task_id: str) -> None:
        body = {"input": {"n": 2}, "thread_id": "t-ana"}
        refused = client.post(path, json=body, headers=_as("bob"))
        assert refused.status_code == 403, refused.text
        assert "belongs to another user" in refused.json()["error"]["message"]
        assert client.post(path, json=body, headers=_as("ana")).status_code == created
        forged = client.post(
            path, json={"input": {"n": 2}, "labels": {"owner": "ana"}}, headers=_as("bob")
        )
        assert forged.status_code == 403 and "set by the server" in forged.text
        own = client.post(path, json={"input": {"n": 2}, "thread_id": "t-bob"}, headers=_as("bob"))
        assert own.status_code == created, own.text
        # An Idempotency-Key is the caller's own: bob's retry with ana's key is his own run.
        key = {"Idempotency-Key": f"order{path}"}
        first = client.post(path, json={"input": {"n": 2}}, headers={**_as("ana"), **key})
        again = client.post(path, json={"input": {"n": 2}}, headers={**_as("ana"), **key})
        other = client.post(path, json={"input": {"n": 2}}, headers={**_as("bob"), **key})
        assert first.json()["id"] == again.json()["id"] != other.json()["id"]
        assert again.headers.get("idempotent-replayed") == "true"
        assert other.status_code == created and other.json()["labels"] == {"owner": "bob"}

    return case


def _list_tasks(client: httpx.Client, task_id: str) -> None:
    def ids(who: str, **params: Any) -> set[str]:
        answer = client.get("/tasks", params=params, headers=_as(who))
        assert answer.status_code == 200, answer.text
        return {t["id"] for t in answer.json()["tasks"]}

    assert task_id in ids("ana")
    assert task_id not in ids("bob")
    assert ids("bob", thread_id="t-ana") == set()
    assert task_id in ids("root")
    snooping = client.get("/tasks", params={"label": "owner=ana"}, headers=_as("bob"))
    assert snooping.status_code == 403 and "only your own runs" in snooping.text


def _open(path: str) -> Callable[..., None]:
    def case(client: httpx.Client, task_id: str) -> None:
        for who in ("ana", "bob"):
            assert client.get(path, headers=_as(who)).status_code == 200

    return case


def _memory_put(client: httpx.Client, task_id: str) -> None:
    body = {"namespace": NS, "key": "lang", "value": {"content": "bob was here"}}
    refused = client.put("/memory/items", json=body, headers=_as("bob"))
    assert refused.status_code == 403 and "outside your memory" in refused.text
    assert "['users', 'bob']" in refused.json()["error"]["message"]
    mine = {**body, "namespace": ["users", "bob"], "value": {"content": "bob's own"}}
    assert client.put("/memory/items", json=mine, headers=_as("bob")).status_code == 200
    loose = {**body, "namespace": ["global"]}
    assert client.put("/memory/items", json=loose, headers=_as("ana")).status_code == 403
    assert client.put("/memory/items", json=loose, headers=_as("root")).status_code == 200


def _memory_get(client: httpx.Client, task_id: str) -> None:
    assert client.get("/memory/items", params=ITEM, headers=_as("bob")).status_code == 403
    for who in ("ana", "root"):
        got = client.get("/memory/items", params=ITEM, headers=_as(who))
        assert got.json()["value"] == {"content": "answers in Portuguese"}, got.text


def _memory_delete(client: httpx.Client, task_id: str) -> None:
    assert client.delete("/memory/items", params=ITEM, headers=_as("bob")).status_code == 403
    assert client.get("/memory/items", params=ITEM, headers=_as("ana")).status_code == 200
    scratch = {"namespace": NS, "key": "scratch", "value": 1}
    assert client.put("/memory/items", json=scratch, headers=_as("ana")).status_code == 200
    params = [("namespace", label) for label in NS] + [("key", "scratch")]
    deleted = client.delete("/memory/items", params=params, headers=_as("ana"))
    assert deleted.json() == {"deleted": True}


def _memory_listing(path: str, field: str) -> Callable[..., None]:
    """A listing: bob's is narrowed to his scope, a prefix into ana's is a 403, the admin
    sees both users."""

    def seen(client: httpx.Client, who: str, body: dict[str, Any]) -> list[Any]:
        answer = client.post(path, json=body, headers=_as(who))
        assert answer.status_code == 200, answer.text
        found = answer.json()[field]
        return [f if field == "namespaces" else f["namespace"] for f in found]

    def case(client: httpx.Client, task_id: str) -> None:
        everything: dict[str, Any] = {"query": "language"} if path.endswith("search") else {}
        assert NS in seen(client, "ana", everything)
        for body in (everything, {**everything, "namespace_prefix": ["users"]}):
            assert all(ns[:2] == ["users", "bob"] for ns in seen(client, "bob", body)), body
        assert seen(client, "bob", everything)  # bob's own item is there
        prying = client.post(
            path, json={**everything, "namespace_prefix": ["users", "ana"]}, headers=_as("bob")
        )
        assert prying.status_code == 403, prying.text
        admin = seen(client, "root", everything)
        assert NS in admin and ["users", "bob"] in admin

    return case


SESSION = "/sessions/ana:support"


def _sessions_list(client: httpx.Client, task_id: str) -> None:
    def ids(who: str, **params: Any) -> list[str]:
        answer = client.get("/sessions", params=params, headers=_as(who))
        assert answer.status_code == 200, answer.text
        return list(answer.json()["sessions"])

    assert ids("ana") == ["ana:support"]
    assert ids("bob") == []
    assert ids("root") == ["ana:support"]
    prying = client.get("/sessions", params={"prefix": "ana:"}, headers=_as("bob"))
    assert prying.status_code == 403 and "only your own sessions" in prying.text


def _session_read(client: httpx.Client, task_id: str) -> None:
    refused = client.get(SESSION, headers=_as("bob"))
    assert refused.status_code == 403 and "'bob:'" in refused.text
    for who in ("ana", "root"):
        assert len(client.get(SESSION, headers=_as(who)).json()["entries"]) == 1


def _session_append(client: httpx.Client, task_id: str) -> None:
    turn = {"messages": [{"role": "user", "content": "psst"}]}
    assert client.post(SESSION, json=turn, headers=_as("bob")).status_code == 403
    assert client.post("/sessions/bob:x", json=turn, headers=_as("bob")).status_code == 200
    assert len(client.get(SESSION, headers=_as("ana")).json()["entries"]) == 1


def _session_clear(client: httpx.Client, task_id: str) -> None:
    assert client.delete(SESSION, headers=_as("bob")).status_code == 403
    assert client.delete("/sessions/bob:x", headers=_as("bob")).json() == {"removed": 1}


def _assistants(method: str, suffix: str, body: Any = None) -> Callable[..., None]:
    """An assistant route: every user reads and lists assistants; creating, changing and
    rolling one back is the admin's (a 403 naming the handler to register otherwise)."""
    changes = method != "GET"

    def case(client: httpx.Client, task_id: str) -> None:
        made = client.post("/assistants", json={"name": f"helper{suffix}"}, headers=_as("root"))
        assert made.status_code in (201, 409), made.text
        found = client.get("/assistants", headers=_as("ana")).json()["assistants"]
        ident = next(a["id"] for a in found if a["name"] == f"helper{suffix}")
        # "": the collection; "/": the assistant itself; "/versions" etc.: under it
        path = "/assistants" if not suffix else f"/assistants/{ident}{suffix.rstrip('/')}"
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        for who in ("ana", "bob"):
            answer = client.request(method, path, headers=_as(who), **kwargs)
            if changes:
                assert answer.status_code == 403, (who, answer.text)
                assert "Authorization.on('assistants'" in answer.text
            else:
                assert answer.status_code == 200, (who, answer.text)
        admin = client.request(method, path, headers=_as("root"), **kwargs)
        assert admin.status_code in (200, 201, 409), admin.text

    return case


def _schedule_route(method: str, suffix: str | None) -> Callable[..., None]:
    """A route on ana's schedule: bob gets the 404 of a schedule that does not exist, ana
    and the admin get through; listings show each user their own."""

    def case(client: httpx.Client, task_id: str) -> None:
        body = {"at": 4102444800, "input": {"n": 2}, "name": f"later{method}{suffix}"}
        made = client.post("/schedules", json=body, headers=_as("ana"))
        assert made.status_code == 201, made.text
        assert made.json()["labels"] == {"owner": "ana"}
        ident = made.json()["id"]
        if suffix is None:  # the collection
            listed = {
                who: {
                    s["id"] for s in client.get("/schedules", headers=_as(who)).json()["schedules"]
                }
                for who in ("ana", "bob", "root")
            }
            assert ident in listed["ana"] and ident in listed["root"]
            assert ident not in listed["bob"]
            prying = client.get("/schedules", params={"label": "owner=ana"}, headers=_as("bob"))
            assert prying.status_code == 403 and "only your own schedules" in prying.text
            forged = client.post(
                "/schedules", json={**body, "labels": {"owner": "ana"}}, headers=_as("bob")
            )
            assert forged.status_code == 403 and "set by the server" in forged.text
            # A name is its creator's: bob's schedule of ana's name is his own.
            his = client.post("/schedules", json=body, headers=_as("bob"))
            assert his.status_code == 201 and his.json()["id"] != ident, his.text
            return
        path = f"/schedules/{ident}{suffix}"
        missing = client.request(method, f"/schedules/nope{suffix}", headers=_as("bob"))
        refused = client.request(method, path, headers=_as("bob"))
        assert refused.status_code == missing.status_code == 404, refused.text
        wanted = missing.json()["error"]["message"].replace("'nope'", repr(ident))
        assert refused.json()["error"]["message"] == wanted
        for who in ("ana", "root"):
            allowed = client.request(method, path, headers=_as(who))
            assert allowed.status_code == 200, (who, allowed.text)

    return case


#: One case per route. A route the app serves without a case here fails the test below.
CASES: dict[str, Callable[[httpx.Client, str], None]] = {
    "POST /runs": _create("/runs", 200),
    "POST /tasks": _create("/tasks", 202),
    "GET /tasks": _list_tasks,
    "GET /tasks/{id}": _run_route("GET", ""),
    "GET /tasks/{id}/events": _run_route("GET", "/events"),
    "POST /tasks/{id}/events": _run_route("POST", "/events", {"type": "poke", "payload": "hi"}),
    "POST /tasks/{id}/approve": _run_route("POST", "/approve", {"decisions": {"c1": True}}),
    "POST /tasks/{id}/resume": _run_route("POST", "/resume"),
    "POST /tasks/{id}/cancel": _run_route("POST", "/cancel"),
    "POST /tasks/{id}/steer": _run_route("POST", "/steer", {"content": "hurry"}),
    "POST /assistants": _assistants("POST", "", {"name": "another"}),
    "GET /assistants": _assistants("GET", ""),
    "GET /assistants/{id}": _assistants("GET", "/"),
    "PATCH /assistants/{id}": _assistants("PATCH", "/", {"config": {}}),
    "GET /assistants/{id}/versions": _assistants("GET", "/versions"),
    "POST /assistants/{id}/rollback": _assistants("POST", "/rollback", {"version": 1}),
    "GET /healthz": _open("/healthz"),
    "GET /metrics": _open("/metrics"),
    "GET /openapi.json": _open("/openapi.json"),
    "PUT /memory/items": _memory_put,
    "GET /memory/items": _memory_get,
    "DELETE /memory/items": _memory_delete,
    "POST /memory/list": _memory_listing("/memory/list", "items"),
    "POST /memory/search": _memory_listing("/memory/search", "items"),
    "POST /memory/namespaces": _memory_listing("/memory/namespaces", "namespaces"),
    "GET /sessions": _sessions_list,
    "GET /sessions/{id}": _session_read,
    "POST /sessions/{id}": _session_append,
    "DELETE /sessions/{id}": _session_clear,
    "POST /schedules": _schedule_route("POST", None),
    "GET /schedules": _schedule_route("GET", None),
    "GET /schedules/{id}": _schedule_route("GET", ""),
    "DELETE /schedules/{id}": _schedule_route("DELETE", ""),
    "GET /schedules/{id}/runs": _schedule_route("GET", "/runs"),
}


def _seed(client: httpx.Client) -> str:
    """Ana's run (finished, on thread ``t-ana``), memory item and session."""
    run = client.post("/runs", json={"input": {"n": 2}, "thread_id": "t-ana"}, headers=_as("ana"))
    assert run.status_code == 200 and run.json()["status"] == "succeeded", run.text
    assert run.json()["labels"] == {"owner": "ana"}
    item = {"namespace": NS, "key": "lang", "value": {"content": "answers in Portuguese"}}
    assert client.put("/memory/items", json=item, headers=_as("ana")).status_code == 200
    turn = {"messages": [{"role": "user", "content": "I'm Ana."}]}
    assert client.post(SESSION, json=turn, headers=_as("ana")).status_code == 200
    return str(run.json()["id"])


def _operation(description: dict[str, Any], method: str, path: str) -> tuple[str, Any]:
    """The ``(template, operation)`` of ``description`` that serves ``method path``."""
    for template, item in description["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    raise AssertionError(f"{method} {path} is not in /openapi.json")


def test_two_users_on_every_route(serve: Callable[..., Any]) -> None:
    """Every case above, and every status it saw (403s, 404s, 409s, the 401 of a stranger)
    is documented in /openapi.json for its route."""
    server = serve()
    served = _routes(server.app)
    assert served == set(CASES), f"routes without a case: {sorted(served - set(CASES))}"
    seen: set[tuple[str, str, int]] = set()

    def record(response: httpx.Response) -> None:
        seen.add((response.request.method, response.request.url.path, response.status_code))

    with httpx.Client(
        base_url=server.url, timeout=30, event_hooks={"response": [record]}
    ) as client:
        task_id = _seed(client)
        for route, case in CASES.items():
            try:
                case(client, task_id)
            except AssertionError as exc:
                raise AssertionError(f"{route}: {exc}") from exc
        for method, route in (r.split(" ", 1) for r in sorted(served)):
            if route not in ("/healthz", "/metrics", "/openapi.json"):
                path = route.replace("{id}", "x")
                stranger = client.request(method, path, headers={"authorization": "Bearer nobody"})
                assert stranger.status_code == 401, (route, stranger.text)
        description = client.get("/openapi.json", headers=_as("ana")).json()
    undocumented = set()
    for method, path, status in seen:
        if path == "/openapi.json":
            continue
        template, operation = _operation(description, method, path)
        if str(status) not in operation["responses"]:
            undocumented.add(f"{method} {template}: {status}")
    assert not undocumented, sorted(undocumented)


def test_two_users_racing_for_a_new_thread_id_one_owns_it(serve: Callable[..., Any]) -> None:
    """Ana and bob start runs on the same new thread ids at the same instant (concurrent
    HTTP requests, ``enqueue``: without an owner claim both would be queued): on each
    thread exactly one of them gets a run, the other a 403 (or a 409), and every run the
    admin sees on the thread is the winner's."""
    server = serve()
    threads = [f"race-{i}" for i in range(24)]

    async def race() -> list[tuple[str, str, httpx.Response]]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:

            async def post(who: str, thread: str) -> tuple[str, str, httpx.Response]:
                body = {"input": {"n": 1}, "thread_id": thread, "multitask_strategy": "enqueue"}
                return who, thread, await client.post("/tasks", json=body, headers=_as(who))

            return await asyncio.gather(*(post(who, t) for t in threads for who in ("ana", "bob")))

    answers = asyncio.run(race())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for thread in threads:
            mine = [(who, a) for who, t, a in answers if t == thread]
            won = [who for who, a in mine if a.status_code == 202]
            lost = [a for who, a in mine if a.status_code != 202]
            assert len(won) == 1, [(who, a.status_code, a.text) for who, a in mine]
            assert [a.status_code for a in lost] in ([403], [409]), lost[0].text
            listed = client.get("/tasks", params={"thread_id": thread}, headers=_as("root"))
            owners = {t["labels"]["owner"] for t in listed.json()["tasks"]}
            assert owners == set(won), (thread, owners, won)
            loser = "bob" if won == ["ana"] else "ana"
            again = client.post(
                "/tasks", json={"input": {"n": 1}, "thread_id": thread}, headers=_as(loser)
            )
            assert again.status_code == 403, again.text


def test_every_route_has_an_authorization_decision() -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    app = task_app(runner, memory=InMemoryStore(), sessions=InMemorySessionStore())
    routes = _routes(app)
    assert routes <= set(ROUTES), sorted(routes - set(ROUTES))


def test_an_app_with_a_route_nobody_decided_on_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(ROUTES, "POST /tasks/{id}/cancel")
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    with pytest.raises(ValueError, match=r"POST /tasks/\{id\}/cancel.*no authorization"):
        task_app(runner, authenticate=authenticate, authorize=Authorization())
    task_app(runner, authenticate=authenticate)  # without authorization it is not asked


def test_authorize_needs_an_authenticate_that_says_who(live: Any) -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    with pytest.raises(TypeError, match="needs authenticate="):
        task_app(runner, authorize=Authorization())
    with pytest.raises(TypeError, match="takes an Authorization"):
        task_app(runner, authenticate=authenticate, authorize=owner_or_admin)  # type: ignore[arg-type]
    server = live(task_app(runner, authenticate=lambda r: True, authorize=Authorization()))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.get("/tasks")
    assert answer.status_code == 401
    assert "returned bool instead of who is asking" in answer.json()["error"]["message"]


def test_handlers_replace_the_default_per_resource_and_action(live: Any) -> None:
    auth = Authorization()
    asked: list[Access] = []

    @auth.on("runs", "read")
    def support_reads_every_run(access: Access) -> bool:
        asked.append(access)
        roles = (access.identity.claims or {}).get("roles", [])
        return owner_or_admin(access) or "support" in roles

    @auth.on("memory")
    async def no_memory_writes_on_sundays(access: Access) -> bool:
        return access.action == "read" and owner_or_admin(access)

    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    app = task_app(
        runner, authenticate=authenticate, authorize=auth, memory=InMemoryStore(), drain_timeout=1
    )
    server = live(app)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        run = client.post("/runs", json={"input": {"n": 2}}, headers=_as("ana")).json()
        assert client.get(f"/tasks/{run['id']}", headers=_as("sue")).status_code == 200
        assert client.get(f"/tasks/{run['id']}", headers=_as("bob")).status_code == 404
        # Updating is still the default's: sue may read ana's run but not cancel it.
        assert client.post(f"/tasks/{run['id']}/cancel", headers=_as("sue")).status_code == 404
        item = {"namespace": ["users", "ana"], "key": "k", "value": 1}
        refused = client.put("/memory/items", json=item, headers=_as("ana"))
        assert refused.status_code == 403
    assert {(a.identity.id, a.owner, a.action) for a in asked} >= {("sue", "ana", "read")}


def test_authorization_options_are_checked() -> None:
    auth = Authorization()
    with pytest.raises(ValueError, match="unknown resource 'thread'"):
        auth.on("thread")
    with pytest.raises(ValueError, match="not \\['approve'\\]"):
        auth.on("runs", "approve")
    with pytest.raises(ValueError, match="'\\{user\\}' once"):
        Authorization(memory_scope=("users",))
    with pytest.raises(ValueError, match="separator after"):
        Authorization(session_scope="{user}")
    with pytest.raises(ValueError, match="non-empty str"):
        Identity("")
    scoped = Authorization(memory_scope=("tenants", "acme", "{user}"), session_scope="s/{user}/")
    assert scoped.namespace_owner(("tenants", "acme", "ana", "prefs")) == "ana"
    assert scoped.namespace_owner(("tenants", "other", "ana")) is None
    assert scoped.session_owner("s/ana/support") == "ana"
    assert scoped.session_owner("s/ana") is None
    assert (
        asyncio.run(scoped.allows(Access(Identity("bob"), "memory", "read", ("tenants",), None)))
        is False
    )


def test_a_runs_memory_is_bound_to_who_submitted_it(live: Any) -> None:
    """An agent whose memory namespace is ``("users", "{owner}", ...)``: the owner label the
    server stamps fills it, so each user's runs reach that user's memory, which is the same
    namespace the memory routes let them read."""
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="remember", args={"content": "tea"})]),
            assistant("noted"),
            assistant(tool_calls=[ToolCall(id="c2", name="recall", args={"query": ""})]),
            assistant("I know nothing about you"),
        ]
    )
    agent = create_agent(model, tools=memory_tools(("users", "{owner}", "notes")))
    store = InMemoryStore(embedder=HashingEmbedder())
    runner = AsyncRunner(agent, backend=InMemoryBackend(), memory=store)
    app = task_app(
        runner, authenticate=authenticate, authorize=Authorization(), memory=store, drain_timeout=1
    )
    server = live(app)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ana = client.post("/runs", json={"input": {"query": "I like tea"}}, headers=_as("ana"))
        assert ana.json()["status"] == "succeeded", ana.text
        bob = client.post("/runs", json={"input": {"query": "what do I like?"}}, headers=_as("bob"))
        assert bob.json()["status"] == "succeeded", bob.text
        notes = client.post("/memory/list", json={}, headers=_as("ana")).json()["items"]
        assert [(n["namespace"], n["value"]) for n in notes] == [
            (["users", "ana", "notes"], {"content": "tea"})
        ]
        assert client.post("/memory/list", json={}, headers=_as("bob")).json()["items"] == []
    recalled = model.calls[3].messages[-1]
    assert recalled.role == "tool" and recalled.text == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode))
def test_the_authorized_api_answers_fuzzed_requests_without_a_5xx(
    live: Any, tmp_path: Path, mode: schemathesis.GenerationMode
) -> None:
    """Schemathesis over the whole /openapi.json of an authorizing app, as ana, bob or the
    admin at random, after ana has a run, a schedule, an item and a session and the admin an
    assistant (half of the cases with a path id aim at those): not one 5xx, and every status
    answered is one the description documents for its operation (the 403s included)."""
    runner = AsyncRunner(
        task_graphs.work_graph(),
        backend=SqliteBackend(tmp_path / "fuzz.db"),
        timer_refresh=0.5,
        poll_interval=0.05,
    )
    app = task_app(
        runner,
        authenticate=authenticate,
        authorize=Authorization(),
        memory=SqliteStore(tmp_path / "memory.db", embedder=HashingEmbedder()),
        sessions=SqliteSessionStore(tmp_path / "sessions.db"),
        drain_timeout=1.0,
        max_body_bytes=64 << 10,
    )
    server = live(app)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ids = {"tasks": _seed(client), "sessions": SESSION.rsplit("/", 1)[1]}
        later = {"at": 4102444800, "input": {"n": 2}}
        ids["schedules"] = client.post("/schedules", json=later, headers=_as("ana")).json()["id"]
        made = client.post("/assistants", json={"name": "fuzzed"}, headers=_as("root"))
        ids["assistants"] = made.json()["id"]
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=_as("ana"))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(_routes(app)) - 1  # every route but /openapi.json
    strategy = st.one_of(*(op.as_strategy(generation_mode=mode) for op in operations))
    answered: dict[int, int] = {}
    aimed = random.Random(46)

    @settings(
        max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=strategy, who=st.sampled_from(["ana", "bob", "root"]))
    def fuzz(case: schemathesis.Case, who: str) -> None:
        if case.path_parameters and aimed.random() < 0.5:
            case.path_parameters = {"id": ids[case.path.split("/")[1]]}
        response = case.call(base_url=server.url, timeout=30, headers=_as(who))
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error, status_code_conformance])

    fuzz()
    print(f"authorized fuzz ({mode.value}), answers by status: {dict(sorted(answered.items()))}")
    assert not any(status >= 500 for status in answered), answered
    assert answered.get(400, 0) > 0, answered
    if mode is schemathesis.GenerationMode.POSITIVE:
        assert answered.get(200, 0) > 0 and answered.get(404, 0) > 0, answered
