"""A driver run inside the private network: a ``Send`` fan-out in-process and on the cluster.

``python fanout_driver.py equal N`` runs an N-instance fan-out (every instance reads one
shared 1 MB state field) both ways and prints one JSON line: whether the final states are
equal (as dumps and as JSON text), the time of each, and how many batches ran on each node.

``python fanout_driver.py kill N DIR RETRIES`` runs a durable N-instance fan-out whose
instances each append one line to ``DIR/effects.log`` through ``ctx.step``; instance 150 (in
the second batch) SIGKILLs its own worker once, after its siblings' effects are done. With
``RETRIES`` 0 the run fails and the thread is invoked again. It prints the final state's
equality with an in-process run and the effect counts.

``python fanout_driver.py subgraph DIR`` runs a durable graph (SQLite in ``DIR``) that sends
each topic to a subgraph node whose child plans, fans out to its leads with ``Send`` and asks
for a decision on one topic: in-process, then on the cluster, resumed after the interrupt. It
prints the states' equality, the child threads, where each child node body ran and how often
each effect ran.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import ray

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    Send,
    SqliteBackend,
)
from tensorsketch.interrupts import interrupt, run_info
from tensorsketch.ray.executor import RayExecutor

BATCH = 100
KILLER = 150


class Fan(Schema):
    count: int = 0
    corpus: str = ""
    item: int = 0
    log: str = ""
    out: Annotated[list[int], Reducer(operator.add)] = []
    seen: Annotated[list[str], Reducer(operator.add)] = []


class Plan(Node):
    class In(Schema):
        count: int

    class Out(Schema):
        seen: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(seen=[f"planned {inp.count}"])


class Work(Node):
    class In(Schema):
        item: int
        corpus: str

    class Out(Schema):
        out: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(out=[inp.item * 3 + inp.corpus.count("x", inp.item % 97, 2000)])


class Charge(Node):
    class In(Schema):
        item: int
        log: str

    class Out(Schema):
        out: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        log = Path(inp.log)

        def charge() -> int:
            with (log / "effects.log").open("a") as fh:
                fh.write(f"{ctx.thread_id or 'in-process'} {inp.item}\n")
            return inp.item * 7

        value = await ctx.step("charge", charge)
        # Per thread: the in-process run of the same items must not mark the shipped ones
        # done (it did, and the kill then hit siblings whose effects were still in flight).
        done = log / "done" / (ctx.thread_id or "in-process")
        done.mkdir(parents=True, exist_ok=True)
        (done / str(inp.item)).touch()
        marker = log / "killed"
        on_a_worker = not os.environ.get("TS_RAY_NODE", "/driver").endswith("/driver")
        if inp.item == KILLER and on_a_worker and not marker.exists():
            # Wait until every sibling of this batch has journaled its effect (on the
            # ledger), so the kill hits a batch with finished effects, not one in flight.
            first = inp.item - inp.item % BATCH
            siblings = [done / str(i) for i in range(first, first + BATCH)]
            deadline = time.monotonic() + 60
            # Polling files: the siblings are tasks of this loop, but the test sees files.
            while not all(s.exists() for s in siblings) and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return self.Out(out=[value])


def fan(state: Fan) -> list[Send]:
    return [Send("Work", {"item": i}) for i in range(state.count)]


def charge(state: Fan) -> list[Send]:
    return [Send("Charge", {"item": i}) for i in range(state.count)]


def build(router: Any, worker: type[Node]) -> Graph[Fan]:
    return (
        Graph(Fan)
        .add(Plan)
        .add(worker)
        .edge(START, "Plan")
        .router("Plan", router)
        .edge(worker.__name__, END)
    )


async def equal(count: int) -> dict[str, Any]:
    corpus = ("lorem ipsum x " * 80_000)[:1_000_000]
    graph = build(fan, Work)
    local = graph.compile()
    executor = RayExecutor()
    warm = graph.compile(executor=executor)
    await warm.invoke({"count": 400, "corpus": corpus})  # start the workers
    executor.nodes.clear()
    started = time.perf_counter()
    here = await local.invoke({"count": count, "corpus": corpus})
    local_s = time.perf_counter() - started
    started = time.perf_counter()
    there = await warm.invoke({"count": count, "corpus": corpus})
    ray_s = time.perf_counter() - started
    return {
        "equal": here.model_dump() == there.model_dump(),
        "json_equal": here.model_dump_json() == there.model_dump_json(),
        "outs": len(there.out),
        "in_order": there.out[:3] == here.out[:3] and there.out[-1] == here.out[-1],
        "local_seconds": local_s,
        "ray_seconds": ray_s,
        "batches_per_node": sorted(executor.nodes.values()),
    }


async def kill(count: int, log: str, retries: int) -> dict[str, Any]:
    graph = build(charge, Charge)
    here = await graph.compile().invoke({"count": count, "log": log})
    executor = RayExecutor(batch_size=BATCH, max_retries=retries)
    backend = InMemoryBackend()
    shipped = graph.compile(executor=executor)
    failed = None
    try:
        there = await shipped.invoke(
            {"count": count, "log": log}, thread_id="kill", backend=backend
        )
    except Exception as exc:  # out of retries: the thread is resumed below
        failed = type(exc).__name__
        there = await shipped.invoke(thread_id="kill", backend=backend)
    lines = (Path(log) / "effects.log").read_text().split("\n")
    runs: dict[str, dict[int, int]] = {}
    for line in filter(None, lines):
        thread, item = line.split()
        counts = runs.setdefault(thread, {})
        counts[int(item)] = counts.get(int(item), 0) + 1
    journaled = await backend.lookup_effect("kill", f"1:Charge#{KILLER}:0:charge")
    return {
        "equal": here.model_dump() == there.model_dump(),
        "failed_first": failed,
        "runs": len(runs),
        "max_effects_per_item": max(max(c.values()) for c in runs.values()),
        "repeated": sorted(i for c in runs.values() for i, n in c.items() if n > 1)[:20],
        "items_per_run": sorted(len(c) for c in runs.values()),
        "killed_pid": (Path(log) / "killed").read_text(),
        "killer_journaled": journaled is not None
        and backend.serializer.loads(journaled) == [KILLER * 7],
    }


# -- a subgraph node sent to the cluster --------------------------------------------------


class Topics(Schema):
    topics: list[str] = []
    topic: str = ""
    log: str = ""
    found: Annotated[list[str], Reducer(operator.add)] = []


class Inquiry(Schema):
    topic: str
    log: str
    leads: list[str] = []
    found: Annotated[list[str], Reducer(operator.add)] = []


def _where(log: str, node: str) -> None:
    """Append where this node body ran (the process's cluster node) to ``log/where.log``."""
    with (Path(log) / "where.log").open("a") as fh:
        fh.write(f"{node} {os.environ.get('TS_RAY_NODE', 'none')}\n")


class Split(Node):
    class In(Schema):
        topics: list[str]

    async def run(self, ctx: Context, inp: In) -> None:
        return None


class Leads(Node):
    class In(Schema):
        topic: str
        log: str

    class Out(Schema):
        leads: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        _where(inp.log, "Leads")
        return self.Out(leads=[f"{inp.topic}-{k}" for k in range(3)])


class Dig(Node):
    class In(Schema):
        leads: list[str]
        log: str

    class Out(Schema):
        found: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        _where(inp.log, "Dig")
        lead = inp.leads[0]

        def dig() -> str:
            with (Path(inp.log) / "effects.log").open("a") as fh:
                fh.write(f"{ctx.thread_id or 'in-process'} {lead}\n")
            return f"dug {lead}"

        return self.Out(found=[await ctx.step("dig", dig)])


class Review(Node):
    class In(Schema):
        topic: str
        log: str

    class Out(Schema):
        found: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        _where(inp.log, "Review")
        verdict = "kept"
        if inp.topic.startswith("ask"):
            verdict = str(await interrupt(ctx, f"keep {inp.topic}?"))
        return self.Out(found=[f"{inp.topic}:{verdict}"])


def topics_graph() -> Graph[Topics]:
    child = Graph(Inquiry, name="Inquiry").add(Leads).add(Dig).add(Review)
    child.edge(START, "Leads")
    child.router("Leads", lambda s: [Send("Dig", {"leads": [x]}) for x in s.leads])
    child.edge("Dig", "Review").edge("Review", END)
    g = Graph(Topics).add(Split).add(child.compile())
    g.edge(START, "Split")
    g.router("Split", lambda s: [Send("Inquiry", {"topic": t}) for t in s.topics])
    g.edge("Inquiry", END)
    return g


async def subgraph(log: str) -> dict[str, Any]:
    graph = topics_graph()
    data = {"topics": ["ask-a", "b", "c"], "log": log}
    answers = {}
    results = []
    threads: list[list[str]] = []
    for options in ({}, {"executor": RayExecutor(batch_size=2)}):
        app = graph.compile(**options)  # type: ignore[arg-type]
        name = "ray" if options else "local"
        backend = SqliteBackend(str(Path(log) / f"{name}.db"))
        first = await app.invoke(data, thread_id=name, backend=backend)
        (pending,) = run_info(first).interrupts
        answers[name] = [pending.id, list(pending.path)]
        out = await app.invoke(thread_id=name, backend=backend, resume={pending.id: "yes"})
        results.append(out)
        threads.append(sorted(await backend.list_threads()))
        await backend.aclose()
    where: dict[str, list[str]] = {}
    for line in filter(None, (Path(log) / "where.log").read_text().split("\n")):
        node, marker = line.split()
        where.setdefault(node, []).append(marker)
    effects: dict[str, int] = {}
    for line in filter(None, (Path(log) / "effects.log").read_text().split("\n")):
        effects[line] = effects.get(line, 0) + 1
    return {
        "equal": results[0].model_dump() == results[1].model_dump(),
        "found": sorted(results[1].found),
        "interrupts": answers,
        "threads": threads,
        "where": where,
        "effects": effects,
    }


def main() -> None:
    ray.init(
        address=os.environ["RAY_ADDRESS"],
        namespace="fanout",
        logging_level="ERROR",
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    mode = sys.argv[1]
    if mode == "equal":
        result = asyncio.run(equal(int(sys.argv[2])))
    elif mode == "subgraph":
        result = asyncio.run(subgraph(sys.argv[2]))
    else:
        result = asyncio.run(kill(int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
