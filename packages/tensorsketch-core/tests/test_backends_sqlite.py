"""``SqliteBackend`` specifics: the file format, durability settings, arguments, and the
behaviour across processes (the shared contract itself is in test_durability_conformance)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest

from tensorsketch import START, Context, Graph, Node, Schema
from tensorsketch.durable import FORMAT_VERSION
from tensorsketch.errors import BackendUnavailableError, CheckpointDecodeError, ThreadBusyError
from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.sql import SCHEMA_VERSION, Query
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serializers import MSGPACK_MAGIC, JsonSerializer, MsgpackSerializer

COMMITTED: list[int] = []


class Count(Schema):
    n: int = 0
    path: str = ""


class Step(Node):
    class In(Schema):
        n: int
        path: str

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        # Another connection (as another process would) sees every earlier checkpoint.
        with sqlite3.connect(inp.path) as conn:
            (count,) = conn.execute("SELECT COUNT(*) FROM tensorsketch_checkpoints").fetchone()
        COMMITTED.append(count)
        return self.Out(n=inp.n + 1)


COUNTER = (
    Graph(Count).add(Step).edge(START, "Step").loop("Step", until=lambda s: s.n >= 3).compile()
)


@pytest.mark.parametrize("threaded", [True, False])
async def test_each_checkpoint_is_committed_before_the_next_step(
    tmp_path: Path, threaded: bool
) -> None:
    path = tmp_path / "runs.db"
    backend = SqliteBackend(path, threaded=threaded)
    COMMITTED.clear()
    out = await COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend)
    assert out.n == 3
    assert COMMITTED == [1, 2, 3]  # input checkpoint, then one per finished step
    await backend.aclose()


class CountingSqlite(SqliteBackend):
    """Records every unit of work: its statements' verbs, durability and thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.units: list[tuple[tuple[str, ...], bool, int]] = []

    def _submit_sync(self, queries: Any, transaction: bool, durable: bool) -> list[Any]:
        import threading

        verbs = tuple(q.sql.split()[0] for q in queries)
        self.units.append((verbs, durable, threading.get_ident()))
        return super()._submit_sync(queries, transaction, durable)


@pytest.mark.parametrize("threaded", [True, False])
async def test_one_unit_of_work_to_open_and_one_per_superstep(
    tmp_path: Path, threaded: bool
) -> None:
    import threading

    path = tmp_path / "runs.db"
    backend = CountingSqlite(path, threaded=threaded)
    await backend.list_checkpoints("warm-up")  # creates the tables
    backend.units.clear()
    events = [e async for e in COUNTER.stream({"path": str(path)}, thread_id="t", backend=backend)]
    verbs = [u[0] for u in backend.units]
    # Open: lease, input checkpoint (new thread), checkpoints and last event seq, one unit that
    # need not wait for the disk. Then one durable unit per superstep: its events and its
    # checkpoint; the last one also releases the lease. Nothing after it.
    assert verbs == [
        ("INSERT", "INSERT", "WITH", "SELECT"),
        # Each commit is fenced: the first statement locks our lease row (or fails the unit).
        ("UPDATE", "INSERT", "INSERT"),
        ("UPDATE", "INSERT", "INSERT"),
        ("UPDATE", "INSERT", "INSERT", "DELETE"),
    ]
    assert [u[1] for u in backend.units] == [False, True, True, True]
    threads = {u[2] for u in backend.units}
    if threaded:
        assert threading.get_ident() not in threads
    else:
        assert threads == {threading.get_ident()}
    stored = [e async for e in COUNTER.replay("t", backend)]
    assert [e.seq for e in stored] == [e.seq for e in events]  # run_end included
    assert await backend.acquire_lease("t", "someone else", 30)
    await backend.release_lease("t", "someone else")
    # A resume opens the same way (the fresh input it offers is not saved on a thread that
    # has checkpoints), finds nothing left to run on a finished thread, and releases.
    before = await backend.list_checkpoints("t")
    backend.units.clear()
    await COUNTER.invoke(None, thread_id="t", backend=backend)
    assert [u[0] for u in backend.units] == [("INSERT", "INSERT", "WITH", "SELECT"), ("DELETE",)]
    assert await backend.list_checkpoints("t") == before
    await backend.aclose()


