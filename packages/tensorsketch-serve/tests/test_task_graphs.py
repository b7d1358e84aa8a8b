"""The test graphs' own promises, where a broken one looks like a product bug elsewhere.

``Work``'s effects take turns (``task_graphs.turns``). That lock was once one asyncio lock
for the module: bound to the loop of the first server whose runs waited on it, it failed
every later server's run that had to wait (``RuntimeError``), and under load, where runs
overlap, the authorization test's retry with an ``Idempotency-Key`` found its run failed and
got a new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import task_graphs
from authz_servers import as_user, make_stores, serve

__all__ = ["make_stores", "serve"]  # the shared fixtures, found by pytest here


async def _wait_for_a_turn() -> None:
    """Two effects on a loop of their own, the second waiting for the first's turn."""
    turn = task_graphs.turns()
    async with turn:
        waiter = asyncio.create_task(_take_turn_once())
        await asyncio.sleep(0)  # the waiter queues on the lock
    await waiter


async def _take_turn_once() -> None:
    async with task_graphs.turns():
        pass


async def _hold_turn() -> asyncio.Lock:
    turn = task_graphs.turns()
    await turn.acquire()
    return turn


async def _release(turn: asyncio.Lock) -> None:
    turn.release()


async def _waiters(turn: asyncio.Lock) -> int:
    return len(turn._waiters or ())  # asyncio keeps no public count of them


@pytest.mark.parametrize("make_stores", ["sqlite"], indirect=True)
def test_a_run_waits_for_its_turn_on_a_later_servers_loop(serve: Callable[..., Any]) -> None:
    """A run on a server started after another loop's runs waited for their turn waits for
    its own turn and succeeds: a retry with its Idempotency-Key gets the same run."""
    asyncio.run(_wait_for_a_turn())  # an earlier server's runs, on a loop now gone
    server = serve()
    turn = server.call(_hold_turn())  # another run's effect is in flight on this server
    headers = {**as_user("ana"), "Idempotency-Key": "turns"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post("/tasks", json={"input": {"n": 2}}, headers=headers)
        assert first.status_code == 202, first.text
        run_id = first.json()["id"]
        status = first.json()["status"]
        # The run reaches its first effect: it waits for the turn (or, with the turn bound to
        # the old loop, fails).
        for _ in range(1000):
            if server.call(_waiters(turn)) or status == "failed":
                break
            time.sleep(0.01)
            status = client.get(f"/tasks/{run_id}", headers=as_user("ana")).json()["status"]
        else:
            pytest.fail("the run never reached its first effect")
        server.call(_release(turn))
        again = client.post("/runs", json={"input": {"n": 2}}, headers=headers)
        first_run = client.get(f"/tasks/{run_id}", headers=as_user("ana")).json()
    assert again.json()["id"] == run_id, (first_run["status"], first_run["error"])
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["status"] == "succeeded", again.text
