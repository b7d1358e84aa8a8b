"""A2A push notifications: a task's updates POSTed to the webhooks its clients registered.

A client registers a webhook for a task (``CreateTaskPushNotificationConfig``, 0.3's
``tasks/pushNotificationConfig/set``, or ``configuration.taskPushNotificationConfig`` on
``SendMessage``); the config is kept with the task in the store, so it outlives a restart.
Each status change, and each finished artifact, is then POSTed to it — A2A 1.0 webhooks get the
``StreamResponse`` (``{"statusUpdate": …}`` / ``{"artifactUpdate": …}``), 0.3 webhooks the whole
``Task`` as 0.3 spells it — with the config's ``token`` as ``X-A2A-Notification-Token`` and its
``authentication`` as ``Authorization: <scheme> <credentials>``.

Deliveries to one webhook go out in order, in the background (a slow webhook never holds up a
run); a failed one (no connection, a timeout, a 408/429/5xx answer) is retried with exponential
backoff (the delivery and its address guard are :mod:`tensorsketch.serve._webhooks`, shared
with the task API's completion webhooks). A webhook must be a public ``http(s)`` address:
a URL whose host resolves to a loopback, private, link-local or otherwise non-public address
is refused when it is registered and again before each delivery (the name may have been
re-pointed since), unless
``PushNotifications(allowed_hosts=...)`` names it — a server never calls into its own network
for whoever asked.

A task's **last word** — its terminal status (``completed``, ``failed``, ``canceled``,
``rejected``) and each ``input-required`` — is delivered at least once, even by a server that
was killed before it POSTed: it is recorded as owed in the store before the status itself is
written (:meth:`TaskStore.owe`), each webhook's entry is removed once its POST is done, and
every server sweeps what is still owed at start and every ``sweep_every`` seconds (a sweep
reads only those entries). A sender claims one webhook's delivery (a lease in the store) for
one attempt, and again before each retry, so two servers never send it at once and a sender
that died blocks it for one attempt at most (:attr:`PushNotifications.claim_seconds`). It
carries ``X-TensorSketch-Delivery: <task id>:<state>`` (and ``:<n>`` for the n-th message of
an ``input-required``), the same on every re-delivery, for receivers to dedupe.
Every other update (``working``, artifacts) stays best-effort: lost if the server dies first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from a2a.compat.v0_3 import conversions
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseDict
from pydantic import BaseModel, ConfigDict, Field

from tensorsketch.serve._webhooks import deliver, signed, webhook_problem
from tensorsketch.serve.a2a import _errors as errors

if TYPE_CHECKING:
    from tensorsketch.serve.a2a._store import TaskStore

__all__ = [
    "DELIVERY_HEADER",
    "PushNotifications",
    "PushSender",
    "PushTarget",
    "check_webhook",
    "task_as_v03",
]

log = logging.getLogger("tensorsketch.serve.a2a")

#: The header naming an owed notification's delivery, the same on every re-delivery (as the
#: task API's completion webhooks carry it).
DELIVERY_HEADER = "X-TensorSketch-Delivery"


class PushNotifications(BaseModel):
    """How an A2A app delivers push notifications (``a2a_app(push=...)``; ``push=None``
    turns them off, and the card then says so).

    :ivar allowed_hosts: hosts, IP addresses or networks (``"127.0.0.1"``, ``"10.0.0.0/8"``,
        ``"hooks.internal"``) a webhook may be on although they are not public — for local
        development and tests, or a trusted internal receiver. Empty by default: only public
        addresses.
    :ivar attempts: how many times one notification is tried before it is given up (logged).
    :ivar backoff: seconds before the first retry; each further retry waits twice as long.
    :ivar timeout: seconds one POST may take. A sender's claim on an owed delivery lasts
        twice this (:attr:`claim_seconds`), taken again before each retry.
    :ivar sweep_every: seconds between two sweeps of terminal (and ``input-required``)
        notifications still owed — a server died before delivering them (one sweep also runs
        when the app starts).
    :ivar secret: a deployment signing secret (at least 16 characters) shared with the
        receivers: each notification then also carries ``X-TensorSketch-Timestamp`` and
        ``X-TensorSketch-Signature`` (HMAC-SHA256, as the task API's completion webhooks;
        ``tensorsketch.serve.sign_webhook`` recomputes it), beside the spec's token. ``None``
        (the default): only the spec's authentication.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_hosts: tuple[str, ...] = ()
    attempts: int = Field(default=4, ge=1, le=20)
    backoff: float = Field(default=0.5, ge=0.0)
    timeout: float = Field(default=10.0, gt=0.0)
    sweep_every: float = Field(default=30.0, gt=0.0)
    secret: str | None = Field(default=None, min_length=16, repr=False)

    @property
    def claim_seconds(self) -> float:
        """How long a sender's claim on one owed delivery lasts: one attempt (its timeout, and
        as long again for the address check and the store's round trips). The sender claims
        again before each retry, so a dead sender's claim blocks the delivery for this long
        at most, however many attempts and backoffs it had left."""
        return 2 * self.timeout


