"""The cost of one durable agent turn on PostgreSQL, beside LangGraph, DBOS and PydanticAI.

The workload (issue 49): a scripted model asks for the ``settle`` tool, the tool performs its side
effect (a per-run counter in the client process) and the framework journals it, the model
answers. ``RUNS`` runs (default 500), ``CONCURRENCY`` (32) at a time, each on a thread /
workflow of its own, state on PostgreSQL. Five implementations:

* ``ts-invoke`` — TensorSketch, ``agent.invoke(..., thread_id=..., backend=PostgresBackend)``;
* ``ts-runner`` — the same agent through ``AsyncRunner`` (run records): 32 callers, each
  ``submit`` then ``await_run``;
* ``langgraph`` — ``create_react_agent`` with ``AsyncPostgresSaver``, ``durability="sync"``
  (each checkpoint committed before the next step, as TensorSketch does);
* ``dbos`` — a DBOS workflow of three steps (model, tool, model);
* ``pydantic-ai`` — PydanticAI's agent over a ``FunctionModel`` with its ``DBOSDurability``
  capability, run inside a ``@DBOS.workflow`` (what its deprecated ``DBOSAgent`` wrapper did).

Each implementation runs in a fresh interpreter against a database of its own (created and
dropped here). Two passes per implementation:

1. **timed** — straight to PostgreSQL, after 20 warm-up runs: runs/s, the client's CPU
   (``time.process_time`` over the window, every thread of the process), and PostgreSQL's CPU
   — utime + stime from ``/proc/<pid>/stat`` of the server backends connected to that database
   (sampled through the window, so a connection closed mid-way still counts);
2. **counted** — the same workload (``min(RUNS, 100)`` runs) through a small wire-protocol
   proxy in this process, which counts per run: transactions (``ReadyForQuery`` going back to
   idle after work), statements (``Execute`` and simple ``Query`` messages, without
   ``BEGIN``/``COMMIT``/``ROLLBACK``/``SAVEPOINT``) and round trips (``Sync`` and ``Query``).

Every run's side effect must have run exactly once (and every run must have answered), or the
benchmark fails. Ratios are printed against ``ts-invoke``. Usage::

    python benchmarks/bench_durable_runs.py                  # all five, 500 runs
    python benchmarks/bench_durable_runs.py --runs 100       # fewer runs
    python benchmarks/bench_durable_runs.py --only ts-invoke ts-runner
    TS_BENCH_QUICK=1 python benchmarks/bench_durable_runs.py # 100 runs

Run it in the benchmarks' environment with the peers installed (``langgraph-checkpoint-postgres``,
``dbos``, ``pydantic-ai-slim[dbos]``: benchmarks/requirements.txt). PostgreSQL at
``TS_TEST_POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``), local (its
processes' CPU is read from ``/proc``).
"""

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

IMPLS = ("ts-invoke", "ts-runner", "langgraph", "dbos", "pydantic-ai")
LABELS = {
    "ts-invoke": "TensorSketch, agent.invoke(thread_id=..., backend=pg)",
    "ts-runner": "TensorSketch, through AsyncRunner (run records)",
    "langgraph": "LangGraph create_react_agent + AsyncPostgresSaver",
    "dbos": "DBOS, three steps in a workflow",
    "pydantic-ai": "PydanticAI with its DBOS durable agent",
}
PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
CONCURRENCY = 32
WARMUP = 20
POOL = 10  # connections each implementation may hold
ANSWER = "settled"


# -- the workload, per implementation (run inside the worker process) ----------------------------

#: thread / workflow id -> times the side effect ran.
EFFECTS: dict[str, int] = {}


def _effect(key: str) -> str:
    EFFECTS[key] = EFFECTS.get(key, 0) + 1
    return f"order of {key} settled"


Run = Callable[[str], Awaitable[str]]


