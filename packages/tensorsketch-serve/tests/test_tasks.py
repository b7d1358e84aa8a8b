"""The task API over a real uvicorn server, driven with real HTTP clients (httpx, httpx-sse,
raw sockets) — every endpoint, its errors, SSE resume, the guards, and the metrics."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import task_graphs
from httpx_sse import connect_sse
from prometheus_client.parser import text_string_to_metric_families

from tensorsketch import FakeProvider, create_agent
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import RunMetrics, task_app
from tensorsketch.serve._protocols import serve
from tensorsketch.testing.runs import breakpoint_graph


def _start(live: Any, graph: Any, *, app: dict[str, Any] | None = None, **runner: Any) -> Any:
    runner.setdefault("timer_refresh", 0.5)
    runner.setdefault("poll_interval", 0.05)
    built = AsyncRunner(graph, backend=runner.pop("backend", None) or InMemoryBackend(), **runner)
    server = live(task_app(built, **{"drain_timeout": 1.0, **(app or {})}))
    server.runner = built
    return server


JSON = {"Content-Type": "application/json"}


def _until(client: httpx.Client, task_id: str, done: Callable[[dict[str, Any]], bool]) -> Any:
    for _ in range(400):
        record = client.get(f"/tasks/{task_id}").json()
        if done(record):
            return record
        time.sleep(0.025)
    raise AssertionError(f"task {task_id} never got there: {record}")


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) >= {"message", "type"}
    return str(body["error"]["message"])


def test_submit_is_idempotent_by_key_and_lists_with_filters_and_pages(live: Any) -> None:
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post(
            "/tasks",
            json={"input": {"n": 2}, "labels": {"tenant": "acme"}},
            headers={"Idempotency-Key": "order-7"},
        )
        assert first.status_code == 202
        assert first.headers["location"] == f"/tasks/{first.json()['id']}"
        again = client.post(
            "/tasks", json={"input": {"n": 2}}, headers={"Idempotency-Key": "order-7"}
        )
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == first.json()["id"]
        task_id = first.json()["id"]
        done = _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert done["output"]["out"] == "charge+ship 2"
        for n in range(3):
            client.post("/tasks", json={"input": {"n": 2 * n}, "labels": {"tenant": "other"}})
        listed = client.get("/tasks", params={"label": "tenant=acme"}).json()
        assert [t["id"] for t in listed["tasks"]] == [task_id]
        seen, cursor = [], None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = client.get("/tasks", params=params).json()
            seen += [t["id"] for t in page["tasks"]]
            if not (cursor := page["next_cursor"]):
                break
        assert len(seen) == len(set(seen)) == 4
        assert "unknown run status" in _error(client.get("/tasks?status=done"), 400)
        assert "not key=value" in _error(client.get("/tasks?label=tenant"), 400)
        assert "limit" in _error(client.get("/tasks?limit=0"), 400)
        assert "unknown query parameter" in _error(client.get("/tasks?colour=red"), 400)
        assert "no run 'nope'" in _error(client.get("/tasks/nope"), 404)
        assert "unknown field" in _error(client.post("/tasks", json={"inptu": {}}), 400)
        # what the run would fail on later is refused now: input fields, values, thread ids
        assert "'nofield' is not a field" in _error(
            client.post("/tasks", json={"input": {"nofield": 1}}), 400
        )
        assert "'n'" in _error(client.post("/tasks", json={"input": {"n": "many"}}), 400)
        # ... in the words of the request, not of a Python call the client never made
        for path in ("/tasks", "/runs"):
            refused = client.post(path, json={"input": {"n": "many"}})
            assert _refused(refused, "input").startswith("`input` got invalid values: 'n'")
            assert "invoke()" not in refused.text and "submit()" not in refused.text
        assert "too long" in _error(
            client.post("/tasks", json={"input": {"n": 1}, "thread_id": "t" * 300}), 400
        )
        assert "NUL" in _error(
            client.post("/tasks", json={"input": {"n": 1}, "thread_id": "a\u0000b"}), 400
        )
        assert "JSON object" in _error(client.post("/tasks", json=[1]), 400)
        assert "not valid JSON" in _error(
            client.post("/tasks", content=b"{", headers={"content-type": "application/json"}),
            400,
        )


def test_post_runs_waits_for_the_result_or_streams_it(live: Any) -> None:
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        done = client.post("/runs", json={"input": {"n": 4}})
        assert done.status_code == 200
        assert done.json()["status"] == "succeeded"
        with connect_sse(client, "POST", "/runs", json={"input": {"n": 6}, "stream": True}) as sse:
            frames = [(e.event, e.id, e.data) for e in sse.iter_sse()]
        kinds = [kind for kind, _, _ in frames]
        assert kinds[0] == "run_start" and "progress" in kinds and kinds[-2] == "run_end"
        assert kinds[-1] == "task" and json.loads(frames[-1][2])["status"] == "succeeded"
        ids = [int(i) for _, i, _ in frames[:-1]]
        assert ids == sorted(set(ids))


def test_post_runs_with_an_idempotency_key_waits_on_or_streams_the_run_it_started(
    live: Any,
) -> None:
    """A client whose POST /runs timed out (or whose connection dropped) retries with the
    same key: it gets the run the first request started, never a second one."""
    server = _start(live, task_graphs.work_graph())
    key = {"Idempotency-Key": "checkout-41"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        # n odd: the run naps 0.5 s on a durable timer, so the answer is the suspended run
        first = client.post("/runs", json={"input": {"n": 3}}, headers=key)
        assert first.status_code == 200 and "idempotent-replayed" not in first.headers
        run_id = first.json()["id"]
        assert first.json()["status"] == "suspended"
        _until(client, run_id, lambda r: r["status"] == "succeeded")
        again = client.post("/runs", json={"input": {"n": 3}}, headers=key)
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == run_id and again.json()["status"] == "succeeded"
        assert again.json()["output"]["out"] == "charge+ship 3"
        with connect_sse(
            client, "POST", "/runs", json={"input": {"n": 3}, "stream": True}, headers=key
        ) as sse:
            assert sse.response.headers["idempotent-replayed"] == "true"
            frames = [(e.event, e.data) for e in sse.iter_sse()]
        kinds = [kind for kind, _ in frames]
        assert kinds[0] == "run_start" and kinds[-2:] == ["run_end", "task"]
        assert json.loads(frames[-1][1])["id"] == run_id
        assert [t["id"] for t in client.get("/tasks").json()["tasks"]] == [run_id]
        # The same key on POST /tasks names the same run; no key is a new run each time.
        assert client.post("/tasks", json={"input": {"n": 3}}, headers=key).json()["id"] == run_id
        other = client.post("/runs", json={"input": {"n": 2}}).json()["id"]
        assert other != run_id and len(client.get("/tasks").json()["tasks"]) == 2
        message = _refused(
            client.post("/runs", json={"input": {"n": 1}}, headers={"Idempotency-Key": ""}),
            "Idempotency-Key",
        )
        assert "empty" in message
        assert len(client.get("/tasks").json()["tasks"]) == 2


def test_a_tasks_events_carry_the_tasks_id_in_every_segment(live: Any) -> None:
    """The id in ``POST /tasks``'s answer is the ``run_id`` of every event the task streams,
    across its suspension on a durable timer."""
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 3}}).json()["id"]
        _until(client, task_id, lambda r: r["status"] == "succeeded")
        with connect_sse(client, "GET", f"/tasks/{task_id}/events") as sse:
            frames = [(e.event, json.loads(e.data)) for e in sse.iter_sse()]
    events = [data for kind, data in frames if kind != "task"]
    assert [data["type"] for data in events].count("run_start") == 2
    assert {data["run_id"] for data in events} == {task_id}


def test_approve_over_http_accepts_only_awaited_ids(live: Any) -> None:
    task_graphs.REFUNDS.clear()
    server = _start(live, task_graphs.refund_agent())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"query": "A-9"}}).json()["id"]
        waiting = _until(client, task_id, lambda r: r["status"] == "suspended")
        assert waiting["waiting_for"] == "approval"
        url = f"/tasks/{task_id}/approve"
        message = _error(client.post(url, json={"decisions": {"call_1": True, "x": True}}), 400)
        assert "does not wait on ['x']" in message
        assert client.get(f"/tasks/{task_id}").json()["version"] == waiting["version"]
        assert "decisions" in _error(client.post(url, json={"call_1": True}), 400)
        assert "approval decision" in _error(
            client.post(url, json={"decisions": {"call_1": 3}}), 400
        )
        # an object with a field a decision does not have, or a value of the wrong type, is
        # refused naming it (recorded, a decision is final: a typo would stand for good)
        for decision, needle in (
            ({"approved": True, "bogus": 1}, "no field 'bogus'"),
            ({"approved": True, "reason": 5}, "'reason' must be str"),
            ({"approved": False, "reason": ["x"]}, "'reason' must be str"),
            ({"approved": True, "call_id": 7}, "'call_id' must be str"),
            ({"approved": True, "args": "x"}, "'args' must be an object"),
        ):
            refused = client.post(url, json={"decisions": {"call_1": decision}})
            assert needle in _error(refused, 400), decision
            assert refused.json()["error"]["param"] == "decisions.call_1"
        assert client.get(f"/tasks/{task_id}").json()["version"] == waiting["version"]
        ok = client.post(url, json={"decisions": {"call_1": "approve"}})
        assert ok.status_code == 200 and ok.json()["decisions"] == {"call_1": "approve"}
        done = _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert done["output"]["output"] == "done: refunded A-9"
        assert done["decisions"] == {"call_1": "approve"}  # kept, as sent, once finished
        assert task_graphs.REFUNDS == ["A-9"]
        # An agent's events (messages in their data) stream to the end, then the record.
        with connect_sse(client, "GET", f"/tasks/{task_id}/events") as sse:
            kinds = [e.event for e in sse.iter_sse()]
        # the model's tool call streams its argument fragments before the run suspends
        assert [k for k in kinds if k != "tool_call_delta"][:3] == [
            "run_start",
            "node_start",
            "interrupt",
        ]
        assert kinds.index("tool_call_delta") < kinds.index("interrupt")
        assert "tool" in kinds and kinds[-2:] == ["run_end", "task"]
        assert "waiting for approval" in _error(
            client.post(url, json={"decisions": {"call_1": False}}), 409
        )
        assert "no run" in _error(
            client.post("/tasks/nope/approve", json={"decisions": {"a": True}}), 404
        )


def test_a_run_at_a_breakpoint_shows_where_and_resume_continues_it(live: Any) -> None:
    server = _start(live, breakpoint_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 3}}).json()["id"]
        stopped = _until(client, task_id, lambda r: r["status"] == "suspended")
        assert stopped["waiting_for"] == "breakpoint"
        assert stopped["interrupts"][0]["node"] == "Draft"
        assert stopped["interrupts"][0]["value"] == {"when": "after", "nodes": ["Draft"]}
        url = f"/tasks/{task_id}/resume"
        assert client.post(url).status_code == 200
        before = _until(
            client,
            task_id,
            lambda r: r["status"] == "suspended" and r["interrupts"][0]["node"] == "Publish",
        )
        assert before["interrupts"][0]["value"] == {"when": "before", "nodes": ["Publish"]}
        assert client.post(url).status_code == 200
        done = _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert done["output"]["out"] == "draft 3 reviewed published"
        assert "only a run stopped at a breakpoint" in _error(client.post(url), 409)
        assert "no run" in _error(client.post("/tasks/nope/resume"), 404)


def test_events_are_delivered_once_and_cancel_is_not_a_failure(live: Any) -> None:
    server = _start(live, task_graphs.listen_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 1}}).json()["id"]
        _until(client, task_id, lambda r: r["waiting_for"] == "event")
        url = f"/tasks/{task_id}/events"
        assert "only event_id, type and payload" in _error(
            client.post(url, json={"type": "paid", "role": "system"}), 400
        )
        sent = client.post(url, json={"event_id": "e1", "type": "paid", "payload": "42"})
        assert sent.status_code == 202
        done = _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert done["output"]["event"]["payload"] == "42"
        assert "only a suspended run" in _error(client.post(url, json={"type": "paid"}), 409)
        assert "no run" in _error(client.post("/tasks/nope/events", json={"type": "x"}), 404)
        other = client.post("/tasks", json={"input": {"n": 2}}).json()["id"]
        _until(client, other, lambda r: r["status"] == "suspended")
        cancelled = client.post(f"/tasks/{other}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert "already cancelled" in _error(client.post(f"/tasks/{other}/cancel"), 409)


def test_sse_resumes_with_last_event_id_without_gap_or_duplicate(live: Any) -> None:
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 3}}).json()["id"]  # naps 0.5 s
        first: list[int] = []
        with connect_sse(client, "GET", f"/tasks/{task_id}/events") as sse:
            for event in sse.iter_sse():
                first.append(int(event.id))
                if len(first) == 3:
                    break  # the client goes away mid-run
        rest: list[int] = []
        frames: list[str] = []
        headers = {"Last-Event-ID": str(first[-1])}
        finished = False
        while not finished:  # reconnect until a stream opened after the run finished
            finished = client.get(f"/tasks/{task_id}").json()["status"] == "succeeded"
            with connect_sse(client, "GET", f"/tasks/{task_id}/events", headers=headers) as sse:
                for event in sse.iter_sse():
                    frames.append(event.event)
                    if event.event != "task":
                        rest.append(int(event.id))
                        headers = {"Last-Event-ID": event.id}
            time.sleep(0.05)
        seqs = first + rest
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap, no duplicate
        assert "run_end" in frames
        assert "event seq" in _error(
            client.get(f"/tasks/{task_id}/events", headers={"Last-Event-ID": "x"}), 400
        )


def test_authenticate_runs_before_the_body_and_spares_health_and_metrics(live: Any) -> None:
    def authenticate(request: Any) -> bool:
        if request.headers.get("x-boom"):
            raise RuntimeError("secret detail")
        return request.headers.get("authorization") == "Bearer k"

    server = _start(
        live, task_graphs.work_graph(), app={"authenticate": authenticate, "max_body_bytes": 1000}
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        big = b'{"input": {"n": 1}, "pad": "' + b"x" * 5000 + b'"}'
        refused = client.post("/tasks", content=big, headers={"content-type": "application/json"})
        assert refused.status_code == 401  # not 413: the body was never read
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200
        auth = {"authorization": "Bearer k", "content-type": "application/json"}
        assert client.post("/tasks", content=big, headers=auth).status_code == 413
        crashed = client.get("/tasks", headers={"x-boom": "1"})
        assert crashed.status_code == 500
        assert "secret" not in crashed.text and "internal server error" in crashed.text


def test_a_full_queue_or_too_many_open_runs_is_503_with_retry_after(live: Any) -> None:
    server = _start(
        live,
        task_graphs.hang_graph(),
        app={"max_concurrent_runs": 1},
        concurrency=1,
        max_queued=1,
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post("/tasks", json={"input": {"n": 60}}).json()["id"]
        _until(client, first, lambda r: r["status"] == "running")
        assert client.post("/tasks", json={"input": {"n": 60}}).status_code == 202
        full = client.post("/tasks", json={"input": {"n": 60}})
        assert "max_queued=1" in _error(full, 503)
        assert int(full.headers["retry-after"]) >= 1
    server = _start(live, task_graphs.hang_graph(), app={"max_concurrent_runs": 1})
    with (
        httpx.Client(base_url=server.url, timeout=30) as a,
        httpx.Client(base_url=server.url, timeout=30) as b,
        a.stream("POST", "/runs", json={"input": {"n": 60}, "stream": True}) as open_run,
    ):
        assert open_run.status_code == 200
        busy = b.post("/runs", json={"input": {"n": 1}})
        assert "max_concurrent_runs=1" in _error(busy, 503)
        assert busy.headers["retry-after"] == "1"
    # The streaming client went away: its slot is free again.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for _ in range(100):
            again = client.post("/runs", json={"input": {"n": 0}})
            if again.status_code == 200:
                break
            time.sleep(0.05)
        assert again.status_code == 200 and again.json()["status"] == "succeeded"


def test_health_stays_200_while_draining_and_new_work_gets_503(live: Any) -> None:
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        assert server.call(server.runner.drain(timeout=10))
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "draining"
        assert "draining" in _error(client.post("/tasks", json={"input": {"n": 1}}), 503)


def test_a_client_that_does_not_read_is_cut_off_at_the_buffer_cap(live: Any) -> None:
    server = _start(live, task_graphs.chatty_graph(), app={"sse_max_buffered_bytes": 1 << 20})
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 300}}).json()["id"]  # ~15 MB
        _until(client, task_id, lambda r: r["status"] == "succeeded")
    with socket.socket() as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
        conn.settimeout(30)
        conn.connect(("127.0.0.1", server.port))
        conn.sendall(f"GET /tasks/{task_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(3)  # connected, not reading
        received = 0
        tail = b""
        while chunk := conn.recv(1 << 16):
            received += len(chunk)
            tail = (tail + chunk)[-200:]
    assert received < 8 << 20  # cut off well before the 15 MB of events
    assert b"event: task" not in tail


def test_metrics_are_prometheus_text_with_capped_labels(live: Any) -> None:
    metrics = RunMetrics(label_keys=["tenant"], max_label_values=2)
    server = _start(live, task_graphs.refund_agent(), app={"metrics": metrics})
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ids = [
            client.post(
                "/tasks", json={"input": {"query": f"Q{n}"}, "labels": {"tenant": t}}
            ).json()["id"]
            for n, t in enumerate(["a", "b", "c"])
        ]
        for task_id in ids:
            _until(client, task_id, lambda r: r["status"] == "suspended")
            client.post(f"/tasks/{task_id}/approve", json={"decisions": {"call_1": True}})
        for task_id in ids:
            _until(client, task_id, lambda r: r["status"] == "succeeded")
        text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.text)
        for s in family.samples
    }
    finished = {k: v for k, v in samples.items() if k[0] == "tensorsketch_runs_finished_total"}
    assert finished == {
        ("tensorsketch_runs_finished_total", (("status", "succeeded"), ("tenant", "a"))): 1.0,
        ("tensorsketch_runs_finished_total", (("status", "succeeded"), ("tenant", "b"))): 1.0,
        ("tensorsketch_runs_finished_total", (("status", "succeeded"), ("tenant", "other"))): 1.0,
    }
    folded = ("tensorsketch_metrics_folded_values_total", (("kind", "label:tenant"),))
    assert samples[folded] == 1.0
    assert samples[("tensorsketch_tool_calls_total", (("tool", "refund"),))] == 3.0
    assert samples[("tensorsketch_model_calls_total", (("model", "fake-model"),))] == 6.0
    assert samples[("tensorsketch_model_unpriced_turns_total", (("model", "fake-model"),))] == 6.0
    assert samples[("tensorsketch_runs", (("status", "succeeded"),))] == 3.0
    assert samples[("tensorsketch_queue_depth", ())] == 0.0


def test_the_tasks_protocol_is_served_by_name_with_an_openapi_description(live: Any) -> None:
    app = serve(task_graphs.work_graph(), ["tasks"])
    server = live(app)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        spec = client.get("/openapi.json").json()
        assert spec["openapi"] == "3.1.0"
        assert set(spec["paths"]) >= {"/runs", "/tasks", "/tasks/{id}/events", "/healthz"}
        assert client.post("/runs", json={"input": {"n": 2}}).json()["status"] == "succeeded"


def test_a_lone_surrogate_in_a_body_is_a_400_and_nothing_is_stored(live: Any) -> None:
    """``"\\ud800"`` is valid JSON but not Unicode text: stored, it failed every later answer
    carrying it (the list of tasks too) with a 500. An escaped pair is a character, kept."""
    agent = create_agent(FakeProvider(["hello"]), name="echo")
    server = _start(live, agent)
    lone = '"\\ud800"'
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body in (
            f'{{"input": {{"query": {lone}}}}}',
            f'{{"input": {{"query": "ok"}}, "labels": {{"a": {lone}}}}}',
            f'{{"input": {{"query": "ok"}}, "thread_id": {lone}}}',
            f'{{"input": {{"query": "ok {lone[1:-1]}\\\\ud800"}}}}',  # beside an escaped backslash
        ):
            refused = client.post("/tasks", content=body, headers=JSON)
            assert "lone UTF-16 surrogate" in _error(refused, 400), body
        assert client.get("/tasks").json()["tasks"] == []
        pair = client.post(
            "/tasks", content=b'{"input": {"query": "\\ud83d\\ude00 \\\\ud800"}}', headers=JSON
        )
        assert pair.status_code == 202, pair.text
        done = _until(client, pair.json()["id"], lambda r: r["status"] == "succeeded")
        assert done["input"]["query"] == "\U0001f600 \\ud800"


async def test_a_stored_lone_surrogate_is_answered_escaped_not_with_a_500() -> None:
    """What the Python API stored (it takes any string) is sent back as its JSON escape: one
    such run must not fail the list, the record, or its events for everybody. In-process
    (the answer's encoding is the subject, not the wire)."""
    agent = create_agent(FakeProvider(["hello"]), name="echo")
    runner = AsyncRunner(agent, backend=InMemoryBackend())
    transport = httpx.ASGITransport(app=task_app(runner), raise_app_exceptions=False)
    async with runner, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        record = await runner.submit({"query": "bad \ud800 text"})
        await runner.await_run(record.run_id)
        listed = await client.get("/tasks")
        assert listed.status_code == 200 and b"\\ud800" in listed.content
        [shown] = listed.json()["tasks"]
        assert shown["input"]["query"] == "bad \ud800 text"
        one = await client.get(f"/tasks/{record.run_id}")
        assert one.status_code == 200 and one.json()["input"]["query"] == "bad \ud800 text"
        events = await client.get(f"/tasks/{record.run_id}/events")
        assert events.status_code == 200 and "event: task" in events.text


def test_task_app_refuses_bad_options() -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    with pytest.raises(ValueError, match="sse_max_buffered_bytes"):
        task_app(runner, sse_max_buffered_bytes=0)
    with pytest.raises(TypeError, match=r"needs an AsyncRunner.*task_app\(AsyncRunner\("):
        task_app(task_graphs.work_graph())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clash"):
        RunMetrics(label_keys=["status"])


@pytest.mark.parametrize("app", ["openai_app", "a2a_app", "agui_app"])
def test_a_graph_app_given_a_runner_says_to_pass_the_graph(app: str) -> None:
    """The mix-up the other way round: the chat protocols' apps take the graph itself (a
    runner's attributes are not a graph's, which failed as an AttributeError)."""
    import tensorsketch.serve as serve

    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    with pytest.raises(TypeError, match=rf"{app}\(graph\) serves a compiled graph, got an Async"):
        getattr(serve, app)(runner)
    with pytest.raises(TypeError, match=r"serves a compiled graph \(graph.compile\(\)\), got str"):
        getattr(serve, app)("agent")


def test_online_scores_reach_metrics_through_the_metrics_reporter(live: Any) -> None:
    from tensorsketch import InMemoryTracer
    from tensorsketch.eval import Custom, MetricsReporter, OnlineMonitor

    metrics = RunMetrics()
    server = _start(live, task_graphs.echo_agent(), app={"metrics": metrics})

    def answered(trial: Any) -> bool:
        return bool(trial.output)

    def refused(trial: Any) -> bool:
        return False

    monitor = OnlineMonitor(
        [Custom(answered, name="answered"), Custom(refused, name="refused")],
        reporter=MetricsReporter(metrics),
    )

    async def run_and_score() -> None:
        tracer = InMemoryTracer()
        state = await task_graphs.echo_agent().invoke({"query": "hi"}, tracer=tracer)
        assert await monitor.observe(state, tracer.trace)
        await monitor.flush()

    server.call(run_and_score())
    assert monitor.scored == 1 and monitor.failed == 0
    with httpx.Client(base_url=server.url, timeout=30) as client:
        text = client.get("/metrics").text
    scores = {
        s.labels["name"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tensorsketch_score"
    }
    assert scores == {"answered": 1.0, "refused": 0.0}


def test_metrics_reporter_refuses_a_sink_without_score() -> None:
    from tensorsketch.eval import MetricsReporter

    with pytest.raises(TypeError, match=r"score\(name, value\)"):
        MetricsReporter(object())  # type: ignore[arg-type]


def _refused(response: httpx.Response, param: str) -> str:
    """A 400 whose ``param`` names what was wrong; its message."""
    message = _error(response, 400)
    assert response.json()["error"]["param"] == param, response.text
    return message


def test_an_approval_sent_for_other_arguments_is_a_409_and_nothing_is_recorded(
    live: Any,
) -> None:
    """The task shows the pending call's digest; a decision carrying another one (the call
    changed since the client looked) is refused, the right one runs the call."""
    task_graphs.REFUNDS.clear()
    server = _start(live, task_graphs.refund_agent())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"query": "A-9"}}).json()["id"]
        waiting = _until(client, task_id, lambda r: r["status"] == "suspended")
        (asked,) = waiting["interrupts"]
        digest = asked["value"]["digest"]
        assert digest.startswith("sha256:")
        url = f"/tasks/{task_id}/approve"
        stale = {"approved": True, "digest": "sha256:0123", "args": {"order_id": "A-8"}}
        message = _error(client.post(url, json={"decisions": {"call_1": stale}}), 409)
        assert "does not match the call" in message and "A-8" in message
        assert client.get(f"/tasks/{task_id}").json()["decisions"] == {}
        ok = client.post(url, json={"decisions": {"call_1": {"approved": True, "digest": digest}}})
        assert ok.status_code == 200
        _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert task_graphs.REFUNDS == ["A-9"]


