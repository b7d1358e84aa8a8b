"""TensorSketch on Ray: the run table worked by a fleet of detached async Ray actors.

::

    from tensorsketch.ray import WorkerPool, WorkerSpec, enqueue

    spec = WorkerSpec(graph="app:agent", backend="postgresql://postgres@db/app")
    pool = WorkerPool(spec, address="ray-head:6379", actors=4)
    await pool.run()  # or: tensorsketch worker app:agent --ray ray-head:6379 --backend ...

    record, _ = await enqueue(backend, {"query": "refund order 7"}, graph=agent)

Importing this package does not import Ray (it is large): Ray loads when a pool connects.
``tensorsketch.ray.testing`` starts a local cluster inside a private network namespace for
tests and benchmarks. See docs/scale-out.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorsketch.ray.exceptions import RayClusterError, RayFleetError

if TYPE_CHECKING:
    from tensorsketch.ray._actor import FleetRunner, RunWorker
    from tensorsketch.ray._pool import PoolStats, WorkerPool
    from tensorsketch.ray._queue import enqueue
    from tensorsketch.ray._spec import WorkerSpec, backend_from_dsn, load_graph
    from tensorsketch.ray.executor import RayExecutor

__all__ = [
    "FleetRunner",
    "PoolStats",
    "RayClusterError",
    "RayExecutor",
    "RayFleetError",
    "RunWorker",
    "WorkerPool",
    "WorkerSpec",
    "backend_from_dsn",
    "enqueue",
    "load_graph",
]

#: Where each lazily loaded name lives (the modules that import Ray load on first use).
_LAZY = {
    "FleetRunner": "_actor",
    "RunWorker": "_actor",
    "PoolStats": "_pool",
    "WorkerPool": "_pool",
    "enqueue": "_queue",
    "WorkerSpec": "_spec",
    "backend_from_dsn": "_spec",
    "load_graph": "_spec",
    "RayExecutor": "executor",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'tensorsketch.ray' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib  # noqa: PLC0415 - Ray loads when a name is used

    value = getattr(importlib.import_module(f"tensorsketch.ray.{module}"), name)
    globals()[name] = value
    return value