async def _ts(dsn: str, runner: bool) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from tensorsketch import ChatProvider, Completion, Context, Usage, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    class Scripted(ChatProvider):
        model = "scripted"
        provider_name = "scripted"

        async def complete(self, messages: Any, **_: Any) -> Completion:
            if any(m.role == "tool" for m in messages):
                message = assistant(ANSWER)
            else:
                message = assistant(tool_calls=[ToolCall(id="c1", name="settle", args={})])
            return Completion(message=message, model="scripted", usage=Usage())

    @tool
    async def settle(ctx: Context) -> str:
        """Settle the order: the run's one side effect."""
        return _effect(str(ctx.thread_id))

    agent = create_agent(Scripted(), tools=[settle])
    backend = PostgresBackend(dsn, pool_kwargs={"min_size": 1, "max_size": POOL})
    if not runner:

        async def invoke(key: str) -> str:
            out = await agent.invoke({"query": "settle"}, thread_id=key, backend=backend)
            return str(out.output)

        return invoke, backend.aclose

    from tensorsketch.runs import AsyncRunner

    tasks = AsyncRunner(agent, backend=backend, concurrency=CONCURRENCY)
    await tasks.start()

    async def submit(key: str) -> str:
        record = await tasks.submit({"query": "settle"}, thread_id=key)
        done = await tasks.await_run(record.run_id)
        if done.status != "succeeded":
            msg = f"run {record.run_id} ended {done.status}: {done.error}"
            raise AssertionError(msg)
        return str(done.output["output"])

    async def close() -> None:
        await tasks.aclose()
        await backend.aclose()

    return submit, close


async def _langgraph(dsn: str) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.prebuilt import create_react_agent
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **_: Any) -> Any:
            return self

        def _reply(self, messages: Any) -> ChatResult:
            if any(m.type == "tool" for m in messages):
                message = AIMessage(content=ANSWER)
            else:
                call = {"id": "c1", "name": "settle", "args": {}}
                message = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])

        def _generate(self, messages: Any, stop: Any = None, **_: Any) -> ChatResult:
            return self._reply(messages)

        async def _agenerate(self, messages: Any, stop: Any = None, **_: Any) -> ChatResult:
            return self._reply(messages)

    @tool
    async def settle(config: RunnableConfig) -> str:
        """Settle the order: the run's one side effect."""
        return _effect(config["configurable"]["thread_id"])

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=POOL,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open()
    saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    await saver.setup()
    agent = create_react_agent(Scripted(), [settle], checkpointer=saver)

    async def invoke(key: str) -> str:
        config: Any = {"configurable": {"thread_id": key}}
        out = await agent.ainvoke({"messages": [("user", "settle")]}, config, durability="sync")
        return str(out["messages"][-1].content)

    return invoke, pool.close


def _dbos_config(dsn: str, name: str) -> Any:
    return {
        "name": name,
        "system_database_url": dsn.replace("postgresql://", "postgresql+psycopg://", 1),
        "sys_db_pool_size": POOL,
        "log_level": "WARNING",
    }


async def _dbos(dsn: str) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from dbos import DBOS, SetWorkflowID

    DBOS(config=_dbos_config(dsn, "bench-dbos"))

    @DBOS.step()
    async def model(seen_tool: bool) -> dict[str, Any]:
        if seen_tool:
            return {"content": ANSWER}
        return {"tool_calls": [{"id": "c1", "name": "settle", "args": {}}]}

    @DBOS.step()
    async def settle() -> str:
        return _effect(str(DBOS.workflow_id))

    @DBOS.workflow()
    async def turn(query: str) -> str:
        first = await model(False)
        assert first["tool_calls"]
        await settle()
        second = await model(True)
        return str(second["content"])

    await asyncio.to_thread(DBOS.launch)

    async def invoke(key: str) -> str:
        with SetWorkflowID(key):
            return await turn("settle")

    async def close() -> None:
        await asyncio.to_thread(DBOS.destroy)

    return invoke, close


async def _pydantic_ai(dsn: str) -> tuple[Run, Callable[[], Awaitable[None]]]:
    from dbos import DBOS, SetWorkflowID
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.durable_exec.dbos import DBOSDurability
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    DBOS(config=_dbos_config(dsn, "bench-pydantic-ai"))

    def scripted(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen_tool = any(
            isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", ())
        )
        if seen_tool:
            return ModelResponse(parts=[TextPart(ANSWER)])
        return ModelResponse(parts=[ToolCallPart("settle", {}, tool_call_id="c1")])

    agent = Agent(
        FunctionModel(scripted), deps_type=str, name="bench", capabilities=[DBOSDurability()]
    )

    @agent.tool
    async def settle(ctx: RunContext[str]) -> str:
        """Settle the order: the run's one side effect."""
        return _effect(ctx.deps)

    @DBOS.workflow()
    async def turn(key: str) -> str:
        result = await agent.run("settle", deps=key)
        return str(result.output)

    await asyncio.to_thread(DBOS.launch)

    async def invoke(key: str) -> str:
        with SetWorkflowID(key):
            return await turn(key)

    async def close() -> None:
        await asyncio.to_thread(DBOS.destroy)

    return invoke, close


BUILDERS: dict[str, Callable[[str], Awaitable[tuple[Run, Callable[[], Awaitable[None]]]]]] = {
    "ts-invoke": lambda dsn: _ts(dsn, runner=False),
    "ts-runner": lambda dsn: _ts(dsn, runner=True),
    "langgraph": _langgraph,
    "dbos": _dbos,
    "pydantic-ai": _pydantic_ai,
}


async def _drive(run: Run, keys: list[str]) -> None:
    """Run every key, ``CONCURRENCY`` callers taking the next key as they finish one."""
    queue = list(reversed(keys))

    async def caller() -> None:
        while queue:
            key = queue.pop()
            answer = await run(key)
            if answer != ANSWER:
                msg = f"run {key} answered {answer!r}, not {ANSWER!r}"
                raise AssertionError(msg)

    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))


