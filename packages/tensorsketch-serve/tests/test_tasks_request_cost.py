"""What one task-API request costs the event loop, counted (never timed): the layers a
``POST /tasks`` goes through, the answer's construction, and that the answer's bytes are the
ones Starlette's own ``Response`` would send."""

from __future__ import annotations

import asyncio
import cProfile
import json
import pstats
from typing import Any

import pytest
import task_graphs
from starlette import _exception_handler, datastructures, responses
from starlette.datastructures import QueryParams
from starlette.responses import Response

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import task_app
from tensorsketch.serve._http import Guard
from tensorsketch.serve._tasks import _json

Headers = list[tuple[bytes, bytes]]


async def _call(app: Any, method: str, path: str, body: bytes = b"", extra: Headers = ()) -> Any:
    """One request straight into the ASGI app, as uvicorn makes it; the messages sent back."""
    path, _, query = path.partition("?")
    headers = [(b"host", b"test"), (b"content-type", b"application/json"), *extra]
    if body:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "state": {},
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _calls(profile: cProfile.Profile, code: Any) -> int:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    key = (code.co_filename, code.co_firstlineno, code.co_name)
    return int(stats[key][1]) if key in stats else 0


def _submit_profiled(query: str = "") -> tuple[cProfile.Profile, list[dict[str, Any]]]:
    async def go() -> tuple[cProfile.Profile, list[dict[str, Any]]]:
        runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
        app = task_app(runner, metrics=None)
        body = json.dumps({"input": {"n": 1}}).encode()
        async with runner:
            await _call(app, "POST", "/tasks", body, [(b"idempotency-key", b"warm")])
            profile = cProfile.Profile()
            profile.enable()
            sent = await _call(app, "POST", f"/tasks{query}", body, [(b"idempotency-key", b"k1")])
            profile.disable()
            await runner.drain(timeout=5)
        return profile, sent

    return asyncio.run(go())


def test_a_submit_passes_one_exception_layer() -> None:
    profile, sent = _submit_profiled()
    assert sent[0]["status"] == 202
    # The app's exception middleware; Starlette's per-route wrapper was a second one.
    assert _calls(profile, _exception_handler.wrap_app_handling_exceptions.__code__) == 1


def test_a_submit_answer_builds_no_starlette_headers() -> None:
    profile, sent = _submit_profiled()
    assert sent[0]["status"] == 202
    assert _calls(profile, responses.Response.init_headers.__code__) == 0


def test_a_submit_without_a_query_string_parses_none() -> None:
    profile, sent = _submit_profiled()
    assert sent[0]["status"] == 202
    assert _calls(profile, QueryParams.__init__.__code__) == 0


def test_a_query_string_is_still_checked() -> None:
    _, sent = _submit_profiled("?wait=1")
    assert sent[0]["status"] == 400
    error = json.loads(sent[1]["body"])["error"]
    assert error["param"] == "wait" and "unknown query parameter" in error["message"]


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, None),
        (202, {"Location": "/tasks/run_1"}),
        (200, {"Location": "/tasks/run_1", "Idempotent-Replayed": "true"}),
        (503, {"x-should-retry": "false", "Retry-After": "2"}),
        (400, {"Content-Type": "application/problem+json"}),
        (204, None),
    ],
)
def test_a_json_answer_has_starlettes_bytes(status: int, headers: dict[str, str] | None) -> None:
    data = {"id": "run_1", "text": "héllo", "n": [1, 2.5, None]}
    ours = _json(data, status, headers)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    theirs = Response(text, status_code=status, media_type="application/json", headers=headers)
    assert (ours.status_code, ours.body, ours.raw_headers) == (
        theirs.status_code,
        theirs.body,
        theirs.raw_headers,
    )


def _guard_sees(headers: Headers, body: bytes) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the app behind a Guard got the server's own ``receive`` (not a counter)."""
    seen: dict[str, bool] = {}

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen["own"] = receive is scope["state"]["receive"]
        while (await receive()).get("more_body"):
            pass
        await Response(b"ok")(scope, receive, send)

    guard = Guard(inner, max_body_bytes=10)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope["state"]["receive"] = receive
        await guard(scope, receive, send)

    async def go() -> list[dict[str, Any]]:
        return await _call(app, "POST", "/x", body, headers)  # type: ignore[no-any-return]

    sent = asyncio.run(go())
    return seen.get("own", False), sent


def test_the_guard_counts_only_bodies_without_a_declared_length() -> None:
    # Content-Length within the limit: the server frames the body; nothing to count.
    own, sent = _guard_sees([], b"12345")
    assert own and sent[0]["status"] == 200
    # Chunked: counted, and refused past the limit.
    own, sent = _guard_sees([(b"transfer-encoding", b"chunked")], b"")
    assert not own
    # Declared over the limit: 413 before the app runs.
    _, sent = _guard_sees([], b"x" * 11)
    assert sent[0]["status"] == 413