def test_approve_names_unknown_fields_and_every_accepted_word(live: Any) -> None:
    task_graphs.REFUNDS.clear()
    server = _start(live, task_graphs.refund_agent())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"query": "A-3"}}).json()["id"]
        waiting = _until(client, task_id, lambda r: r["status"] == "suspended")
        url = f"/tasks/{task_id}/approve"
        message = _refused(client.post(url, json={"decisions": {"call_1": True}, "x": 1}), "x")
        assert "unknown field(s) ['x']" in message
        assert "unknown field(s) ['call_1']" in _refused(
            client.post(url, json={"call_1": True}), "call_1"
        )
        assert "non-empty object" in _refused(client.post(url, json={"decisions": {}}), "decisions")
        message = _refused(
            client.post(url, json={"decisions": {"call_1": "maybe"}}), "decisions.call_1"
        )
        for word in ("approve", "approved", "yes", "allow", "reject", "no", "deny", "denied"):
            assert f'"{word}"' in message
        assert '"maybe"' in message and "'call_1'" in message
        assert client.get(f"/tasks/{task_id}").json()["version"] == waiting["version"]
        ok = client.post(url, json={"decisions": {"call_1": "Yes"}})  # any case
        assert ok.status_code == 200 and ok.json()["decisions"] == {"call_1": "Yes"}
        done = _until(client, task_id, lambda r: r["status"] == "succeeded")
        assert done["output"]["output"] == "done: refunded A-3"
        # "deny" rejects: the refund tool does not run.
        other = client.post("/tasks", json={"input": {"query": "B-4"}}).json()["id"]
        _until(client, other, lambda r: r["status"] == "suspended")
        denied = client.post(f"/tasks/{other}/approve", json={"decisions": {"call_1": "deny"}})
        assert denied.status_code == 200
        _until(client, other, lambda r: r["status"] in ("succeeded", "failed"))
        assert task_graphs.REFUNDS == ["A-3"]


