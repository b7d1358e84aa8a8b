"""``ctx.transaction``: a database step whose writes commit with its journal record, so it is
exactly-once — killed before the user's write, after it (before the commit) and after the
commit, on SQLite (PostgreSQL: tensorsketch-backends' test_db_steps)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Context, Graph, Node, Schema, SqliteBackend
from tensorsketch.constants import END, START
from tensorsketch.errors import ForkEffectError, TransactionUnsupportedError
from tensorsketch.runtime.backends import InMemoryBackend
from tensorsketch.testing.crash import BackendSpec, run_crash_matrix
from tensorsketch.testing.db_steps import DB_STEP_SCENARIO, db_step_graph, run_db_step_kill


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_write", "after_write"])
async def test_killed_inside_the_transaction_sqlite(tmp_path: Path, point: str) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_db_step_kill(spec, tmp_path / "work", point=point)
    report.check()
    assert report.attempts == 2  # the killed attempt rolled back; the resume wrote once


@pytest.mark.slow
async def test_killed_at_every_boundary_sqlite(tmp_path: Path) -> None:
    """Every durable boundary, the step's own commit included: one row, one call."""
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_crash_matrix(
        spec, tmp_path / "work", scenario=DB_STEP_SCENARIO, input={}, lease_ttl=1.0
    )  # 1 s: its points run at once (each_point), and a loaded child keeps its lease
    assert "transaction 0:Debit:0:debit" in report.boundaries
    assert all(k.killed for k in report.kills)
    report.check()
    assert report.baseline_values["rows"] == report.baseline_values["debited"] == 1


async def test_the_row_and_the_record_commit_together(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "s.db")
    out = await db_step_graph().invoke({}, thread_id="t", backend=backend)
    assert (out.debited, out.rows) == (1, 1)
    keys = [key for key, _ in await backend.list_effects("t")]
    assert "0:Debit:0:debit" in keys and "1:Audit:0:audit" in keys
    assert not any(key.startswith("intent:") for key in keys)  # atomic: nothing in doubt
    await backend.aclose()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM tensorsketch_test_debits").fetchone()
    assert count == 1


async def test_a_failing_step_rolls_its_writes_back(tmp_path: Path) -> None:
    class Ledger(Schema):
        done: bool = False

    class Fails(Node):
        class Out(Schema):
            done: bool

        async def run(self, ctx: Context, inp: Any) -> Any:
            def write(conn: sqlite3.Connection) -> None:
                conn.execute("CREATE TABLE IF NOT EXISTS mine (x INTEGER)")
                conn.execute("INSERT INTO mine VALUES (1)")
                raise RuntimeError("declined")

            await ctx.transaction("write", write)
            return self.Out(done=True)

    app = Graph(Ledger).add(Fails).edge(START, "Fails").edge("Fails", END).compile()
    backend = SqliteBackend(tmp_path / "s.db")
    with pytest.raises(RuntimeError, match="declined"):
        await app.invoke({}, thread_id="t", backend=backend)
    await backend.aclose()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name = 'mine'").fetchall()
    assert tables == []  # the whole transaction, the CREATE too, was rolled back


async def test_an_async_function_on_sqlite_is_refused(tmp_path: Path) -> None:
    class S(Schema):
        n: int = 0

    class Step(Node):
        class Out(Schema):
            n: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            async def write(conn: Any) -> int:
                return 1

            return self.Out(n=await ctx.transaction("w", write))

    app = Graph(S).add(Step).edge(START, "Step").edge("Step", END).compile()
    backend = SqliteBackend(tmp_path / "s.db")
    with pytest.raises(TypeError, match="plain `def fn"):
        await app.invoke({}, thread_id="t", backend=backend)
    await backend.aclose()


@pytest.mark.parametrize("durable", [True, False])
async def test_stores_that_cannot_are_refused_with_the_alternative(durable: bool) -> None:
    app = db_step_graph()
    with pytest.raises(TransactionUnsupportedError, match=r"idempotency_key|ctx\.step"):
        if durable:
            await app.invoke({}, thread_id="t", backend=InMemoryBackend())
        else:
            await app.invoke({})


async def test_a_fork_treats_a_transaction_its_origin_ran_after_the_fork_point_as_an_effect(
    tmp_path: Path,
) -> None:
    """Down a fork, a database step the origin committed after the fork point is a side
    effect like ``ctx.step``: the fork stops before it by default, ``effects="reuse"``
    replays the origin's result without writing, ``effects="rerun"`` writes again."""
    written: list[str | None] = []

    class Paid(Schema):
        paid: int = 0

    class Pay(Node):
        class Out(Schema):
            paid: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            def write(conn: sqlite3.Connection) -> int:
                written.append(ctx.thread_id)
                conn.execute("CREATE TABLE IF NOT EXISTS payments (thread TEXT)")
                conn.execute("INSERT INTO payments VALUES (?)", (ctx.thread_id,))
                return len(written)

            return self.Out(paid=await ctx.transaction("pay", write))

    app = Graph(Paid).add(Pay).edge(START, "Pay").edge("Pay", END).compile()
    backend = SqliteBackend(tmp_path / "s.db")
    await app.invoke({}, thread_id="t", backend=backend)
    start = (await app.aget_history("t", backend))[0]
    with pytest.raises(ForkEffectError, match=r"ctx\.transaction 'pay'.*effects='reuse'"):
        await app.fork(backend, "t", start.id, "stopped")
    assert written == ["t"]
    reused = await app.fork(backend, "t", start.id, "reused", effects="reuse")
    assert reused.paid == 1 and written == ["t"]
    rerun = await app.fork(backend, "t", start.id, "rerun", effects="rerun")
    assert rerun.paid == 2 and written == ["t", "rerun"]
    await backend.aclose()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        rows = [r[0] for r in conn.execute("SELECT thread FROM payments ORDER BY rowid")]
    assert rows == ["t", "rerun"]