async def _worker(impl: str, dsn: str, runs: int, warmup: int) -> None:
    """One implementation, in this fresh interpreter: set up, warm up, say ``ready``, wait for
    ``go`` on stdin, run, report, wait for ``close`` and tear down."""
    run, close = await BUILDERS[impl](dsn)
    tag = uuid.uuid4().hex[:6]
    try:
        await _drive(run, [f"w{tag}-{i}" for i in range(warmup)])
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        keys = [f"r{tag}-{i}" for i in range(runs)]
        cpu = time.process_time()
        started = time.perf_counter()
        await _drive(run, keys)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        bad = {k: n for k, n in EFFECTS.items() if n != 1}
        missing = [k for k in keys if k not in EFFECTS]
        report = {"wall": wall, "cpu": cpu, "bad": len(bad), "missing": len(missing)}
        print("done " + json.dumps(report), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    finally:
        await close()


# -- PostgreSQL: databases, server CPU -----------------------------------------------------------


def _with_db(dsn: str, database: str, **query: str) -> str:
    parts = urlsplit(dsn)
    extra = "&".join(f"{k}={v}" for k, v in query.items())
    q = "&".join(x for x in (parts.query, extra) if x)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, q, parts.fragment))


def _admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(_with_db(PG_DSN, "postgres"), autocommit=True) as conn:
        conn.execute(statement)