def test_every_endpoint_refuses_query_parameters_it_does_not_take(live: Any) -> None:
    server = _start(live, breakpoint_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"n": 1}}).json()["id"]
        _until(client, task_id, lambda r: r["status"] == "suspended")
        before = client.get("/tasks").json()["tasks"]
        body = {"input": {"n": 1}}
        calls = [
            ("POST", "/runs?wait=1&foo=1", body),
            ("POST", "/tasks?foo=1", body),
            ("GET", "/tasks?foo=bar", None),
            ("GET", f"/tasks/{task_id}?foo=1", None),
            ("GET", f"/tasks/{task_id}/events?foo=1", None),
            ("POST", f"/tasks/{task_id}/events?foo=1", {"type": "x"}),
            ("POST", f"/tasks/{task_id}/approve?foo=1", {"decisions": {"a": True}}),
            ("POST", f"/tasks/{task_id}/resume?foo=1", None),
            ("POST", f"/tasks/{task_id}/cancel?foo=1", None),
        ]
        for method, url, json_body in calls:
            message = _refused(client.request(method, url, json=json_body), "foo")
            assert "unknown query parameter(s) ['foo']" in message, url
        for url in ("/healthz?foo=1", "/metrics?format=text", "/openapi.json?v=1"):
            assert client.get(url).status_code == 200, url  # probes add parameters of their own
        assert "POST /runs takes ['wait']" in _refused(client.post("/runs?foo=1", json=body), "foo")
        assert "takes none" in _refused(client.get(f"/tasks/{task_id}?foo=1"), "foo")
        # A single-valued parameter given twice is ambiguous; the repeatable ones repeat.
        assert "more than once" in _refused(client.get("/tasks?limit=1&limit=2"), "limit")
        assert "more than once" in _refused(client.post("/runs?wait=1&wait=2", json=body), "wait")
        both = client.get("/tasks?status=suspended&status=queued")
        assert both.status_code == 200 and len(both.json()["tasks"]) == 1
        # Nothing refused was run, resumed or cancelled.
        assert client.get("/tasks").json()["tasks"] == before
        assert client.get("/tasks?wait=1").status_code == 400  # `wait` is POST /runs's


