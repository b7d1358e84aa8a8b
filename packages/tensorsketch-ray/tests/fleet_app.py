"""The simulated agent the fleet tests and benchmark run: a fake model and one counted effect.

Every run is an agent turn on :class:`~tensorsketch.fake.FakeProvider`: the model "thinks"
for ``TS_FLEET_MODEL_SECONDS`` (0.05 s) and asks for the ``settle`` tool, the tool performs the
side effect, the model thinks again and answers. Each model call and the tool call are
journaled, so a run resumed on another actor replays what completed.

The side effect is real and counted in PostgreSQL (``TS_FLEET_EFFECTS_DSN``, schema
``TS_FLEET_EFFECTS_SCHEMA``), in one transaction:

* ``attempts`` gets a row every time the tool body runs (with the pid that ran it), and
* ``applied`` gets the run's thread id, *keyed*: an attempt for a thread already applied
  changes nothing. That is the idempotency key an effect needs for the one case the journal
  cannot cover — an effect in flight at the moment its process is killed (it ran, but its
  result was never recorded), which the resumed run executes again.

So ``applied`` says whether every run's effect happened exactly once in effect, and
``attempts`` how often a body actually ran — where the at-least-once window showed.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from psycopg_pool import AsyncConnectionPool

from tensorsketch import Context, create_agent, tool
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant

__all__ = ["SCHEMA_SQL", "agent"]

MODEL_SECONDS = float(os.environ.get("TS_FLEET_MODEL_SECONDS", "0.05"))

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.attempts (
    thread_id text NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {schema}.applied (
    thread_id text PRIMARY KEY, pid integer NOT NULL
);
"""

_pools: dict[int, AsyncConnectionPool[Any]] = {}


async def _pool() -> AsyncConnectionPool[Any]:
    """One small pool per event loop (an actor has one)."""
    key = id(asyncio.get_running_loop())
    pool = _pools.get(key)
    if pool is None:
        pool = AsyncConnectionPool(
            os.environ["TS_FLEET_EFFECTS_DSN"], min_size=1, max_size=4, open=False
        )
        await pool.open()
        _pools[key] = pool
    return pool


@tool
async def settle(ctx: Context, order: str) -> str:
    """Settle an order: the run's one side effect.

    :param order: the order id.
    """
    schema = os.environ["TS_FLEET_EFFECTS_SCHEMA"]
    pool = await _pool()
    async with pool.connection() as conn:
        await conn.execute(
            f"INSERT INTO {schema}.attempts (thread_id, pid) VALUES (%s, %s)",
            (ctx.thread_id, os.getpid()),
        )
        await conn.execute(
            f"INSERT INTO {schema}.applied (thread_id, pid) VALUES (%s, %s) "
            "ON CONFLICT (thread_id) DO NOTHING",
            (ctx.thread_id, os.getpid()),
        )
    return f"order {order} settled"


async def _model(messages: list[Message], tools: list[Any]) -> Message | str:
    await asyncio.sleep(MODEL_SECONDS)
    if any(m.role == "tool" for m in messages):
        return "Done: the order is settled."
    return assistant(tool_calls=[ToolCall(id="call_settle", name="settle", args={"order": "7"})])


agent = create_agent(FakeProvider(policy=_model), tools=[settle], system="Settle orders.")
