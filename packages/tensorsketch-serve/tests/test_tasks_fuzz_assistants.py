"""Schemathesis fuzzes the assistant and steering routes from the task API's /openapi.json,
on an agent graph (so configs naming its tools are valid) over a real uvicorn server. Half of
the cases aim at an assistant and a run that exist (a fuzzed id alone is nearly always a
404): valid and invalid requests, and not one 5xx."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
import schemathesis
import task_graphs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import task_app

MINE = ("/assistants", "/tasks/{id}/steer")


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode))
def test_assistant_and_steering_routes_answer_fuzzed_requests_without_a_5xx(
    live: Any, tmp_path: Any, mode: schemathesis.GenerationMode
) -> None:
    runner = AsyncRunner(
        task_graphs.configurable_agent(),
        backend=SqliteBackend(tmp_path / "fuzz.db"),
        poll_interval=0.05,
    )
    server = live(task_app(runner, drain_timeout=1.0, max_body_bytes=64 << 10))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        made = client.post("/assistants", json={"name": "known", "config": {"tools": ["lookup"]}})
        assert made.status_code == 201, made.text
        run = client.post("/tasks", json={"input": {"query": "hi"}, "assistant_id": "known"})
        assert run.status_code == 202, run.text
        ids = {"assistant": made.json()["id"], "run": run.json()["id"]}
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if op.path.startswith(MINE)
    ]
    assert len(operations) == 7
    strategy = st.one_of(*(op.as_strategy(generation_mode=mode) for op in operations))
    answered: dict[int, int] = {}
    aimed = random.Random(7)

    @settings(
        max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=strategy)
    def fuzz(case: schemathesis.Case) -> None:
        if case.path_parameters and aimed.random() < 0.5:
            which = "run" if case.path.startswith("/tasks") else "assistant"
            case.path_parameters = {**case.path_parameters, "id": ids[which]}
        response = case.call(base_url=server.url, timeout=30)
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()
    assert not any(status >= 500 for status in answered), answered
    assert any(400 <= status < 500 for status in answered)
    if mode is schemathesis.GenerationMode.POSITIVE:
        # valid requests: some succeed; negative mode's invalid ones need not (a success
        # there is only a body the generator failed to make invalid)
        assert any(status < 300 for status in answered), answered
    with httpx.Client(base_url=server.url, timeout=30) as client:
        listed = client.get("/assistants", params={"limit": 1000})
        assert listed.status_code == 200
        for assistant in listed.json()["assistants"]:
            assert client.get(f"/assistants/{assistant['id']}").status_code == 200