def test_the_openapi_lists_the_query_parameters_each_route_takes(live: Any) -> None:
    from tensorsketch.serve._tasks import QUERY

    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        spec = client.get("/openapi.json").json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            route = f"{method.upper()} {path}"
            listed = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            assert listed == QUERY.get(route, set()), route
    listing = {p["name"]: p for p in spec["paths"]["/tasks"]["get"]["parameters"]}
    for name in ("status", "label"):  # repeatable: arrays, one value per repeat
        assert listing[name]["schema"]["type"] == "array", name
        assert listing[name]["explode"] is True and listing[name]["style"] == "form"
    assert listing["status"]["schema"]["items"]["enum"][0] == "queued"


def test_an_empty_or_repeated_idempotency_key_is_refused(live: Any) -> None:
    server = _start(live, task_graphs.work_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = {"input": {"n": 1}}
        message = _refused(
            client.post("/tasks", json=body, headers={"Idempotency-Key": ""}), "Idempotency-Key"
        )
        assert "Idempotency-Key header" in message and "empty" in message
        _refused(
            client.post("/tasks", json=body, headers={"Idempotency-Key": "k" * 257}),
            "Idempotency-Key",
        )
        twice = [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
        assert "2 times" in _refused(
            client.post("/tasks", json=body, headers=twice), "Idempotency-Key"
        )
        assert client.get("/tasks").json()["tasks"] == []
    # A bare `Idempotency-Key:` line, as a hand-written client sends it.
    raw = b'{"input":{"n":1}}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /tasks HTTP/1.1\r\nHost: x\r\nIdempotency-Key:\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (len(raw), raw)
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert json.loads(rest)["error"]["param"] == "Idempotency-Key"


def test_post_tasks_refuses_stream_and_resume_and_cancel_refuse_a_body(live: Any) -> None:
    server = _start(live, breakpoint_graph())
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for stream in (True, False):
            message = _refused(
                client.post("/tasks", json={"input": {"n": 1}, "stream": stream}), "stream"
            )
            assert "POST /runs" in message
        assert client.get("/tasks").json()["tasks"] == []
        task_id = client.post("/tasks", json={"input": {"n": 2}}).json()["id"]
        _until(client, task_id, lambda r: r["status"] == "suspended")
        url = f"/tasks/{task_id}/resume"
        message = _refused(client.post(url, json={"input": {"n": 9}}), "input")
        assert "takes no body" in message
        assert "JSON object" in _error(client.post(url, json=[1]), 400)
        assert "not valid JSON" in _error(
            client.post(url, content=b"{", headers={"content-type": "application/json"}), 400
        )
        assert client.get(f"/tasks/{task_id}").json()["interrupts"][0]["node"] == "Draft"
        assert client.post(url, json={}).status_code == 200  # an empty object is no body
        _until(
            client,
            task_id,
            lambda r: r["status"] == "suspended" and r["interrupts"][0]["node"] == "Publish",
        )
        assert client.post(url).status_code == 200  # nor is none
        _until(client, task_id, lambda r: r["status"] == "succeeded")
        other = client.post("/tasks", json={"input": {"n": 3}}).json()["id"]
        _until(client, other, lambda r: r["status"] == "suspended")
        cancel = f"/tasks/{other}/cancel"
        assert "takes no body" in _refused(client.post(cancel, json={"reason": "x"}), "reason")
        assert client.get(f"/tasks/{other}").json()["status"] == "suspended"
        assert client.post(cancel, json={}).json()["status"] == "cancelled"
    # The OpenAPI description says the same.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert (
        "stream"
        not in paths["/tasks"]["post"]["requestBody"]["content"]["application/json"]["schema"][
            "properties"
        ]
    )
    assert (
        "stream"
        in paths["/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"][
            "properties"
        ]
    )
    for path in ("/tasks/{id}/resume", "/tasks/{id}/cancel"):
        body = paths[path]["post"]["requestBody"]
        assert body["required"] is False
        assert body["content"]["application/json"]["schema"]["maxProperties"] == 0
        assert "400" in paths[path]["post"]["responses"]
    decision = paths["/tasks/{id}/approve"]["post"]["requestBody"]["content"]["application/json"]
    words = decision["schema"]["properties"]["decisions"]["additionalProperties"]["oneOf"][1]
    assert {"yes", "no", "allow", "deny"} <= set(words["enum"])