def test_sync_helpers_run_their_statements_on_the_calling_thread(tmp_path: Path) -> None:
    """A sync helper's loop is private (nothing else waits on it), so even a threaded backend
    runs the read there instead of handing it to its worker thread and back; async reads on
    the same backend still use the worker."""
    import threading

    path = tmp_path / "runs.db"
    backend = CountingSqlite(path)  # threaded, the default
    out = asyncio.run(COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend))
    worker_threads = {u[2] for u in backend.units}
    assert threading.get_ident() not in worker_threads

    backend.units.clear()
    state = COUNTER.get_state("t", backend)
    assert state == out
    assert [len(COUNTER.get_history("t", backend))] == [4]
    assert {u[2] for u in backend.units} == {threading.get_ident()}

    async def from_a_running_loop() -> None:
        # Inside a running loop (a notebook cell) get_state reads on the calling thread,
        # which waits for it either way; get_history takes a thread of its own.
        backend.units.clear()
        assert COUNTER.get_state("t", backend) == out
        (unit,) = backend.units
        assert unit[2] == threading.get_ident()
        backend.units.clear()
        assert len(COUNTER.get_history("t", backend)) == 4
        assert {u[2] for u in backend.units}.isdisjoint(worker_threads | {threading.get_ident()})
        backend.units.clear()
        assert await COUNTER.aget_state("t", backend) == out
        assert {u[2] for u in backend.units} <= worker_threads

    asyncio.run(from_a_running_loop())
    asyncio.run(backend.aclose())


class FlakySqlite(SqliteBackend):
    """Fails its next unit of work as a dropped connection would."""

    fail_next = False

    def _submit_sync(self, queries: Any, transaction: bool, durable: bool) -> list[Any]:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk I/O error (simulated)")
        return super()._submit_sync(queries, transaction, durable)


class AsyncOnlySqlite(SqliteBackend):
    """A subclass that runs its statements its own way (as PostgresBackend does)."""

    async def submit(self, queries: Any, *, transaction: bool = False, durable: bool = True) -> Any:
        return self._submit_sync(queries, transaction, durable)


def test_sync_get_state_reads_without_an_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the backend is set up, ``get_state`` from plain code is the query and the fold:
    no loop is created and no thread started. Before that, and wherever the blocking read
    cannot answer, it takes the async path and returns the same state."""
    import threading

    path = tmp_path / "runs.db"
    backend = FlakySqlite(path)
    out = asyncio.run(COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend))
    fresh = SqliteBackend(path)
    assert fresh.read_chain_blocking("t") is None  # not set up yet: the async path sets it up
    assert COUNTER.get_state("t", fresh) == out
    assert fresh.read_chain_blocking("t") is not None

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the blocking read created a loop or a thread")

    with monkeypatch.context() as patched:
        patched.setattr(asyncio, "new_event_loop", refuse)
        patched.setattr(threading.Thread, "start", refuse)
        for where in (backend, fresh):
            state = COUNTER.get_state("t", where)
            assert state == out and state is not None
            assert state.n == 3
        assert COUNTER.get_state("no-such-thread", backend) is None

    backend.fail_next = True  # unreachable on the blocking read: the async path retries
    assert COUNTER.get_state("t", backend) == out
    assert not backend.fail_next

    other = AsyncOnlySqlite(path)
    asyncio.run(other.list_threads())  # set up
    assert other.read_chain_blocking("t") is None
    assert COUNTER.get_state("t", other) == out
    for b in (backend, fresh, other):
        asyncio.run(b.aclose())
    assert fresh.read_chain_blocking("t") is None  # closed: the async path reopens


def test_sync_get_state_falls_back_when_a_base_hint_is_lost(tmp_path: Path) -> None:
    """A row whose ``base_id`` hint is gone makes the chain query stop short; the blocking
    read then hands over to the async read, which folds from the whole thread."""
    path = tmp_path / "runs.db"
    backend = SqliteBackend(path, threaded=False)
    out = asyncio.run(COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend))
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE tensorsketch_checkpoints SET base_id = NULL WHERE position = "
            "(SELECT MAX(position) FROM tensorsketch_checkpoints)"
        )
    chain = backend.read_chain_blocking("t")
    assert chain is not None and len(chain) == 1  # the chain stops at the latest row
    assert COUNTER.get_state("t", backend) == out
    asyncio.run(backend.aclose())


def test_memory_backend_reads_without_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorsketch.runtime.backends import InMemoryBackend

    backend = InMemoryBackend()
    app = Graph(Count).add(Bump).edge(START, "Bump").loop("Bump", until=lambda s: s.n >= 2)
    out = asyncio.run(app.compile().invoke({}, thread_id="m", backend=backend))
    with monkeypatch.context() as patched:
        patched.setattr(asyncio, "new_event_loop", lambda: pytest.fail("created a loop"))
        assert app.compile().get_state("m", backend) == out


def test_a_subclass_that_reads_its_chain_its_own_way_is_awaited(tmp_path: Path) -> None:
    """A backend subclass overriding ``read_chain`` keeps its override on the sync path."""
    from tensorsketch.runtime.backends import InMemoryBackend
    from tensorsketch.runtime.backends.base import StoredCheckpoint

    reads: list[str] = []

    class Audited(InMemoryBackend):
        async def read_chain(
            self, thread_id: str, checkpoint_id: str | None = None
        ) -> list[StoredCheckpoint]:
            reads.append(thread_id)
            return await super().read_chain(thread_id, checkpoint_id)

    class AuditedSqlite(SqliteBackend):
        async def read_chain(
            self, thread_id: str, checkpoint_id: str | None = None
        ) -> list[StoredCheckpoint]:
            reads.append(thread_id)
            return await super().read_chain(thread_id, checkpoint_id)

    app = Graph(Count).add(Bump).edge(START, "Bump").loop("Bump", until=lambda s: s.n >= 2)
    for backend in (Audited(), AuditedSqlite(tmp_path / "audited.db")):
        out = asyncio.run(app.compile().invoke({}, thread_id="a", backend=backend))
        reads.clear()
        assert backend.read_chain_blocking("a") is None
        assert app.compile().get_state("a", backend) == out
        assert reads == ["a"]
        asyncio.run(backend.aclose())


class Bump(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(n=inp.n + 1)


async def test_file_uses_wal_and_the_chosen_sync_level(tmp_path: Path) -> None:
    levels: list[tuple[Literal["FULL", "NORMAL"], int]] = [("FULL", 2), ("NORMAL", 1)]
    for level, code in levels:
        path = tmp_path / f"{level}.db"
        backend = SqliteBackend(path, synchronous=level)
        await COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert backend._connection.execute("PRAGMA synchronous").fetchone()[0] == code
        assert backend.describe()["synchronous"] == level
        await backend.aclose()


async def test_undo_journals_stay_in_memory(tmp_path: Path) -> None:
    """Statement and savepoint journals live in memory: a group commit's unit that outgrows
    SQLite's 64 KiB spill limit would otherwise write them to a temporary file, page by page."""
    backend = SqliteBackend(tmp_path / "runs.db")
    await COUNTER.invoke({"path": str(tmp_path / "runs.db")}, thread_id="t", backend=backend)
    assert backend._connection.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
    await backend.aclose()