def _backend_pids(database: str) -> list[int]:
    import psycopg

    with psycopg.connect(_with_db(PG_DSN, "postgres"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime


class ServerCpu:
    """CPU seconds the database's server backends spend between ``start`` and ``stop``."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def sample(self, *, starting: bool = False) -> None:
        for pid in _backend_pids(self.database):
            ticks = _cpu_ticks(pid)
            if ticks is None:
                continue
            if pid not in self.first:
                self.first[pid] = ticks if starting else 0
            self.last[pid] = ticks

    def seconds(self) -> float:
        total = sum(self.last[p] - self.first[p] for p in self.last)
        return total / os.sysconf("SC_CLK_TCK")


# -- the counting proxy ---------------------------------------------------------------------------

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "START TRANSACTION", "END")


class Counts:
    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self.round_trips = 0
        self.on = False
        #: With ``--trace``: what was sent, in order ("> SQL", "| sync", "= commit").
        self.trace: list[str] | None = None

    def note(self, line: str) -> None:
        if self.trace is not None:
            self.trace.append(line)

    def reset(self) -> None:
        self.statements = self.transactions = self.round_trips = 0


class _Conn:
    """One proxied connection: statements sent since the last ReadyForQuery, the last
    transaction status, one-byte answers (SSL/GSS refusals) still to pass through."""

    def __init__(self) -> None:
        self.pending = 0
        self.status = b"I"
        self.single = 0


class CountingProxy:
    """A PostgreSQL wire-protocol proxy that counts what its clients send: statements
    (``Execute``/``Query``), round trips (``Sync``/``Query``) and committed transactions (a
    ``ReadyForQuery`` back to idle after statements ran). Needs ``sslmode=disable``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.counts = Counts()
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        conn = _Conn()
        counts = self.counts

        async def frontend() -> None:
            statements: dict[bytes, bool] = {}  # prepared name -> is transaction control
            portals: dict[bytes, bool] = {}
            texts: dict[bytes, str] = {}
            bound: dict[bytes, str] = {}
            # Startup: untyped messages until the StartupMessage (SSL/GSS requests first).
            while True:
                head = await reader.readexactly(8)
                length, code = struct.unpack("!ii", head)
                body = await reader.readexactly(length - 8)
                up_writer.write(head + body)
                if code in (80877103, 80877104):  # SSLRequest / GSSENCRequest: one-byte 'N'
                    conn.single += 1
                    continue
                break
            while True:
                kind = await reader.readexactly(1)
                (length,) = struct.unpack("!i", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                up_writer.write(kind + struct.pack("!i", length) + body)
                if counts.on:
                    if kind == b"Q":
                        counts.round_trips += 1
                        text = body.rstrip(b"\0").decode(errors="replace").strip().upper()
                        if not text.startswith(_CONTROL):
                            counts.statements += 1
                        conn.pending += 1
                        counts.note(f"Q {_short(text)}")
                    elif kind == b"P":
                        name, _, rest = body.partition(b"\0")
                        text = rest.split(b"\0", 1)[0].decode(errors="replace").strip().upper()
                        statements[name] = text.startswith(_CONTROL)
                        texts[name] = text
                    elif kind == b"B":
                        portal, _, rest = body.partition(b"\0")
                        name = rest.split(b"\0", 1)[0]
                        portals[portal] = statements.get(name, False)
                        bound[portal] = texts.get(name, "?")
                    elif kind == b"E":
                        portal = body.split(b"\0", 1)[0]
                        if not portals.get(portal, False):
                            counts.statements += 1
                        conn.pending += 1
                        counts.note(f"E {_short(bound.get(portal, '?'))}")
                    elif kind == b"S":
                        counts.round_trips += 1
                        counts.note("S (sync: one round trip)")
                elif kind == b"P":
                    name, _, rest = body.partition(b"\0")
                    text = rest.split(b"\0", 1)[0].decode(errors="replace").strip().upper()
                    statements[name] = text.startswith(_CONTROL)
                    texts[name] = text
                if kind == b"X":
                    break
                await up_writer.drain()
            up_writer.close()

        async def backend() -> None:
            while True:
                if conn.single:
                    writer.write(await up_reader.readexactly(1))
                    conn.single -= 1
                    continue
                try:
                    kind = await up_reader.readexactly(1)
                except asyncio.IncompleteReadError:
                    break
                (length,) = struct.unpack("!i", await up_reader.readexactly(4))
                body = await up_reader.readexactly(length - 4)
                writer.write(kind + struct.pack("!i", length) + body)
                if kind == b"Z":
                    status = body[:1]
                    if counts.on and status == b"I" and (conn.status != b"I" or conn.pending):
                        counts.transactions += 1
                        counts.note("= committed")
                    conn.status, conn.pending = status, 0
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(frontend(), backend())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()


def _short(text: str) -> str:
    return " ".join(text.split())[:110]


# -- the parent: one pass of one implementation ----------------------------------------------------


def _spawn(impl: str, dsn: str, runs: int, warmup: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", impl, dsn, str(runs), str(warmup)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _expect(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            msg = f"the worker exited ({proc.wait()}) before saying {word!r}"
            raise SystemExit(msg)
        if line.startswith(word):
            return line[len(word) :].strip()


def _say(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def _finish(proc: subprocess.Popen[str], report: dict[str, Any], impl: str, runs: int) -> None:
    _say(proc, "close")
    if proc.wait(120) != 0:
        msg = f"{impl}: the worker failed (exit {proc.returncode})"
        raise SystemExit(msg)
    if report["bad"] or report["missing"]:
        msg = (
            f"{impl}: side effects not run exactly once: {report['bad']} ran more than once, "
            f"{report['missing']} of {runs} never ran"
        )
        raise SystemExit(msg)


def timed(impl: str, runs: int) -> dict[str, float]:
    database = f"ts_bench_dr_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{database}"')
    try:
        proc = _spawn(impl, _with_db(PG_DSN, database), runs, WARMUP)
        try:
            _expect(proc, "ready")
            server = ServerCpu(database)
            server.sample(starting=True)
            _say(proc, "go")
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            line = ""
            while True:  # sample the backends while the worker runs
                time.sleep(0.25)
                server.sample()
                chunk = proc.stdout.readline()
                if chunk:
                    line = chunk
                    break
                if proc.poll() is not None:
                    break
            os.set_blocking(proc.stdout.fileno(), True)
            while line and not line.startswith("done"):
                line = proc.stdout.readline()
            if not line:
                msg = f"{impl}: the worker exited ({proc.wait()}) before reporting"
                raise SystemExit(msg)
            server.sample()
            report = json.loads(line[len("done") :])
            _finish(proc, report, impl, runs)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    return {
        "rate": runs / report["wall"],
        "cpu": 1000 * report["cpu"] / runs,
        "server": 1000 * server.seconds() / runs,
    }


async def _counted_async(
    impl: str, runs: int, database: str, trace: bool = False
) -> dict[str, float]:
    host = urlsplit(PG_DSN)
    proxy = CountingProxy((host.hostname or "127.0.0.1", host.port or 5432))
    if trace:
        proxy.counts.trace = []
    await proxy.start()
    netloc = f"{host.username or 'postgres'}@127.0.0.1:{proxy.port}"
    dsn = urlunsplit(("postgresql", netloc, "/" + database, "sslmode=disable", ""))
    dsn += "&gssencmode=disable"
    proc = _spawn(impl, dsn, runs, 5)
    try:
        await asyncio.to_thread(_expect, proc, "ready")
        proxy.counts.on = True
        _say(proc, "go")
        line = await asyncio.to_thread(_expect, proc, "done")
        proxy.counts.on = False
        report = json.loads(line)
        await asyncio.to_thread(_finish, proc, report, impl, runs)
    finally:
        if proc.poll() is None:
            proc.kill()
        await proxy.close()
    c = proxy.counts
    if c.trace is not None:
        print(f"\n## What one run of {impl} sends (E: execute, Q: simple query, S: sync)\n")
        print("\n".join(c.trace))
    return {
        "transactions": c.transactions / runs,
        "statements": c.statements / runs,
        "round_trips": c.round_trips / runs,
    }


def counted(impl: str, runs: int, trace: bool = False) -> dict[str, float]:
    database = f"ts_bench_dr_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{database}"')
    try:
        return asyncio.run(_counted_async(impl, runs, database, trace))
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        impl, dsn, runs, warmup = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        asyncio.run(_worker(impl, dsn, runs, warmup))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100 if QUICK else 500)
    parser.add_argument("--only", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--quick", action="store_true", help="100 runs")
    parser.add_argument(
        "--trace", choices=IMPLS, help="print every statement one run of IMPL sends, and exit"
    )
    args = parser.parse_args()
    if args.trace:
        print(json.dumps(counted(args.trace, 1, trace=True)))
        return
    runs = 100 if args.quick else args.runs
    if runs < CONCURRENCY:
        parser.error(f"--runs must be at least {CONCURRENCY} (the concurrency)")
    results: dict[str, dict[str, float]] = {}
    for impl in args.only:
        results[impl] = timed(impl, runs) | counted(impl, min(runs, 100))
        print(f"  {impl}: {json.dumps({k: round(v, 2) for k, v in results[impl].items()})}")
    _table(results, runs)


def _table(results: dict[str, dict[str, float]], runs: int) -> None:
    cores = os.cpu_count() or 1
    print(
        f"\n## One durable agent turn on PostgreSQL: {runs} runs, {CONCURRENCY} at a time "
        f"({cores} cores)\n"
    )
    head = (
        "| implementation | runs/s | client CPU ms/run | PG CPU ms/run | CPU ms/run (both) "
        "| transactions/run | statements/run | round trips/run |"
    )
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for impl, r in results.items():
        print(
            f"| {LABELS[impl]} | {r['rate']:.0f} | {r['cpu']:.2f} | {r['server']:.2f} "
            f"| {r['cpu'] + r['server']:.2f} | {r['transactions']:.1f} | {r['statements']:.1f} "
            f"| {r['round_trips']:.1f} |"
        )
    base = results.get("ts-invoke")
    if base is None:
        return
    print("\nRatios to TensorSketch's direct invoke (from this run):\n")
    print("| implementation | CPU (both) | client CPU | transactions | statements |")
    print("|---|---:|---:|---:|---:|")
    for impl, r in results.items():
        both = (r["cpu"] + r["server"]) / (base["cpu"] + base["server"])
        print(
            f"| {LABELS[impl]} | {both:.2f}x | {r['cpu'] / base['cpu']:.2f}x "
            f"| {r['transactions'] / base['transactions']:.2f}x "
            f"| {r['statements'] / base['statements']:.2f}x |"
        )


if __name__ == "__main__":
    main()
