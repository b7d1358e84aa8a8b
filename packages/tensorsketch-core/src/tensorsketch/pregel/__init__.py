"""The BSP engine, as a package: one concept a module, bottom up.

- :mod:`~tensorsketch.pregel.spec` — what ``compile()`` decided, and the unit of a superstep;
- :mod:`~tensorsketch.pregel.build` — checking a graph while it is compiled (ports, wiring,
  assignability);
- :mod:`~tensorsketch.pregel.seam` — the types that cross to an executor;
- :mod:`~tensorsketch.pregel.state` — seeding, input, the barrier's fold;
- :mod:`~tensorsketch.pregel.plan` — which tasks run next (edges, routers, ``Send``, joins);
- :mod:`~tensorsketch.pregel.tasks` — one task with retry and timeout; many at once;
- :mod:`~tensorsketch.pregel.ship` / :mod:`~tensorsketch.pregel.worker` — the caller's and
  the worker's side of shipping ``Send`` instances to an executor;
- :mod:`~tensorsketch.pregel.loop` — :class:`Run`, the superstep loop;
- :mod:`~tensorsketch.pregel.restore` / :mod:`~tensorsketch.pregel.run_info` — stored values
  back into state, and how a run ended;
- :mod:`~tensorsketch.pregel.replay` — re-running one node of a checkpoint;
- :mod:`~tensorsketch.pregel.driver` — starting, opening, driving and closing one run;
- :mod:`~tensorsketch.pregel.compiled` — :class:`CompiledGraph`, what users call.

Nothing here knows agents, providers or stores: the durable layer is reached through
:class:`tensorsketch.durable.RunJournal`, observers through the event sink and the tracer.
"""

from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.pregel.loop import Run
from tensorsketch.pregel.spec import Branch, GraphSpec, NodeSpec, Task, TaskDone, check_concurrency

__all__ = [
    "Branch",
    "CompiledGraph",
    "GraphSpec",
    "NodeSpec",
    "Run",
    "Task",
    "TaskDone",
    "check_concurrency",
]