async def test_relaxed_units_sync_at_normal_never_off(tmp_path: Path) -> None:
    """Lease and input writes skip the disk sync with NORMAL, which in WAL mode still syncs
    around WAL checkpoints (OFF would not, and a checkpoint run then could lose older data
    to a power cut). The chosen level is back in force right after."""
    seen: list[int] = []

    class Watching(SqliteBackend):
        def _submit_sync(self, queries: Any, transaction: bool, durable: bool) -> list[Any]:
            probe = Query("PRAGMA synchronous", fetch="one")
            results = super()._submit_sync([*queries, probe], transaction, durable)
            seen.append(results[-1][0])
            return results[:-1]

    backend = Watching(tmp_path / "runs.db", synchronous="FULL")
    await COUNTER.invoke({"path": str(tmp_path / "runs.db")}, thread_id="t", backend=backend)
    assert seen[1] == 1  # the open (lease + input checkpoint): NORMAL
    assert set(seen[2:]) == {2}  # every superstep's commit: FULL
    assert backend._connection.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert SqliteBackend(synchronous="NORMAL").relaxed_statements() is None
    assert SqliteBackend(synchronous="OFF").relaxed_statements() is None
    await backend.aclose()


async def test_tables_and_layout_version_are_created_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    backend = SqliteBackend(path, table_prefix="app_")
    assert not path.exists()  # nothing happens before the first use
    await backend.latest_checkpoint("t")
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = conn.execute("SELECT version FROM app_schema_version").fetchall()
    assert names == {
        "app_schema_version",
        "app_checkpoints",
        "app_effects",
        "app_events",
        "app_leases",
        "app_blobs",
    }
    assert version == [(SCHEMA_VERSION,)]
    await backend.aclose()


