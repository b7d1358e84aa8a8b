"""The executor seam: where a superstep's ``Send`` instances run.

By default every task of a superstep runs on the caller's event loop (the engine's own fast
path; nothing in this module is imported for it). An :class:`Executor` given to
``compile(executor=...)`` or ``invoke(executor=...)`` — or named, ``executor="ray"``, through
the ``tensorsketch_executors`` hook — runs a superstep's ``Send`` instances somewhere else:
other threads, processes, machines. Plain nodes stay on the caller's loop, running
concurrently with the shipped instances.

What crosses the seam is plain data, so an executor can pickle it:

- **in**, once per superstep: a :class:`Superstep` — the superstep number, the state values
  the shipped nodes read (shared by every instance, so an executor sends them once), one
  :class:`SendCall` per instance (its plan index, node name, ``#k`` instance and ``Send``
  payload, plus the journaled results of its earlier attempts to replay), the invoke's
  ``resume=`` decisions, the run's identity, and whether the run is durable or streamed;
- **the graph**: the :class:`~tensorsketch.pregel.GraphSpec` of the compiled graph. Core
  hands the object itself; how it reaches a worker is the executor's decision (the Ray
  executor cloudpickles it once into the object store, so nodes, schemas and routing
  functions must pickle, and the modules that define them must import on the workers);
- **out**, as each batch finishes: one :class:`TaskOutcome` per instance — its writes, or the
  error it raised, or the interrupt it suspended on — with the effects it recorded
  (``ctx.step`` results, in call order) and the events it emitted.

On the workers, :func:`run_calls` runs a batch of calls with the engine's own task code
(input building, ``RetryPolicy`` and ``timeout=``, output checks, error notes), so a shipped
instance behaves like a local one. The caller's side (:func:`run_shipped`) journals each
returned effect before it counts the instance as finished, journals the finished instances'
writes (per-task commit: a failing sibling does not lose them), re-emits the events, and
hands the writes to the barrier, which folds them in plan order as always — the result is the
in-process run's, bit for bit.

Effects cross back with the outcome; the caller, which holds the thread's lease, is the only
writer of the journal. A resumed superstep ships each instance the results its earlier
attempts journaled (found through a per-instance manifest written beside the effects), so
they replay instead of running again.

A subgraph node (``Graph.add(compiled_graph)``) never ships: it runs here, beside the store,
and drives its child's supersteps, whose tasks go to the same executor — the child's ``Send``
instances, or every task of the child when the subgraph node is itself a ``Send`` instance
(the executor would have run its whole body) — so the child checkpoints on its own thread as
in-process and its node code runs on the workers. What a remote instance cannot do: run a
durable nested graph from its body (``ctx.run_nested`` needs the store) — it raises
:class:`ExecutorError`; read
``ctx.deps`` (the caller's ``invoke(deps=...)`` are never shipped) — it raises
:class:`~tensorsketch.errors.DepsUnavailableError`; spans of
shipped instances are not recorded; ``ctx.step(idempotency_key=...)`` dedupes across the
attempts of the same instance, not across instances; events arrive when the batch returns.
"""

from __future__ import annotations

from tensorsketch.pregel.seam import (
    EventRecord,
    Executor,
    OnEffect,
    RemoteTaskError,
    SendCall,
    Status,
    Superstep,
    TaskOutcome,
    manifest_key,
    portable_error,
)
from tensorsketch.pregel.ship import run_shipped
from tensorsketch.pregel.worker import InProcessExecutor, resolve_executor, run_calls

__all__ = [
    "EventRecord",
    "Executor",
    "InProcessExecutor",
    "OnEffect",
    "RemoteTaskError",
    "SendCall",
    "Status",
    "Superstep",
    "TaskOutcome",
    "manifest_key",
    "portable_error",
    "resolve_executor",
    "run_calls",
    "run_shipped",
]
