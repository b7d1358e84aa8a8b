"""A run cancelled while its store is still opening the thread gives the lease back.

Found by the subgraph property test: a ``Send`` sibling's failure cancels a nested run whose
SQLite ``open_thread`` (run on a thread) had already granted the lease; the resume then met
``ThreadBusyError`` for a whole lease TTL.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Count(Schema):
    n: int = 0


class Step(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(n=inp.n + 1)


class SlowToAnswer(SqliteBackend):
    """Grants the lease, then is slow to say so (the cancellation lands in between)."""

    granted = asyncio.Event()

    async def open_thread(self, *args: Any, **kwargs: Any) -> Any:
        opened = await super().open_thread(*args, **kwargs)
        SlowToAnswer.granted.set()
        await asyncio.sleep(30)
        return opened


async def test_a_run_cancelled_mid_open_gives_the_lease_back(tmp_path: Path) -> None:
    app = Graph(Count).add(Step).edge(START, "Step").edge("Step", END).compile()
    slow = SlowToAnswer(tmp_path / "runs.db")
    SlowToAnswer.granted = asyncio.Event()
    run = asyncio.ensure_future(app.invoke({"n": 1}, thread_id="t", backend=slow))
    await asyncio.wait_for(SlowToAnswer.granted.wait(), 10)
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    fast = SqliteBackend(tmp_path / "runs.db")
    out = await app.invoke({"n": 1}, thread_id="t", backend=fast)  # no ThreadBusyError
    assert out.n == 2
