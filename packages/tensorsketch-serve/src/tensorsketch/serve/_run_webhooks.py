"""Completion webhooks of the task API: a run that names a ``webhook`` URL has its terminal
record POSTed there, signed, retried with backoff, and how that went recorded on the run.

The body is ``{"event": "run.<status>", "run": <the task's JSON>}``. Two headers sign it
with the deployment's secret (``RunWebhooks(secret=...)``), as Stripe and GitHub do:

- ``X-TensorSketch-Timestamp``: Unix seconds when it was signed;
- ``X-TensorSketch-Signature``: ``sha256=`` and the hex HMAC-SHA256 of
  ``<timestamp>.<body bytes>`` under the secret.

A receiver recomputes it over the raw body (:func:`sign`), compares in constant time, and
refuses old timestamps. ``X-TensorSketch-Event`` and ``X-TensorSketch-Run`` name the event
and the run; ``X-TensorSketch-Delivery`` is the delivery's id, the same on every re-delivery
(a receiver that keeps the ids it handled handles each run's webhook once).

Delivery is durable, at least once: the write that stores a run's terminal state leaves it in
the store's undelivered index (:meth:`RunStore.undelivered`) until the outcome is stored as
the record's ``webhook_delivery``. The process that finished the run delivers it at once; every
server also sweeps that index when it starts and every ``sweep_every`` seconds, so a webhook
whose process died before recording the outcome is sent again. A sender first claims the run
(a compare-and-set of its ``owner`` and ``lease_expires_at``, for as long as the delivery may
take), so two servers never deliver it at the same time; the task API's answers leave that
claim out (a finished run shows no owner). Addresses are guarded as A2A push
notifications are (:mod:`tensorsketch.serve._webhooks`): never a loopback or private one
unless ``allowed_hosts`` names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tensorsketch.runs import RunRecord, RunStore
from tensorsketch.runtime.backends.runs import owner_is_dead
from tensorsketch.serve._webhooks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    deliver,
    longest_delivery,
    sign,
    signed,
)

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "RUN_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "RunWebhookSender",
    "RunWebhooks",
    "sign",
]

log = logging.getLogger("tensorsketch.serve.tasks")

EVENT_HEADER = "X-TensorSketch-Event"
RUN_HEADER = "X-TensorSketch-Run"
DELIVERY_HEADER = "X-TensorSketch-Delivery"
#: What the operator reads in a refusal: how to allow an internal receiver.
ALLOW_HINT = (
    "this server only calls public webhooks (its operator can allow a host with "
    "task_app(webhooks=RunWebhooks(allowed_hosts=[...])))."
)


class RunWebhooks(BaseModel):
    """How ``task_app(webhooks=...)`` delivers completion webhooks (without it, a run that
    names a ``webhook`` is a 400).

    :ivar secret: the deployment's signing secret (at least 16 characters), shared with the
        receivers.
    :ivar allowed_hosts: hosts, IP addresses or networks (``"127.0.0.1"``, ``"10.0.0.0/8"``)
        a webhook may be on although they are not public. Empty by default.
    :ivar attempts: tries of one delivery before it is recorded as failed.
    :ivar backoff: seconds before the first retry; each further one waits twice as long.
    :ivar timeout: seconds one POST may take.
    :ivar sweep_every: seconds between two sweeps of finished runs whose webhook is not
        delivered yet (one also runs when the server starts).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    secret: str = Field(min_length=16, repr=False)
    allowed_hosts: tuple[str, ...] = ()
    attempts: int = Field(default=5, ge=1, le=20)
    backoff: float = Field(default=1.0, ge=0.0)
    timeout: float = Field(default=10.0, gt=0.0)
    sweep_every: float = Field(default=30.0, gt=0.0)

    @property
    def claim_seconds(self) -> float:
        """How long a sender's claim on a delivery lasts: every attempt timing out, every
        backoff waited, and a margin. A claim whose holder died lapses after it."""
        return longest_delivery(self.attempts, self.timeout, self.backoff) + 30.0


def delivery_id(record: RunRecord) -> str:
    """The ``X-TensorSketch-Delivery`` of a run's webhook: the same on every re-delivery (a
    run reaches one terminal status, once)."""
    return f"{record.run_id}:run.{record.status}"


