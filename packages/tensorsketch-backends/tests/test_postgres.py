"""``PostgresBackend`` specifics on the real server: schema creation and versioning, the ways
to hand it connections, event-loop changes, and a missing driver."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tensorsketch import START, Context, Graph, Node, Schema
from tensorsketch.errors import CheckpointDecodeError, ThreadBusyError
from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.postgres import PostgresBackend

pytestmark = pytest.mark.postgres


class Count(Schema):
    n: int = 0


class Inc(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(n=await ctx.step("inc", lambda: inp.n + 1))


COUNTER = Graph(Count).add(Inc).edge(START, "Inc").loop("Inc", until=lambda s: s.n >= 3).compile()


def _tables(dsn: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        names = {r[0] for r in rows}
        version = None
        if "tensorsketch_schema_version" in names:
            version = conn.execute(
                f'SELECT component, version FROM "{schema}".tensorsketch_schema_version'
            ).fetchall()
    return {"names": names, "version": version}


async def test_schema_and_tables_are_created_on_first_use(pg_dsn: str, pg_schema: str) -> None:
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    assert _tables(pg_dsn, pg_schema)["names"] == set()
    out = await COUNTER.invoke({}, thread_id="t", backend=backend)
    assert out.n == 3
    found = _tables(pg_dsn, pg_schema)
    assert found["names"] == {
        "tensorsketch_schema_version",
        "tensorsketch_checkpoints",
        "tensorsketch_effects",
        "tensorsketch_events",
        "tensorsketch_leases",
    }
    assert found["version"] == [("durable", 1)]
    await backend.aclose()


async def test_concurrent_first_use_from_many_backends(pg_dsn: str, pg_schema: str) -> None:
    """Several processes creating the tables at once must not collide (advisory lock)."""
    backends = [PostgresBackend(pg_dsn, schema=pg_schema) for _ in range(4)]
    results = await asyncio.gather(
        *(b.acquire_lease(f"t{i}", "me", 30) for i, b in enumerate(backends))
    )
    assert results == [True] * 4
    for b in backends:
        await b.aclose()


async def test_newer_table_layout_is_refused(pg_dsn: str, pg_schema: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tensorsketch_schema_version '
            "(component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)"
        )
        conn.execute(
            f"INSERT INTO \"{pg_schema}\".tensorsketch_schema_version VALUES ('durable', 5)"
        )
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    with pytest.raises(CheckpointDecodeError, match="layout version 5"):
        await COUNTER.invoke({}, thread_id="t", backend=backend)
    await backend.aclose()


async def test_connection_inside_a_transaction_is_refused(pg_dsn: str, pg_schema: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_dsn)
    try:
        await conn.execute("SELECT 1")  # opens a transaction the caller never closed
        backend = PostgresBackend(connection=conn, schema=pg_schema)
        with pytest.raises(RuntimeError, match="inside a transaction"):
            await backend.latest_checkpoint("t")
    finally:
        await conn.close()


def test_arguments_are_checked(pg_dsn: str) -> None:
    with pytest.raises(ValueError, match="exactly one of `dsn`"):
        PostgresBackend()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(pg_dsn, open=False)
    with pytest.raises(ValueError, match="got dsn, pool"):
        PostgresBackend(pg_dsn, pool=pool)
    with pytest.raises(TypeError, match=r"psycopg\.AsyncConnection"):
        PostgresBackend(connection="postgresql://x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="schema"):
        PostgresBackend(pg_dsn, schema="")
    with pytest.raises(ValueError, match="lease_ttl"):
        PostgresBackend(pg_dsn, lease_ttl=-1)


async def test_selectable_by_name(pg_dsn: str, pg_schema: str) -> None:
    backend = create_backend("postgres", dsn=pg_dsn, schema=pg_schema, lease_ttl=5)
    assert isinstance(backend, PostgresBackend)
    assert backend.describe()["lease_ttl"] == 5.0
    assert (await COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3
    await backend.aclose()


def test_survives_a_change_of_event_loop(pg_dsn: str, pg_schema: str) -> None:
    """Scripts call asyncio.run more than once; the pool follows the live loop."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    first = asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend))
    second = asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend))
    assert (first.n, second.n) == (3, 3)
    state = COUNTER.get_state("a", backend)  # sync, no loop running: a private loop
    assert state is not None
    assert state.n == 3
    assert len(COUNTER.get_history("b", backend)) == 4


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tensorsketch import END, START, Graph, Node, Schema
    from tensorsketch.runtime.backends import PostgresBackend

    class S(Schema):
        n: int = 0

    class Hold(Node):
        class In(Schema):
            n: int
        class Out(Schema):
            n: int
        async def run(self, ctx, inp):
            print("holding", flush=True)
            while not Path(sys.argv[3]).exists():
                await asyncio.sleep(0.02)
            return self.Out(n=inp.n + 1)

    async def main():
        backend = PostgresBackend(sys.argv[1], schema=sys.argv[2])
        app = Graph(S).add(Hold).edge(START, "Hold").edge("Hold", END).compile()
        out = await app.invoke({"n": 1}, thread_id="shared", backend=backend)
        await backend.aclose()
        print("done", out.n, flush=True)

    asyncio.run(main())
    """
)


async def test_second_process_gets_thread_busy(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        pg_dsn,
        pg_schema,
        str(release),
        stdout=asyncio.subprocess.PIPE,
    )
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        assert holder.stdout is not None
        assert (await holder.stdout.readline()).strip() == b"holding"
        with pytest.raises(ThreadBusyError, match="'shared'"):
            await COUNTER.invoke(thread_id="shared", backend=backend)
        release.touch()
        out, _ = await asyncio.wait_for(holder.communicate(), timeout=60)
        assert out.strip().endswith(b"done 2")
        assert holder.returncode == 0
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        await backend.aclose()


def test_missing_driver_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the [postgres] extra were not installed
        from tensorsketch.registry import backends
        assert "postgres" in backends.names()
        try:
            from tensorsketch.runtime.backends import PostgresBackend
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'pip install "tensorsketch-backends[postgres]"' in out.stdout


def test_listing_backends_imports_no_driver() -> None:
    code = textwrap.dedent(
        """
        import sys
        import tensorsketch
        from tensorsketch.registry import backends
        print(backends.names())
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_pool", "redis")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    names, loaded = out.stdout.strip().splitlines()
    assert names == "['memory', 'postgres', 'redis', 'sqlite']"
    assert loaded == "[]"


def test_shared_connection_on_a_closed_loop_is_not_reused(pg_dsn: str, pg_schema: str) -> None:
    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(pg_dsn)

    conn = asyncio.run(connect())
    backend = PostgresBackend(connection=conn, schema=pg_schema)
    assert asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend)).n == 3
    assert asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend)).n == 3
    assert len(COUNTER.get_history("b", backend)) == 4
    asyncio.run(conn.close())


def test_forgetting_aclose_never_hangs_the_exit(pg_dsn: str, pg_schema: str) -> None:
    """``asyncio.run`` cancels every task at shutdown; an owned pool left open must not keep
    that shutdown waiting (it closes itself with its loop)."""
    code = textwrap.dedent(
        """
        import asyncio, sys
        from tensorsketch.runtime.backends import PostgresBackend

        backend = PostgresBackend(sys.argv[1], schema=sys.argv[2])
        for _ in range(8):  # a new loop each time, and never an aclose()
            asyncio.run(backend.acquire_lease("t", "me", 30))
        print("exited cleanly")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, pg_dsn, pg_schema],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "exited cleanly"
