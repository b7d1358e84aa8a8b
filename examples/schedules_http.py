"""Schedules over the task API, for two users, offline on SQLite.

Ana stores a schedule that fires every half second (``POST /schedules``) and a weekday cron
schedule in Berlin time; her schedule's runs are hers (they inherit its ``owner`` label), so
she reads its run history (``GET /schedules/{id}/runs``) and bob gets a 404 for all of it.
Then she stops it (``DELETE /schedules/{id}``).

Run: python examples/schedules_http.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import httpx

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends import SqliteBackend
from tensorsketch.serve import Authorization, Identity, task_app
from tensorsketch.testing.runs import multitask_graph

WORKDIR = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp(prefix="ts-schedules-"))
PEOPLE = {"ana-key": Identity("ana"), "bob-key": Identity("bob")}


def who(request: httpx.Request) -> Identity | None:
    """``authenticate``: the bearer token names the user (``None``: a 401)."""
    return PEOPLE.get(request.headers.get("authorization", "").removeprefix("Bearer "))


def bearer(user: str) -> dict[str, str]:
    return {"authorization": f"Bearer {user}-key"}


async def main() -> None:
    backend = SqliteBackend(WORKDIR / "runs.db")
    runner = AsyncRunner(multitask_graph(0.01), backend=backend, poll_interval=0.05)
    app = task_app(runner, authenticate=who, authorize=Authorization())
    transport = httpx.ASGITransport(app=app)
    async with runner, httpx.AsyncClient(transport=transport, base_url="http://tasks") as http:
        tick = {"every": 0.5, "input": {"tag": "t"}, "name": "heartbeat"}
        made = (await http.post("/schedules", json=tick, headers=bearer("ana"))).json()
        print(f"ana's schedule {made['id']}: every {made['schedule']['every']} s")
        standup = {"cron": "30 9 * * mon-fri", "timezone": "Europe/Berlin", "input": {"tag": "s"}}
        cron = (await http.post("/schedules", json=standup, headers=bearer("ana"))).json()
        print(f"a weekday cron in Berlin time, first at Unix time {cron['wake_at']:.0f}")

        runs: list[dict[str, object]] = []
        while len(runs) < 2:
            await asyncio.sleep(0.2)
            history = await http.get(f"/schedules/{made['id']}/runs", headers=bearer("ana"))
            runs = [r for r in history.json()["tasks"] if r["status"] == "succeeded"]
        print(f"it fired; its runs: {[(r['id'], r['labels']) for r in runs]}")
        peek = await http.get(f"/schedules/{made['id']}/runs", headers=bearer("bob"))
        print(f"bob asks for its runs: {peek.status_code}")
        mine = (await http.get("/schedules", headers=bearer("bob"))).json()["schedules"]
        print(f"bob's schedules: {mine}")
        stopped = (await http.delete(f"/schedules/{made['id']}", headers=bearer("ana"))).json()
        print(f"stopped: {stopped['status']} after {stopped['schedule']['fired']} firings")
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
