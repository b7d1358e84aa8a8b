"""The schedule routes of the task API (``/schedules...``) over a real uvicorn server with
httpx, on SQLite, PostgreSQL and Redis: two users each create schedules, one fires and its
runs are its owner's, the other user reaches none of it, and bad schedules are 400s that
say what to fix."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from authz_servers import as_user, make_stores, serve

__all__ = ["make_stores", "serve"]  # the fixtures this module borrows


def _poll(check: Callable[[], Any], what: str, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"waited {seconds:g} s for {what}")


def test_two_users_schedule_runs_and_reach_only_their_own(serve: Callable[..., Any]) -> None:
    server = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        tick = {"every": 0.2, "input": {"n": 1}, "name": "tick", "max_in_flight": None}
        made = client.post("/schedules", json=tick, headers=as_user("ana"))
        assert made.status_code == 201, made.text
        ana = made.json()
        assert ana["kind"] == "schedule" and ana["labels"] == {"owner": "ana"}
        assert made.headers["location"] == f"/schedules/{ana['id']}"
        again = client.post("/schedules", json=tick, headers=as_user("ana"))
        assert again.status_code == 200 and again.json()["id"] == ana["id"]
        assert again.headers["idempotent-replayed"] == "true"
        cron = {"cron": "30 9 * * mon-fri", "timezone": "Europe/Berlin", "input": {"n": 1}}
        bob = client.post("/schedules", json=cron, headers=as_user("bob"))
        assert bob.status_code == 201, bob.text
        assert bob.json()["schedule"]["cron"] == "30 9 * * mon-fri"
        assert bob.json()["wake_at"] > time.time()

        def history(who: str, ident: str) -> httpx.Response:
            return client.get(f"/schedules/{ident}/runs", headers=as_user(who))

        runs = _poll(
            lambda: [
                t for t in history("ana", ana["id"]).json()["tasks"] if t["status"] == "succeeded"
            ][1:],
            "two finished runs of ana's schedule",
        )
        for run in runs:
            assert run["labels"] == {"owner": "ana", "schedule": ana["id"]}
            assert client.get(f"/tasks/{run['id']}", headers=as_user("ana")).status_code == 200
            assert client.get(f"/tasks/{run['id']}", headers=as_user("bob")).status_code == 404
        assert history("bob", ana["id"]).status_code == 404
        assert client.get(f"/schedules/{ana['id']}", headers=as_user("bob")).status_code == 404
        assert client.delete(f"/schedules/{ana['id']}", headers=as_user("bob")).status_code == 404
        assert history("bob", bob.json()["id"]).json()["tasks"] == []

        def ids(who: str) -> list[str]:
            listed = client.get("/schedules", headers=as_user(who))
            assert listed.status_code == 200, listed.text
            return [s["id"] for s in listed.json()["schedules"]]

        assert ids("ana") == [ana["id"]]
        assert ids("bob") == [bob.json()["id"]]
        assert ids("root") == [ana["id"], bob.json()["id"]]

        stopped = client.delete(f"/schedules/{ana['id']}", headers=as_user("ana"))
        assert stopped.status_code == 200 and stopped.json()["status"] == "cancelled"
        fired = client.get(f"/schedules/{ana['id']}", headers=as_user("ana")).json()
        assert fired["status"] == "cancelled" and fired["schedule"]["fired"] >= 2
        # Stopping is idempotent, and the admin reaches both schedules.
        assert client.delete(f"/schedules/{ana['id']}", headers=as_user("root")).status_code == 200
        assert (
            client.get(f"/schedules/{bob.json()['id']}", headers=as_user("root")).status_code == 200
        )
        # A run id is not a schedule id.
        assert client.get(f"/schedules/{runs[0]['id']}", headers=as_user("ana")).status_code == 404


def test_bad_schedules_are_400s_that_say_what_to_fix(serve: Callable[..., Any]) -> None:
    server = serve()
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"input": {"n": 1}}, "cron", "exactly one of `cron`, `every` or `at`"),
        ({"cron": "* * * * *", "every": 5}, "every", "exactly one of"),
        ({"cron": "61 * * * *"}, "", "minute"),
        ({"cron": "* * * *"}, "", "5 fields"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "", "Mars/Olympus"),
        ({"every": 5, "timezone": "UTC"}, "timezone", "with `cron` only"),
        ({"every": 0}, "every", "above 0"),
        ({"every": "5"}, "every", "number of seconds"),
        ({"at": 1e300}, "at", "at most"),
        ({"every": 5, "max_in_flight": 0}, "max_in_flight", "int >= 1"),
        ({"every": 5, "labels": {"schedule": "x"}}, "labels.schedule", "leave it out"),
        ({"every": 5, "input": [1]}, "input", "object of state fields"),
        ({"every": 5, "when": "now"}, "when", "unknown field"),
        ({"every": 5, "name": ""}, "name", "1 to 128"),
    ]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body, param, words in cases:
            answer = client.post("/schedules", json=body, headers=as_user("ana"))
            assert answer.status_code == 400, (body, answer.text)
            error = answer.json()["error"]
            assert words in error["message"], (body, error)
            if param:
                assert error["param"] == param, (body, error)
        assert (
            client.get("/schedules", params={"limit": 0}, headers=as_user("ana")).status_code == 400
        )
        assert (
            client.get("/schedules", params={"since": 1}, headers=as_user("ana")).status_code == 400
        )
        assert client.get("/schedules", headers=as_user("ana")).json()["schedules"] == []