class RunWebhookSender:
    """A runner listener: delivers each terminal record that names a webhook in the
    background, and stores the outcome on the record; :meth:`sweep` takes up the ones a
    process died before recording."""

    def __init__(
        self,
        options: RunWebhooks,
        store: RunStore,
        to_json: Callable[[RunRecord], dict[str, Any]],
        owner: str,
    ) -> None:
        self.options = options
        self.store = store
        self.to_json = to_json
        self.owner = owner
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._client: httpx.AsyncClient | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def observe(self, record: RunRecord) -> None:
        """Called with every record the runner stores; picks out the ones to deliver."""
        if record.webhook_pending and record.run_id not in self._tasks:
            self._spawn(record)

    def _spawn(self, record: RunRecord) -> None:
        task = asyncio.get_running_loop().create_task(self._send(record))
        self._tasks[record.run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(record.run_id, None))

    def _held(self, record: RunRecord, at: float) -> bool:
        """Whether another live sender holds the claim on ``record``'s delivery."""
        holder = record.owner
        return (
            holder is not None
            and holder != self.owner
            and (record.lease_expires_at or 0.0) > at
            and not owner_is_dead(holder)
        )

    async def sweep(self, limit: int = 100) -> int:
        """Start delivering finished runs whose webhook is not recorded as delivered (a
        process died before it recorded the outcome); return how many were started."""
        started = 0
        at = time.time()
        for record in await self.store.undelivered(limit):
            if record.run_id not in self._tasks and not self._held(record, at):
                self._spawn(record)
                started += 1
        return started

    def start_sweeping(self) -> None:
        """Run :meth:`sweeping` in the background until :meth:`aclose`."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self.sweeping())

    async def sweeping(self) -> None:
        """Sweep now and every ``sweep_every`` seconds, until cancelled."""
        while True:
            try:
                await self.sweep()
            except Exception as exc:  # the store may be away for a while: the next sweep retries
                log.warning("sweeping undelivered webhooks failed: %s", exc)
            await asyncio.sleep(self.options.sweep_every)

    async def _claim(self, record: RunRecord) -> RunRecord | None:
        """Take the delivery of ``record`` for :attr:`RunWebhooks.claim_seconds` (``None``:
        it was delivered meanwhile, or another live sender holds it)."""
        at = time.time()
        until = at + self.options.claim_seconds

        def claim(current: RunRecord) -> RunRecord | None:
            if not current.webhook_pending or self._held(current, at):
                return None
            return current.replace(owner=self.owner, lease_expires_at=until)

        return await self.store.transition(record.run_id, claim, known=record)

    async def _send(self, record: RunRecord) -> None:
        options = self.options
        url = str(record.webhook)
        try:
            claimed = await self._claim(record)
            if claimed is None:
                return
            event = f"run.{claimed.status}"
            shown = claimed.replace(owner=None, lease_expires_at=None)
            body = json.dumps({"event": event, "run": self.to_json(shown)}, default=str).encode()
            headers = {
                "Content-Type": "application/json",
                **signed(options.secret, body),
                EVENT_HEADER: event,
                RUN_HEADER: claimed.run_id,
                DELIVERY_HEADER: delivery_id(claimed),
            }
            if self._client is None:
                self._client = httpx.AsyncClient(follow_redirects=False)
            done = await deliver(
                self._client,
                url,
                content=body,
                headers=headers,
                attempts=options.attempts,
                backoff=options.backoff,
                timeout=options.timeout,
                allowed=options.allowed_hosts,
                what="webhook",
                hint=ALLOW_HINT,
            )
            outcome = {
                "delivered": done.delivered,
                "attempts": done.attempts,
                "status": done.status,
                "problem": done.problem,
                "at": time.time(),
                "id": delivery_id(claimed),
            }

            def note(current: RunRecord) -> RunRecord | None:
                if current.webhook_delivery is not None:
                    return None
                return current.replace(webhook_delivery=outcome, owner=None, lease_expires_at=None)

            await self.store.transition(record.run_id, note, known=claimed)
        except Exception:  # a fault of ours or the store's: logged, never the run's problem
            log.exception("webhook of run %s to %s failed", record.run_id, url)

    async def aclose(self, grace: float = 5.0) -> None:
        """Stop sweeping; let deliveries under way finish for up to ``grace`` seconds, then
        stop (one cut short is owed still: the next sweep of any server sends it)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        pending = list(self._tasks.values())
        if pending:
            _done, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