def test_routes_keep_their_handlers_names() -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    names = {route.name for route in task_app(runner, metrics=None).routes}  # type: ignore[attr-defined]
    assert {"healthz", "metrics_text", "openapi", "checked"} <= names


def test_a_submit_builds_no_starlette_headers_to_read_its_idempotency_key() -> None:
    profile, sent = _submit_profiled()
    assert sent[0]["status"] == 202
    assert _calls(profile, datastructures.Headers.__init__.__code__) == 0


def test_an_event_stream_reads_the_runs_record_once_before_its_final_frame() -> None:
    async def go() -> tuple[str, int, list[dict[str, Any]]]:
        runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
        app = task_app(runner, metrics=None)
        async with runner:
            record = await runner.submit({"n": 2})
            await runner.await_run(record.run_id, timeout=5)
            store = runner.store
            real, reads = store.get, []

            async def counted(run_id: str) -> Any:
                reads.append(run_id)
                return await real(run_id)

            store.get = counted  # type: ignore[method-assign]
            sent = await _call(app, "GET", f"/tasks/{record.run_id}/events")
            store.get = real  # type: ignore[method-assign]
        return record.run_id, len(reads), sent

    run_id, reads, sent = asyncio.run(go())
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:])
    final = body.rsplit(b"event: task\ndata: ", 1)[1]
    assert json.loads(final)["id"] == run_id
    # The handler's 404 check, the follow's check that the run stopped moving, and the final
    # `task` frame: the events start from the handler's record instead of a read of their own.
    assert reads == 3


def _submit_answer(body: bytes) -> tuple[cProfile.Profile, list[dict[str, Any]], Any]:
    """A created submit's answer, profiled, with the record the runner stores for it."""

    async def go() -> tuple[cProfile.Profile, list[dict[str, Any]], Any]:
        runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
        app = task_app(runner, metrics=None)
        async with runner:
            await _call(app, "POST", "/tasks", body, [(b"idempotency-key", b"warm")])
            profile = cProfile.Profile()
            profile.enable()
            sent = await _call(app, "POST", "/tasks", body, [(b"idempotency-key", b"k1")])
            profile.disable()
            record = await runner.get(json.loads(sent[1]["body"])["id"])
            await runner.drain(timeout=5)
        return profile, sent, record

    return asyncio.run(go())


def test_a_created_submit_is_encoded_without_the_standard_librarys_encoder() -> None:
    body = json.dumps({"input": {"n": 1}, "labels": {"team": "é\u2028"}}).encode()
    profile, sent, _ = _submit_answer(body)
    assert sent[0]["status"] == 202
    assert _calls(profile, json.JSONEncoder.encode.__code__) == 0
    assert dict(sent[0]["headers"])[b"location"].startswith(b"/tasks/run_")


def test_a_created_submit_has_the_bytes_the_standard_library_writes() -> None:
    body = json.dumps({"input": {"n": 1}, "labels": {"team": 'é\u2028"\\'}}).encode()
    _, sent, _ = _submit_answer(body)
    answer = json.loads(sent[1]["body"])
    # The same record through the stdlib encoder (the path every other answer takes).
    theirs = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
    assert sent[1]["body"] == theirs
    assert list(answer)[-1] == "id" and answer["status"] == "queued"
    assert answer["labels"] == {"team": 'é\u2028"\\'} and answer["input"] == {"n": 1}


def test_a_replayed_submit_takes_the_standard_librarys_encoder() -> None:
    async def go() -> tuple[cProfile.Profile, list[dict[str, Any]]]:
        runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
        app = task_app(runner, metrics=None)
        body = json.dumps({"input": {"n": 1}}).encode()
        async with runner:
            await _call(app, "POST", "/tasks", body, [(b"idempotency-key", b"k1")])
            profile = cProfile.Profile()
            profile.enable()
            sent = await _call(app, "POST", "/tasks", body, [(b"idempotency-key", b"k1")])
            profile.disable()
            await runner.drain(timeout=5)
        return profile, sent

    profile, sent = asyncio.run(go())
    assert sent[0]["status"] == 200
    assert (b"idempotent-replayed", b"true") in sent[0]["headers"]
    assert _calls(profile, json.JSONEncoder.encode.__code__) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"output": {"when": object()}},
        {"assistant": {"config": {}}},
        {"interrupts": ({"id": "i1", "value": object()},)},
        {"decisions": {"i1": True}},
        {"events": ({"type": "x"},)},
        {"schedule": {"cron": "* * * * *"}},
    ],
)
def test_a_record_with_data_of_its_own_is_left_to_the_standard_library(
    change: dict[str, Any],
) -> None:
    from tensorsketch.runs import RunRecord
    from tensorsketch.serve._tasks import _submitted_json

    record = RunRecord(run_id="run_1", thread_id="t", graph="g", input={"n": 1})
    assert _submitted_json(record) is not None
    assert _submitted_json(record.replace(**change)) is None
