"""Schemathesis fuzzes the task API from its own /openapi.json over a real uvicorn server:
valid and invalid requests to every operation, and not one 5xx; the store stays readable."""

from __future__ import annotations

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

STATUSES = {"queued", "running", "suspended", "succeeded", "failed", "cancelled"}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode))
def test_the_task_api_answers_fuzzed_requests_without_a_5xx(
    live: Any, tmp_path: Any, mode: schemathesis.GenerationMode
) -> None:
    runner = AsyncRunner(
        task_graphs.work_graph(),
        backend=SqliteBackend(tmp_path / "fuzz.db"),
        timer_refresh=0.5,
        poll_interval=0.05,
    )
    server = live(task_app(runner, drain_timeout=1.0, max_body_bytes=64 << 10))
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 23  # every route: resume, steer, assistants and schedules
    strategy = st.one_of(*(op.as_strategy(generation_mode=mode) for op in operations))
    answered: dict[int, int] = {}

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(base_url=server.url, timeout=30)
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()
    assert not any(status >= 500 for status in answered), answered
    assert any(400 <= status < 500 for status in answered)  # it did send bad requests
    # Nothing corrupted: every stored record still reads back, page by page.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        cursor = None
        while True:
            params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = client.get("/tasks", params=params)
            assert page.status_code == 200
            for task in page.json()["tasks"]:
                assert task["status"] in STATUSES
                assert client.get(f"/tasks/{task['id']}").status_code == 200
            if not (cursor := page.json()["next_cursor"]):
                break
