"""Completion webhooks of the task API: a run that names a ``webhook`` URL has its terminal
record POSTed there, signed, retried with backoff, and how that went recorded on the run.

The body is ``{"event": "run.<status>", "run": <the task's JSON>}``. Two headers sign it
with the deployment's secret (``RunWebhooks(secret=...)``), as Stripe and GitHub do:

- ``X-TensorSketch-Timestamp``: Unix seconds when it was signed;
- ``X-TensorSketch-Signature``: ``sha256=`` and the hex HMAC-SHA256 of
  ``<timestamp>.<body bytes>`` under the secret.

A receiver recomputes it over the raw body (:func:`sign`), compares in constant time, and
refuses old timestamps. ``X-TensorSketch-Event`` and ``X-TensorSketch-Run`` name the event
and the run. The process that stores a run's terminal state delivers it; the outcome is
stored as the record's ``webhook_delivery``. Addresses are guarded as A2A push
notifications are (:mod:`tensorsketch.serve._webhooks`): never a loopback or private one
unless ``allowed_hosts`` names it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tensorsketch.runs import RunRecord, RunStore
from tensorsketch.serve._webhooks import deliver

__all__ = [
    "EVENT_HEADER",
    "RUN_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "RunWebhookSender",
    "RunWebhooks",
    "sign",
]

log = logging.getLogger("tensorsketch.serve.tasks")

SIGNATURE_HEADER = "X-TensorSketch-Signature"
TIMESTAMP_HEADER = "X-TensorSketch-Timestamp"
EVENT_HEADER = "X-TensorSketch-Event"
RUN_HEADER = "X-TensorSketch-Run"
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
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    secret: str = Field(min_length=16, repr=False)
    allowed_hosts: tuple[str, ...] = ()
    attempts: int = Field(default=5, ge=1, le=20)
    backoff: float = Field(default=1.0, ge=0.0)
    timeout: float = Field(default=10.0, gt=0.0)


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-TensorSketch-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


class RunWebhookSender:
    """A runner listener: delivers each terminal record that names a webhook, once, in the
    background, and stores the outcome on the record."""

    def __init__(
        self,
        options: RunWebhooks,
        store: RunStore,
        to_json: Callable[[RunRecord], dict[str, Any]],
    ) -> None:
        self.options = options
        self.store = store
        self.to_json = to_json
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._client: httpx.AsyncClient | None = None

    def observe(self, record: RunRecord) -> None:
        """Called with every record the runner stores; picks out the ones to deliver."""
        if (
            record.webhook is None
            or not record.terminal
            or record.webhook_delivery is not None
            or record.run_id in self._tasks
        ):
            return
        task = asyncio.get_running_loop().create_task(self._send(record))
        self._tasks[record.run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(record.run_id, None))

    async def _send(self, record: RunRecord) -> None:
        options = self.options
        url = str(record.webhook)
        body = json.dumps(
            {"event": f"run.{record.status}", "run": self.to_json(record)}, default=str
        ).encode()
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: stamp,
            SIGNATURE_HEADER: sign(options.secret, stamp, body),
            EVENT_HEADER: f"run.{record.status}",
            RUN_HEADER: record.run_id,
        }
        try:
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
            }

            def note(current: RunRecord) -> RunRecord | None:
                if current.webhook_delivery is not None:
                    return None
                return current.replace(webhook_delivery=outcome)

            await self.store.transition(record.run_id, note)
        except Exception:  # a fault of ours or the store's: logged, never the run's problem
            log.exception("webhook of run %s to %s failed", record.run_id, url)

    async def aclose(self, grace: float = 5.0) -> None:
        """Let deliveries under way finish for up to ``grace`` seconds, then stop."""
        pending = list(self._tasks.values())
        if pending:
            _done, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