async def test_newer_table_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE tensorsketch_schema_version (component TEXT PRIMARY KEY, version INT)"
        )
        conn.execute("INSERT INTO tensorsketch_schema_version VALUES ('durable', 7)")
    backend = SqliteBackend(path)
    with pytest.raises(CheckpointDecodeError, match="layout version 7"):
        await backend.latest_checkpoint("t")
    await backend.aclose()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dsn": "sqlite://runs.db"}, ValueError, "three slashes"),
        ({"dsn": ":memory:", "synchronous": "SOMETIMES"}, ValueError, "synchronous"),
        ({"dsn": ":memory:", "lease_ttl": 0}, ValueError, "lease_ttl"),
        ({"dsn": ":memory:", "table_prefix": "x; DROP"}, ValueError, "table_prefix"),
        ({"dsn": 42}, TypeError, "SqliteBackend"),
    ],
)
def test_bad_arguments_say_what_to_fix(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        SqliteBackend(**kwargs)


async def test_dsn_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert SqliteBackend("sqlite:///rel.db").path == "rel.db"
    assert SqliteBackend(f"sqlite:///{tmp_path}/abs.db").path == f"{tmp_path}/abs.db"
    assert SqliteBackend().path == ":memory:"
    backend = create_backend("sqlite", dsn="sqlite:///named.db")
    assert isinstance(backend, SqliteBackend)
    await COUNTER.invoke({"path": str(tmp_path / "named.db")}, thread_id="t", backend=backend)
    assert (tmp_path / "named.db").exists()
    await backend.aclose()


async def test_unopenable_file_is_backend_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir" / "runs.db"
    backend = SqliteBackend(path)
    with pytest.raises(BackendUnavailableError, match="sqlite backend unavailable") as info:
        await COUNTER.invoke({"path": "x"}, thread_id="t", backend=backend)
    message = str(info.value)
    # A file, not a server: name it and what to check, not "the database is running".
    assert repr(str(path)) in message
    assert "its directory exists" in message
    assert "running" not in message
    assert ".." not in message


async def test_a_directory_given_as_the_file_is_named(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path)
    with pytest.raises(BackendUnavailableError, match="is a directory: pass the path of a file"):
        await COUNTER.invoke({"path": "x"}, thread_id="t", backend=backend)


async def test_usable_from_several_event_loops(tmp_path: Path) -> None:
    path = tmp_path / "loops.db"
    backend = SqliteBackend(path)
    await COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend)

    def other_loop() -> Any:
        return asyncio.run(COUNTER.aget_state("t", backend))

    state = await asyncio.to_thread(other_loop)
    assert state is not None
    assert state.n == 3
    await backend.aclose()


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from tensorsketch import END, START, Graph, Node, Schema
    from tensorsketch.runtime.backends import SqliteBackend

    class S(Schema):
        n: int = 0

    class Hold(Node):
        class In(Schema):
            n: int
        class Out(Schema):
            n: int
        async def run(self, ctx, inp):
            print("holding", flush=True)
            while not Path(sys.argv[2]).exists():
                await asyncio.sleep(0.02)
            return self.Out(n=inp.n + 1)

    app = Graph(S).add(Hold).edge(START, "Hold").edge("Hold", END).compile()
    out = asyncio.run(app.invoke({"n": 1}, thread_id="shared", backend=SqliteBackend(sys.argv[1])))
    print("done", out.n, flush=True)
    """
)


async def test_second_process_gets_thread_busy(tmp_path: Path) -> None:
    """Two processes on one thread: the one that comes second is refused, by name."""
    path, release = tmp_path / "shared.db", tmp_path / "release"
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, str(path), str(release), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        assert (await holder.stdout.readline()).strip() == b"holding"
        backend = SqliteBackend(path)
        with pytest.raises(ThreadBusyError, match="'shared' is being run by another process"):
            await COUNTER.invoke(thread_id="shared", backend=backend)
        release.touch()
        out, _ = await asyncio.wait_for(holder.communicate(), timeout=60)
        assert out.strip() == b"done 2"
        assert holder.returncode == 0
        state = await COUNTER.aget_state("shared", backend)
        assert state is not None
        assert state.n == 2
        await backend.aclose()
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


def test_payloads_are_msgpack_by_default_and_json_when_asked(tmp_path: Path) -> None:
    decoded = {}
    for name, serializer in (("default", None), ("json", "json")):
        path = tmp_path / f"{name}.db"
        backend = SqliteBackend(path, serializer=serializer)
        asyncio.run(COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend))
        with sqlite3.connect(path) as conn:
            decoded[name] = [
                bytes(r[0]) for r in conn.execute("SELECT payload FROM tensorsketch_checkpoints")
            ]
    assert all(p[:1] == MSGPACK_MAGIC for p in decoded["default"])
    as_json = [json.loads(p) for p in decoded["json"]]  # readable with any JSON tool
    assert as_json[0]["base"] is True
    assert as_json[-1]["changes"]["n"] == ["set", 3]
    assert all(r["v"] == FORMAT_VERSION for r in as_json)
    # The same records either way: each serializer reads the other's.
    as_msgpack = [MsgpackSerializer().loads(p) for p in decoded["default"]]
    assert [r["changes"].get("n") for r in as_msgpack] == [r["changes"].get("n") for r in as_json]
    assert [JsonSerializer().loads(p)["v"] for p in decoded["default"]] == [r["v"] for r in as_json]


def _v1_store(path: Path, thread: str, steps: int) -> None:
    """A store exactly as 0.1.0 wrote it: layout 1 (no base_id) and version-1 payloads, a
    snapshot then one delta per step of the conformance chat graph."""
    rows = [
        {
            "v": 1,
            "base": True,
            "source": "input",
            "seq": 0,
            "plan": [["Chat", None]],
            "changes": {"messages": ["set", []], "turns": ["set", 0], "limit": ["set", steps]},
        }
    ]
    for n in range(steps):
        reply = {"role": "assistant", "content": f"reply {n}"}
        plan = [["Chat", None]] if n + 1 < steps else []
        rows.append(
            {
                "v": 1,
                "base": False,
                "source": "loop",
                "seq": 0,
                "plan": plan,
                "changes": {"messages": ["append", [reply]], "turns": ["set", n + 1]},
            }
        )
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE tensorsketch_schema_version "
            "(component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)"
        )
        conn.execute("INSERT INTO tensorsketch_schema_version VALUES ('durable', 1)")
        conn.execute(
            "CREATE TABLE tensorsketch_checkpoints (thread_id TEXT NOT NULL, position BIGINT "
            "NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT, step INTEGER NOT NULL, "
            "created_at REAL NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (thread_id, position), "
            "UNIQUE (thread_id, checkpoint_id))"
        )
        for n, payload in enumerate(rows):
            conn.execute(
                "INSERT INTO tensorsketch_checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    thread,
                    n + 1,
                    f"old-{n}",
                    f"old-{n - 1}" if n else None,
                    n,
                    1.0 + n,
                    json.dumps(payload).encode(),
                ),
            )


async def test_a_store_written_by_0_1_0_migrates_and_resumes(tmp_path: Path) -> None:
    from tensorsketch.testing.backend_conformance import CHAT_GRAPH

    path = tmp_path / "old.db"
    _v1_store(path, "t", 5)
    backend = SqliteBackend(path)
    state = await CHAT_GRAPH.aget_state("t", backend)
    assert state is not None and [m["content"] for m in state.messages] == [
        f"reply {n}" for n in range(5)
    ]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM tensorsketch_schema_version").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        bases = conn.execute("SELECT base_id, parent_id FROM tensorsketch_checkpoints").fetchall()
        assert all(base == parent for base, parent in bases)
    old = await CHAT_GRAPH.aget_history("t", backend)
    assert [len(c.values["messages"]) for c in old] == [0, 1, 2, 3, 4, 5]
    # Resuming an old thread continues it (its next checkpoint starts a new epoch).
    out = await CHAT_GRAPH.invoke({"limit": 8}, thread_id="t", backend=backend)
    assert [m["content"] for m in out.messages] == [f"reply {n}" for n in range(8)]
    history = await CHAT_GRAPH.aget_history("t", backend)
    assert [len(c.values["messages"]) for c in history] == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8]
    assert history[:6] == old
    assert (await CHAT_GRAPH.aget_state("t", backend)) == out
    await backend.aclose()


async def test_reopens_after_aclose(tmp_path: Path) -> None:
    """``aclose`` stops the worker thread and closes the file; a later call reopens both."""
    path = tmp_path / "reopen.db"
    backend = SqliteBackend(path)
    await COUNTER.invoke({"path": str(path)}, thread_id="t", backend=backend)
    await backend.aclose()
    assert backend._connection is None
    state = await COUNTER.aget_state("t", backend)
    assert state is not None
    assert state.n == 3
    await backend.aclose()


async def test_a_failed_statement_is_an_ordinary_error(tmp_path: Path) -> None:
    """Driver errors that are not about reaching the file propagate as they are."""
    backend = SqliteBackend(tmp_path / "x.db")
    await backend.latest_checkpoint("t")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await backend.submit([Query("SELECT * FROM missing_table", fetch="all")])
    assert await backend.latest_checkpoint("t") is None  # the worker is still serving
    await backend.aclose()


def test_a_driver_message_becomes_one_sentence_ended_once() -> None:
    """libpq's messages span lines and may end in a question; redis-py's end in a period."""
    backend = SqliteBackend(":memory:")
    asked = backend._unavailable("x", OSError("refused\n\tIs the server running?"))
    assert "refused Is the server running? Check" in str(asked)
    ended = backend._unavailable("x", OSError("unable to open database file."))
    assert "database file. Check" in str(ended)
