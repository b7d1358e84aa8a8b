"""Database steps under a kill: ``ctx.transaction`` writes a table of the run's own store and
journals its result in the same commit, so killing the process anywhere leaves both or
neither, and the resumed run's table holds each row once.

The scenario (:func:`db_step_graph`): ``Debit`` inserts one row for the thread into a table
of the store's database through ``ctx.transaction``; ``Audit`` counts the thread's rows the
same way. Every call of ``Debit``'s function is counted in the
:class:`~tensorsketch.testing.crash.EffectLedger`, so the standard crash matrix
(:func:`~tensorsketch.testing.crash.run_crash_matrix` with ``scenario=DB_STEP_SCENARIO``)
checks a kill at every durable boundary — the commit of the step included — and
:func:`run_db_step_kill` kills inside the transaction, before the user's write or after it
and before the commit (the attempt is counted twice then: what matters is the table).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.schema import Schema
from tensorsketch.testing.crash import BackendSpec, EffectLedger, _drain, _mp_context

__all__ = ["DB_STEP_SCENARIO", "DbStepKill", "DbStepState", "db_step_graph", "run_db_step_kill"]

DB_STEP_SCENARIO = "tensorsketch.testing.db_steps:db_step_graph"
#: The user's table (in the store's own database; rows are keyed by thread).
TABLE = "tensorsketch_test_debits"
_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT NOT NULL, what TEXT NOT NULL)"
_COUNT_SQLITE = f"SELECT COUNT(*) FROM {TABLE} WHERE thread_id = ?"
_COUNT_PG = f"SELECT COUNT(*) FROM {TABLE} WHERE thread_id = %s"
#: Where inside the transaction the child kills itself (``None``: nowhere).
_KILL: list[str] = []
#: What it sends itself there: SIGKILL (the crash harness) or SIGSTOP (the stall harness).
_SIGNAL: list[signal.Signals] = [signal.SIGKILL]


class DbStepState(Schema):
    """``debited``: rows ``Debit`` saw after its write; ``rows``: rows ``Audit`` counted."""

    order: str = ""
    debited: int = 0
    rows: int = 0


def _kill_here(point: str) -> None:
    if point in _KILL:
        os.kill(os.getpid(), _SIGNAL[0])


def _debit(thread: str, ledger: EffectLedger | None) -> Any:
    def write(conn: Any) -> Any:
        if ledger is not None:
            ledger.hit(thread, "debit")
        if isinstance(conn, sqlite3.Connection):
            conn.execute(_CREATE)
            _kill_here("before_write")
            conn.execute(f"INSERT INTO {TABLE} VALUES (?, 'debit')", (thread,))
            _kill_here("after_write")
            row = conn.execute(_COUNT_SQLITE, (thread,))
            return int(row.fetchone()[0])

        async def write_async() -> int:  # psycopg's AsyncConnection
            await conn.execute(_CREATE)
            _kill_here("before_write")
            await conn.execute(f"INSERT INTO {TABLE} VALUES (%s, 'debit')", (thread,))
            _kill_here("after_write")
            cur = await conn.execute(
                f"SELECT COUNT(*) FROM {TABLE} WHERE thread_id = %s", (thread,)
            )
            found = await cur.fetchone()
            return int(found[0])

        return write_async()

    return write


def _count(thread: str) -> Any:
    def read(conn: Any) -> Any:
        if isinstance(conn, sqlite3.Connection):
            row = conn.execute(_COUNT_SQLITE, (thread,))
            return int(row.fetchone()[0])

        async def read_async() -> int:
            cur = await conn.execute(
                f"SELECT COUNT(*) FROM {TABLE} WHERE thread_id = %s", (thread,)
            )
            found = await cur.fetchone()
            return int(found[0])

        return read_async()

    return read


def db_step_graph(ledger: EffectLedger | None = None) -> CompiledGraph[DbStepState]:
    """``Debit`` (one row, through ``ctx.transaction``) then ``Audit`` (count the rows)."""

    class Debit(Node):
        class Out(Schema):
            debited: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            n = await ctx.transaction("debit", _debit(ctx.thread_id or "", ledger))
            return self.Out(debited=n)

    class Audit(Node):
        class Out(Schema):
            rows: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(rows=await ctx.transaction("audit", _count(ctx.thread_id or "")))

    graph = Graph(DbStepState, name="db-step").add(Debit).add(Audit)
    return graph.edge(START, "Debit").edge("Debit", "Audit").edge("Audit", END).compile()


@dataclass(frozen=True, slots=True)
class DbStepKill:
    """A kill inside ``Debit``'s transaction and what the resume left."""

    point: str
    killed: bool
    #: Calls of ``Debit``'s function (2: the killed one and the resumed one).
    attempts: int
    debited: int
    rows: int

    def check(self) -> None:
        if not self.killed or self.debited != 1 or self.rows != 1:
            msg = f"a kill {self.point} broke the database step: {self}"
            raise AssertionError(msg)


def _child(config: dict[str, Any]) -> None:
    asyncio.run(_child_async(config))


async def _child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    backend = spec.create()
    backend.lease_ttl = float(config["lease_ttl"])
    _KILL[:] = [config["point"]]
    app = db_step_graph(EffectLedger(config["ledger"]))
    await app.invoke({"order": "o-1"}, thread_id=config["thread"], backend=backend)


async def run_db_step_kill(
    backend: BackendSpec,
    workdir: str | os.PathLike[str],
    *,
    point: str,
    lease_ttl: float = 0.5,
) -> DbStepKill:
    """Kill a child ``point`` (``"before_write"`` or ``"after_write"``, before the commit)
    inside ``Debit``'s transaction, resume the thread here, and report."""
    if point not in ("before_write", "after_write"):
        msg = f"`point` must be 'before_write' or 'after_write', got {point!r}."
        raise ValueError(msg)
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    thread = f"dbstep-{uuid.uuid4().hex[:8]}"
    config = {
        "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
        "ledger": ledger.path,
        "thread": thread,
        "point": point,
        "lease_ttl": lease_ttl,
    }
    modules = ["tensorsketch.testing.db_steps"]
    if backend.module():
        modules.append(str(backend.module()))
    process = _mp_context(modules).Process(target=_child, args=(config,), daemon=True)
    process.start()
    await asyncio.to_thread(process.join)
    killed = process.exitcode == -signal.SIGKILL
    store = backend.create()
    store.lease_ttl = lease_ttl
    app = db_step_graph(ledger)
    try:
        await _drain(app, store, thread, {"order": "o-1"}, lease_ttl)
        state = await app.aget_state(thread, store)
    finally:
        await store.aclose()
    assert state is not None
    attempts = ledger.counts(thread).get("debit", 0)
    return DbStepKill(point, killed, attempts, state.debited, state.rows)