@dataclass(frozen=True)
class PushTarget:
    """One registered webhook: the A2A 1.0 ``TaskPushNotificationConfig`` as JSON, and which
    protocol version registered it (that decides what its notifications look like)."""

    config: dict[str, Any]
    surface: str = "1.0"

    @property
    def id(self) -> str:
        return str(self.config.get("id", ""))

    def headers(self) -> dict[str, str]:
        """The spec's authentication: the token, and the scheme's credentials."""
        headers: dict[str, str] = {}
        if self.config.get("token"):
            headers["X-A2A-Notification-Token"] = str(self.config["token"])
        auth = self.config.get("authentication") or {}
        if auth.get("scheme") and auth.get("credentials"):
            headers["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
        return headers


def task_as_v03(task: dict[str, Any]) -> Any:
    """An A2A 1.0 ``Task`` (JSON) as 0.3 spells it (``kind: "task"``, lower-case states)."""
    compat = conversions.to_compat_task(ParseDict(task, pb.Task(), ignore_unknown_fields=True))
    return compat.model_dump(mode="json", by_alias=True, exclude_none=True)


_HINT = (
    "this agent only calls public webhooks (the server's operator can allow a host with "
    "a2a_app(push=PushNotifications(allowed_hosts=[...])))."
)


async def check_webhook(url: str, allowed: Iterable[str] = ()) -> None:
    """Refuse (-32602) a webhook URL this server must not call: not ``http(s)``, no host, a
    host that does not resolve, or one that resolves to a non-public address not allowed."""
    problem = await webhook_problem(url, allowed, what="push notification URL", hint=_HINT)
    if problem is not None:
        raise errors.invalid_params(problem)


class PushSender:
    """Delivers notifications in the background, in order per webhook, with retries."""

    def __init__(self, options: PushNotifications) -> None:
        self.options = options
        #: where owed deliveries are claimed and recorded (set by the task service)
        self.store: TaskStore | None = None
        #: this sender's name on its claims (host and pid, so a dead one can be told apart)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._client: httpx.AsyncClient | None = None
        self._chains: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: owed deliveries this sender is making (its claims are its own: the store's lease
        #: cannot keep its chain and its sweep apart)
        self._owing: set[tuple[str, str]] = set()

    async def check(self, url: str) -> None:
        await check_webhook(url, self.options.allowed_hosts)

    def send(
        self,
        task_id: str,
        target: PushTarget,
        payload: dict[str, Any],
        delivery: str | None = None,
    ) -> None:
        """Queue ``payload`` for ``target``: it goes out after what was queued before it.
        With ``delivery`` (an owed notification's id, see :meth:`TaskStore.owe`) it is
        claimed first and its outcome recorded."""
        key = (task_id, target.id)
        before = self._chains.get(key)
        job = self._after(before, target, payload, delivery)
        chain = asyncio.get_running_loop().create_task(job)
        self._chains[key] = chain

        def forget(done: asyncio.Task[None]) -> None:
            if self._chains.get(key) is done:
                del self._chains[key]

        chain.add_done_callback(forget)

    async def _after(
        self,
        before: asyncio.Task[None] | None,
        target: PushTarget,
        payload: dict[str, Any],
        delivery: str | None,
    ) -> None:
        if before is not None:  # its outcome is its own; only its being over matters here
            await asyncio.wait([before])
        if delivery is None:
            await self._deliver(target, payload)
        else:
            await self.deliver_owed(delivery, target, payload)

    async def deliver_owed(
        self, delivery: str, target: PushTarget, payload: dict[str, Any]
    ) -> bool:
        """Deliver an owed notification to ``target`` unless it was already, or another
        sender holds it; then take it out of what is owed. ``True`` when it is no longer
        owed (sent, given up, or sent by another sender before)."""
        store = self.store
        if store is None:  # pragma: no cover - the task service always sets it
            return await self._deliver(target, payload)
        key = (delivery, target.id)
        if key in self._owing:
            return False
        self._owing.add(key)
        try:
            if not await store.claim_push(delivery, target.id, self.owner, self.options):
                return False
            lost = False

            async def claim_again() -> bool:  # one attempt at a time: a dead sender blocks one
                nonlocal lost
                lost = not await store.claim_push(delivery, target.id, self.owner, self.options)
                return not lost

            try:
                if not await store.is_owed(delivery, target.id):
                    return True
                await self._deliver(target, payload, delivery, claim_again)
                if lost:  # another sender took it over between two attempts: it is theirs
                    return False
                await store.delivered(delivery, [target.id])
            finally:
                await store.release_push(delivery, target.id, self.owner)
        except Exception:  # the store is away: the next sweep delivers it
            log.exception("owed push notification %s to %s failed", delivery, target.id)
            return False
        finally:
            self._owing.discard(key)
        return True

    async def _deliver(
        self,
        target: PushTarget,
        payload: dict[str, Any],
        delivery: str | None = None,
        before_retry: Callable[[], Awaitable[bool]] | None = None,
    ) -> bool:
        url = str(target.config.get("url", ""))
        options = self.options
        headers = {"Content-Type": "application/json", **target.headers()}
        if delivery is not None:
            headers[DELIVERY_HEADER] = delivery
        body = json.dumps(payload).encode()
        if options.secret is not None:
            headers.update(signed(options.secret, body))
        try:
            done = await deliver(
                self._http(),
                url,
                content=body,
                headers=headers,
                attempts=options.attempts,
                backoff=options.backoff,
                timeout=options.timeout,
                allowed=options.allowed_hosts,
                what="push notification URL",
                hint=_HINT,
                before_retry=before_retry,
            )
        except Exception:  # a fault of ours: logged, never the task's problem
            log.exception("push notification to %s failed", url)
            return False
        return done.delivered

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    async def aclose(self, grace: float = 5.0) -> None:
        """Let queued notifications go out for up to ``grace`` seconds, then stop."""
        pending = list(self._chains.values())
        if pending:
            _done, late = await asyncio.wait(pending, timeout=grace)
            for chain in late:
                chain.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
