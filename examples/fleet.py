"""Agent runs on a fleet: queue runs in a shared store, let a pool of Ray actors execute them.

    # Offline (no cluster, no API key): what each worker actor hosts, on a SQLite file.
    python examples/fleet.py

    # On a Ray cluster (`ray start --head` on one machine, `ray start --address` on others),
    # with PostgreSQL as the run table every node reaches:
    RAY_ADDRESS=ray-head:6379 TS_FLEET_BACKEND=postgresql://app@db/app python examples/fleet.py

The run table is the system of record: a run is a row, claimed by one actor at a time under a
lease; its checkpoints and its effect journal live beside it. Kill an actor or a node mid-run
and another actor resumes the run from its last checkpoint; the journal keeps a completed tool
call from running twice (docs/scale-out.md spells out the one at-least-once window).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tensorsketch import create_agent, tool
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant

RUNS = int(os.environ.get("TS_FLEET_RUNS", "20"))
HERE = str(Path(__file__).resolve().parent)


@tool
async def refund(order: str) -> str:
    """Refund an order (the run's side effect; journaled, so a resumed run does not repeat it).

    :param order: the order id.
    """
    return f"refund for order {order} issued"


async def _model(messages: list[Message], tools: list[Any]) -> Message | str:
    """A scripted model: ask for the refund once, then answer."""
    del tools
    if any(m.role == "tool" for m in messages):
        return "Your refund is on its way."
    asked = next(m for m in reversed(messages) if m.role == "user")
    order = str(asked.content).rsplit(" ", 1)[-1]
    return assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": order})])


# What the workers import (`fleet:agent`): the graph must be importable on every node.
agent = create_agent(FakeProvider(policy=_model), tools=[refund], name="fleet-refunds")


async def on_one_process() -> None:
    """The offline path: one FleetRunner (the runner each Ray actor hosts) over SQLite."""
    from tensorsketch.ray import FleetRunner, enqueue
    from tensorsketch.runtime.backends import SqliteBackend

    folder = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())
    backend = SqliteBackend(str(folder / "fleet.db"))
    runner = FleetRunner(agent, backend=backend)
    try:
        ids = []
        for i in range(RUNS):
            record, _ = await enqueue(backend, {"query": f"refund order {i}"}, graph=agent)
            ids.append(record.run_id)
        taken = await runner.take(ids)
        done = [await runner.await_run(run_id) for run_id in taken]
        ok = sum(r.status == "succeeded" for r in done)
        print(f"{ok}/{RUNS} runs succeeded on one process (no cluster)")
        print(f"first answer: {done[0].output['output']}")
        print("on a cluster: RAY_ADDRESS=HEAD:6379 TS_FLEET_BACKEND=postgresql://... " + __file__)
    finally:
        await runner.aclose()
        await backend.aclose()


async def on_the_cluster(address: str, dsn: str) -> None:
    """The fleet: enqueue the runs, start a pool of two actors, wait until the table says done."""
    import ray

    from tensorsketch.ray import WorkerPool, WorkerSpec, backend_from_dsn, enqueue

    # The actors import `fleet:agent`: ship this folder on their path (a real deployment bakes
    # the code into the image instead; see docs/scale-out.md, "KubeRay").
    ray.init(
        address=address,
        namespace="tensorsketch",
        runtime_env={"env_vars": {"PYTHONPATH": HERE}},
        log_to_driver=False,
        **({"_node_ip_address": ip} if (ip := os.environ.get("TS_RAY_NODE_IP")) else {}),
    )
    schema = os.environ.get("TS_FLEET_SCHEMA")  # a PostgreSQL schema / Redis key prefix
    spec = WorkerSpec(
        graph="fleet:agent", backend=dsn, schema=schema, concurrency=50, lease_ttl=10.0
    )
    pool = WorkerPool(spec, address=address, actors=2, name=f"fleet-example-{os.getpid()}")
    backend = backend_from_dsn(dsn, schema=schema, pool_size=2)
    stop = asyncio.Event()
    try:
        ids = []
        for i in range(RUNS):
            record, _ = await enqueue(backend, {"query": f"refund order {i}"}, graph=agent)
            ids.append(record.run_id)
        started = time.perf_counter()
        dispatcher = asyncio.create_task(pool.run(stop))
        store = backend.run_store()
        assert store is not None
        while True:
            records = [await store.get(run_id) for run_id in ids]
            if all(r is not None and r.status in ("succeeded", "failed") for r in records):
                break
            if dispatcher.done():
                dispatcher.result()  # the dispatcher stopped early: say why
            await asyncio.sleep(0.2)
        seconds = time.perf_counter() - started
        ok = sum(r is not None and r.status == "succeeded" for r in records)
        nodes = {info.get("node") for info in pool.stats.actors.values()}
        print(f"{ok}/{RUNS} runs succeeded on {len(pool.stats.actors)} actors, {len(nodes)} nodes")
        print(f"{RUNS / seconds:.0f} runs/s")
        stop.set()
        await dispatcher
    finally:
        stop.set()
        await pool.close()
        await backend.aclose()


def main() -> int:
    address, dsn = os.environ.get("RAY_ADDRESS"), os.environ.get("TS_FLEET_BACKEND")
    if address and dsn:
        asyncio.run(on_the_cluster(address, dsn))
    elif address or dsn:
        print("set both RAY_ADDRESS and TS_FLEET_BACKEND (or neither, to run offline)")
        return 2
    else:
        asyncio.run(on_one_process())
    return 0


if __name__ == "__main__":
    sys.exit(main())
