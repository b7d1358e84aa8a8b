"""A task API server process for the kill tests: ``python task_server_proc.py SPEC PORT``.

``SPEC`` is JSON ``{"target": "sqlite" | "postgres" | "redis", "kwargs": {...}}`` (a crash
harness :class:`BackendSpec`). The graph is ``task_graphs.work_graph()`` (with ``"graph":
"steer"``, ``task_graphs.steer_agent(SPEC["gates"])``); ``TS_KILL_AT=n``
makes the process ``SIGKILL`` itself inside the n-th tool call, before its side effect.
``TS_SWEEPS``: a file that gets a line after each sweep of undelivered webhooks
(:func:`count_sweeps`).
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import task_graphs

from tensorsketch.runs import AsyncRunner
from tensorsketch.serve import RunWebhooks, task_app
from tensorsketch.testing import tally
from tensorsketch.testing.crash import BackendSpec
from tensorsketch.testing.runs import multitask_graph


def _dump_tasks(signum: int, frame: object) -> None:
    """``SIGUSR1``: print every thread's and asyncio task's stack (a stop that hangs says where)."""
    faulthandler.dump_traceback(all_threads=True)
    try:
        tasks = asyncio.all_tasks()  # the handler runs on the loop's thread, between callbacks
    except RuntimeError:  # before uvicorn started its loop
        tasks = set()
    for task in tasks:
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


def _die_before_marking_steering_taken() -> None:
    """``"die_before_mark": true``: SIGKILL this process the first time an agent marks
    steering messages taken — after it journaled them, before the run's record says so."""
    from tensorsketch.runs.steering import RecordInbox

    async def die(self: RecordInbox, messages: list[dict[str, Any]]) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    RecordInbox.taken = die  # type: ignore[method-assign]


def _die_at(point: str) -> None:
    """``"die_at": point``: SIGKILL this process at one moment of double-texting or of a
    schedule's tick, once the file ``TS_KILL_ARMED`` names exists:

    - ``stop_asked``: a later submit stored its run and the stop request of the run in
      flight (``interrupt``/``rollback``), before that run's runner saw it;
    - ``rolling_back``: a stopped run is about to discard its checkpoints (``rollback``);
    - ``cron_fired``: a due schedule submitted its run, before it moved on to its next time;
    - ``webhook_sending`` / ``webhook_sent``: a run's completion webhook is about to be
      POSTed / was POSTed, before its outcome is recorded on the run.
    """
    from tensorsketch.runs import execution, submission
    from tensorsketch.runs.runner import AsyncRunner as Runner

    def armed() -> bool:
        flag = os.environ.get("TS_KILL_ARMED")
        return flag is None or os.path.exists(flag)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "stop_asked":
        stop = submission.Submission._stop

        async def stop_then_die(self: Any, run_id: str, strategy: str, *, by: str) -> None:
            await stop(self, run_id, strategy, by=by)
            if armed():
                die()

        submission.Submission._stop = stop_then_die  # type: ignore[method-assign]
    elif point == "rolling_back":

        async def die_rolling_back(*args: Any) -> int:
            die()
            return 0

        execution.roll_back = die_rolling_back  # type: ignore[assignment]
    elif point in ("webhook_sending", "webhook_sent"):
        from tensorsketch.serve import _run_webhooks

        deliver = _run_webhooks.deliver

        async def deliver_and_die(*args: Any, **kwargs: Any) -> Any:
            if point == "webhook_sending" and armed():
                die()
            done = await deliver(*args, **kwargs)
            if armed():
                die()
            return done

        _run_webhooks.deliver = deliver_and_die  # type: ignore[assignment]
    elif point == "cron_fired":
        submit = Runner.submit

        async def submit_then_die(self: Any, *args: Any, **kwargs: Any) -> Any:
            record = await submit(self, *args, **kwargs)
            if "schedule" in (kwargs.get("labels") or {}) and armed():
                die()
            return record

        Runner.submit = submit_then_die  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown die_at {point!r}")


def count_sweeps(path: str) -> None:
    """Append a line to ``path`` after every sweep of undelivered webhooks, so a test waits
    for the sweeps that would deliver a webhook again instead of sleeping."""
    from tensorsketch.serve._run_webhooks import RunWebhookSender

    sweep = RunWebhookSender.sweep

    async def sweep_and_count(self: RunWebhookSender, limit: int = 100) -> int:
        started = await sweep(self, limit)
        tally.mark(path, started)
        return started

    RunWebhookSender.sweep = sweep_and_count  # type: ignore[method-assign]


def main() -> None:
    signal.signal(signal.SIGUSR1, _dump_tasks)
    raw = json.loads(sys.argv[1])
    port = int(sys.argv[2])
    backend = BackendSpec(raw["target"], raw.get("kwargs", {})).create()
    # "graph": "steer" serves task_graphs.steer_agent(raw["gates"]) (the steering kill test).
    # "graph": "ticks" serves multitask_graph(raw["pause"]) (the double-texting kill tests).
    if raw.get("graph") == "steer":
        graph = task_graphs.steer_agent(raw["gates"])
    elif raw.get("graph") == "ticks":
        graph = multitask_graph(float(raw.get("pause", 0.05)))
    else:
        graph = task_graphs.work_graph()
    if raw.get("die_before_mark"):
        _die_before_marking_steering_taken()
    if raw.get("die_at"):
        _die_at(raw["die_at"])
    if os.environ.get("TS_SWEEPS"):
        count_sweeps(os.environ["TS_SWEEPS"])
    runner = AsyncRunner(
        graph,
        backend=backend,
        concurrency=int(raw.get("concurrency", 4)),
        lease_ttl=float(raw.get("lease_ttl", 2.0)),
        timer_refresh=0.5,
        poll_interval=0.05,
    )
    hooks = raw.get("webhooks")  # {"secret", "allowed_hosts", ...}: RunWebhooks(**hooks)
    app = task_app(
        runner, drain_timeout=5.0, webhooks=RunWebhooks(**hooks) if hooks is not None else None
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
