"""Per-resource authorization for the task API: after ``authenticate`` says *who* is asking,
handlers per resource and action say *what* they may touch and list.

``task_app(runner, authenticate=..., authorize=Authorization())``: ``authenticate`` returns
an :class:`Identity` (or a user id string) instead of ``True``; every route then has a
decision in :data:`ROUTES`, and by default a user reaches only what they own:

- **runs** carry their creator in the ``owner`` label (set by the server: a request cannot
  choose it); a run that is not yours answers **404**, word for word what a missing run
  answers, so ids do not leak whose runs exist; ``GET /tasks`` lists only yours; an
  ``Idempotency-Key`` is the caller's own (stored as ``"<len>:<user>:<key>"``).
- **threads** belong to whoever started their first run; a run on another user's thread is a
  **403** (the thread id is taken: choose another, a random one is best). A new thread id is
  claimed atomically in the run store (a ``kind="thread"`` record keyed by the id): of two
  users starting it at the same instant, exactly one owns it.
- **memory** namespaces under ``("users", "<id>", ...)`` and **sessions** whose id starts
  with ``"<id>:"`` are the user's; anything else is a **403** naming the user's scope, and a
  listing, search or namespace walk with a wider prefix is narrowed to it.
- an identity with ``admin=True`` reaches and lists everything.

Handlers registered with :meth:`Authorization.on` replace the default for a resource and
action; they see an :class:`Access` and return ``True`` (allow) or ``False`` (refuse).
"""

from __future__ import annotations

import inspect
import string
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from tensorsketch.errors import BackendUnavailableError, RunNotFoundError
from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.serve._http import Authenticate, ServeError

__all__ = [
    "ACTIONS",
    "RESOURCES",
    "ROUTES",
    "Access",
    "Authorization",
    "Identity",
    "owner_or_admin",
    "read_by_all_changed_by_admins",
]

#: What can be done to a resource. ``list`` covers listing, searching and walking namespaces.
ACTIONS: tuple[str, ...] = ("create", "read", "update", "delete", "list")

#: The resource kinds handlers can be registered for. A new kind is one line here.
RESOURCES: dict[str, tuple[str, ...]] = {
    "runs": ACTIONS,
    "threads": ACTIONS,
    "memory": ACTIONS,
    "sessions": ACTIONS,
    "schedules": ACTIONS,
    "assistants": ACTIONS,
}

#: The authorization decision of every route of the task API: ``(resource, action)``, or
#: ``None`` for a route open to every caller (probes, scrapers, the API description). An app
#: built with ``authorize=`` refuses to start with a route missing here, and the test suite
#: enumerates the app's routes against it: a new route is one line here.
ROUTES: dict[str, tuple[str, str] | None] = {
    "POST /runs": ("runs", "create"),
    "POST /tasks": ("runs", "create"),
    "GET /tasks": ("runs", "list"),
    "GET /tasks/{id}": ("runs", "read"),
    "GET /tasks/{id}/events": ("runs", "read"),
    "POST /tasks/{id}/events": ("runs", "update"),
    "POST /tasks/{id}/approve": ("runs", "update"),
    "POST /tasks/{id}/resume": ("runs", "update"),
    "POST /tasks/{id}/cancel": ("runs", "update"),
    "POST /tasks/{id}/steer": ("runs", "update"),
    "POST /assistants": ("assistants", "create"),
    "GET /assistants": ("assistants", "list"),
    "GET /assistants/{id}": ("assistants", "read"),
    "PATCH /assistants/{id}": ("assistants", "update"),
    "GET /assistants/{id}/versions": ("assistants", "read"),
    "POST /assistants/{id}/rollback": ("assistants", "update"),
    "GET /healthz": None,
    "GET /metrics": None,
    "GET /openapi.json": None,
    "PUT /memory/items": ("memory", "update"),
    "GET /memory/items": ("memory", "read"),
    "DELETE /memory/items": ("memory", "delete"),
    "POST /memory/list": ("memory", "list"),
    "POST /memory/search": ("memory", "list"),
    "POST /memory/namespaces": ("memory", "list"),
    "GET /sessions": ("sessions", "list"),
    "GET /sessions/{id}": ("sessions", "read"),
    "POST /sessions/{id}": ("sessions", "update"),
    "DELETE /sessions/{id}": ("sessions", "delete"),
    "POST /schedules": ("schedules", "create"),
    "GET /schedules": ("schedules", "list"),
    "GET /schedules/{id}": ("schedules", "read"),
    "DELETE /schedules/{id}": ("schedules", "delete"),
    "GET /schedules/{id}/runs": ("schedules", "read"),
}

_STATE_KEY = "tensorsketch_identity"
#: Where :meth:`Gatekeeper.run` leaves the record it read for the route to answer with.
_RECORD_KEY = "tensorsketch_run_record"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request comes from, as ``authenticate`` returns it.

    :param id: the user's id: it owns their runs and threads, and fills their memory and
        session scopes.
    :param admin: reaches and lists every user's resources (the escape for operators).
    :param claims: whatever else your handlers want to read (roles, a tenant, ...).
    """

    id: str
    admin: bool = False
    claims: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            msg = f"Identity(id=...) must be a non-empty str, got {self.id!r}."
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Access:
    """One authorization question, as a handler receives it.

    :param target: what is touched: a run id, a thread id, a namespace tuple, a session id
        (for a listing: the prefix or filter it asked for).
    :param owner: whose ``target`` is (``None``: nobody's, such as a namespace outside every
        user's scope; for ``create``, the caller).
    """

    identity: Identity
    resource: str
    action: str
    target: Any
    owner: str | None


#: ``handler(access) -> bool`` (sync or async): ``True`` allows, ``False`` refuses; raising
#: :class:`~tensorsketch.serve.ServeError` answers with its own status and message.
Handler = Callable[[Access], bool | Awaitable[bool]]


def owner_or_admin(access: Access) -> bool:
    """The default handler: the owner, or an admin."""
    return access.identity.admin or access.owner == access.identity.id


def read_by_all_changed_by_admins(access: Access) -> bool:
    """The default handler for assistants, the deployment's shared configurations: every
    user reads and lists them (and runs with them); only an admin creates, changes or rolls
    one back."""
    return access.action in ("read", "list") or access.identity.admin


#: The default handler of a resource whose items belong to no user.
_DEFAULTS: dict[str, Handler] = {"assistants": read_by_all_changed_by_admins}


def _one_user_field(label: str, where: str) -> tuple[str, str]:
    """``label`` split around its single ``{user}`` field."""
    parsed = list(string.Formatter().parse(label))
    fields = [field for _, field, _, _ in parsed if field is not None]
    if fields != ["user"]:
        msg = f"{where} must name the user once as {{user}}, got {label!r}."
        raise ValueError(msg)
    before, _, after = label.partition("{user}")
    return before, after


class Authorization:
    """Authorization handlers per resource and action, with ownership as the default.

    :param owner_label: the run label that records a run's owner.
    :param memory_scope: the namespace a user's memory lives under; ``{user}`` is their id.
    :param session_scope: how a user's session ids start; ``{user}`` is their id and is
        followed by a separator (``"{user}:"`` owns ``"ana:support"``).
    """

    def __init__(
        self,
        *,
        owner_label: str = "owner",
        memory_scope: Sequence[str] = ("users", "{user}"),
        session_scope: str = "{user}:",
    ) -> None:
        if not isinstance(owner_label, str) or not owner_label:
            msg = f"Authorization(owner_label=...) must be a non-empty str, got {owner_label!r}."
            raise ValueError(msg)
        self.owner_label = owner_label
        self.memory_scope = tuple(memory_scope)
        users = [i for i, label in enumerate(self.memory_scope) if "{" in label]
        if len(users) != 1 or self.memory_scope[users[0]] != "{user}":
            msg = (
                "Authorization(memory_scope=...) must hold the label '{user}' once, like "
                f"('users', '{{user}}'), got {memory_scope!r}."
            )
            raise ValueError(msg)
        self._user_at = users[0]
        self.session_scope = session_scope
        self._session_parts = _one_user_field(session_scope, "Authorization(session_scope=...)")
        if not self._session_parts[1]:
            msg = (
                "Authorization(session_scope=...) needs a separator after {user} (like "
                f"'{{user}}:'), so that 'ana' does not own 'anabel:...'; got {session_scope!r}."
            )
            raise ValueError(msg)
        self._handlers: dict[tuple[str, str], Handler] = {}

    def __repr__(self) -> str:
        custom = sorted(f"{r}.{a}" for r, a in self._handlers)
        return f"Authorization(owner_label={self.owner_label!r}, custom={custom})"

    def on(self, resource: str, *actions: str) -> Callable[[Handler], Handler]:
        """Register a handler for ``resource``'s ``actions`` (all of them when none are
        named), replacing :func:`owner_or_admin` there::

            @auth.on("runs", "read")
            def support_reads_all(access: Access) -> bool:
                return owner_or_admin(access) or "support" in access.identity.claims["roles"]
        """
        if resource not in RESOURCES:
            msg = f"unknown resource {resource!r}; the resources are {sorted(RESOURCES)}."
            raise ValueError(msg)
        unknown = sorted(set(actions) - set(RESOURCES[resource]))
        if unknown:
            msg = f"{resource!r} has the actions {list(RESOURCES[resource])}, not {unknown}."
            raise ValueError(msg)

        def register(handler: Handler) -> Handler:
            if not callable(handler):
                msg = f"an authorization handler must be callable, got {handler!r}."
                raise TypeError(msg)
            for action in actions or RESOURCES[resource]:
                self._handlers[(resource, action)] = handler
            return handler

        return register

    async def allows(self, access: Access) -> bool:
        """What the handler for ``access``'s resource and action decides."""
        handler = self._handlers.get(
            (access.resource, access.action), _DEFAULTS.get(access.resource, owner_or_admin)
        )
        decided = handler(access)
        if inspect.isawaitable(decided):
            decided = await decided
        return decided is True

    # -- ownership of each kind ---------------------------------------------------------------

    def namespace_owner(self, namespace: Sequence[str]) -> str | None:
        """The user whose memory scope holds ``namespace`` (``None``: no user's)."""
        scope = self.memory_scope
        if len(namespace) < len(scope):
            return None
        for at, label in enumerate(scope):
            if at != self._user_at and namespace[at] != label:
                return None
        return namespace[self._user_at]

    def user_namespace(self, identity: Identity) -> tuple[str, ...]:
        """``identity``'s memory scope: the namespace prefix their items live under."""
        return tuple(
            identity.id if at == self._user_at else x for at, x in enumerate(self.memory_scope)
        )

    def session_owner(self, session_id: str) -> str | None:
        """The user whose session scope holds ``session_id`` (``None``: no user's)."""
        before, after = self._session_parts
        if not session_id.startswith(before):
            return None
        user, sep, _ = session_id[len(before) :].partition(after)
        return user if sep and user else None

    def user_sessions(self, identity: Identity) -> str:
        """How ``identity``'s session ids start."""
        before, after = self._session_parts
        return f"{before}{identity.id}{after}"


def identity_of(request: Request) -> Identity:
    """The identity ``authenticate`` gave this request."""
    found = request.scope.get("state", {}).get(_STATE_KEY)
    if not isinstance(found, Identity):  # pragma: no cover - the gate always sets it
        raise ServeError(401, "the request was not authenticated.", code="invalid_api_key")
    return found


def identifying(authenticate: Authenticate) -> Callable[[Request], Awaitable[bool]]:
    """``authenticate`` as the app's gate, keeping the identity it returns on the request."""

    async def gate(request: Request) -> bool:
        found: Any = authenticate(request)
        if inspect.isawaitable(found):
            found = await found
        if not found:
            return False
        if isinstance(found, str):
            found = Identity(found)
        if not isinstance(found, Identity):
            raise ServeError(
                401,
                "this server authorizes per user, but its authenticate hook returned "
                f"{type(found).__name__} instead of who is asking; the operator makes it return "
                "an Identity(id=...) or the user id as a str.",
                code="invalid_api_key",
            )
        request.scope.setdefault("state", {})[_STATE_KEY] = found
        return True

    return gate


class Gatekeeper:
    """What the task API's routes ask: ``None`` authorization lets everything through."""

    def __init__(self, auth: Authorization | None, runner: Any) -> None:
        self.auth = auth
        self.runner = runner

    @classmethod
    def for_app(
        cls, authorize: Authorization | None, authenticate: Authenticate | None, runner: Any
    ) -> Gatekeeper:
        """``task_app(authorize=..., authenticate=...)``'s, its options checked."""
        if authorize is not None and not isinstance(authorize, Authorization):
            msg = f"task_app(authorize=...) takes an Authorization, got {type(authorize).__name__}."
            raise TypeError(msg)
        if authorize is not None and authenticate is None:
            msg = (
                "task_app(authorize=...) needs authenticate= to say who asks: a function of the "
                "request returning an Identity(id=...) or the user id (None/False: 401)."
            )
            raise TypeError(msg)
        return cls(authorize, runner)

    def gate(self, authenticate: Authenticate | None) -> Authenticate | None:
        """The app's ``authenticate``: as given, or keeping who asks when authorizing."""
        if self.auth is None or authenticate is None:
            return authenticate
        return identifying(authenticate)

    def check_routes(self, routes: Iterable[str]) -> None:
        """Refuse (when authorizing) routes without a decision in :data:`ROUTES`."""
        if self.auth is not None:
            check_routes(routes)

    def guard(
        self, route: str, endpoint: Callable[[Request], Awaitable[Any]]
    ) -> Callable[[Request], Awaitable[Any]]:
        """``endpoint``, checking first that the caller may act on the run its path names
        (the routes of :data:`ROUTES` on ``runs`` with an ``{id}``); others as they are (their
        endpoints ask for what they touch)."""
        rule = ROUTES.get(route)
        if self.auth is None or rule is None:
            return endpoint
        action = rule[1]
        if rule[0] == "assistants":
            return self._assistant_guard(action, endpoint)
        if rule[0] != "runs" or "{id}" not in route:
            return endpoint

        async def guarded(request: Request) -> Any:
            await self.run(request, action)
            return await endpoint(request)

        return guarded

    def _assistant_guard(
        self, action: str, endpoint: Callable[[Request], Awaitable[Any]]
    ) -> Callable[[Request], Awaitable[Any]]:
        """``endpoint``, refused (403) to a caller the ``assistants`` handler refuses."""
        auth = self.auth
        assert auth is not None

        async def guarded(request: Request) -> Any:
            identity = identity_of(request)
            target = request.path_params.get("id")
            if not await auth.allows(Access(identity, "assistants", action, target, None)):
                raise ServeError(
                    403,
                    f"{identity.id!r} may not {action} assistants here: by default every user "
                    "reads them and only an admin changes them (register a handler with "
                    "Authorization.on('assistants', ...) to decide otherwise).",
                    code="forbidden",
                )
            return await endpoint(request)

        return guarded

    # -- runs and threads ---------------------------------------------------------------------

    async def _record(self, run_id: str) -> Any:
        try:
            return await self.runner.get(run_id)
        except RunNotFoundError as exc:
            raise ServeError(404, str(exc), code="task_not_found") from None
        except BackendUnavailableError as exc:
            raise ServeError(
                503,
                f"the run store is unavailable: {exc}",
                code="busy",
                headers={"Retry-After": "1"},
            ) from None

    async def run(self, request: Request, action: str) -> None:
        """Refuse (404, as if missing) a run the caller may not ``action``."""
        if self.auth is None:
            return
        run_id = request.path_params["id"]
        record = await self._record(run_id)
        owner = record.labels.get(self.auth.owner_label)
        access = Access(identity_of(request), "runs", action, run_id, owner)
        if not await self.auth.allows(access):
            msg = f"no run {run_id!r} in this store; take ids from submit() or list()."
            raise ServeError(404, msg, code="task_not_found")
        request.scope.setdefault("state", {})[_RECORD_KEY] = record

    def checked_record(self, request: Request) -> RunRecord | None:
        """The record :meth:`run` read for this request, if it did: a route that only shows
        the run answers with it instead of reading it a second time."""
        state = request.scope.get("state")
        return None if state is None else state.get(_RECORD_KEY)

    async def create_run(self, request: Request, args: dict[str, Any]) -> None:
        """Stamp the caller as the new run's owner; refuse a thread that is someone else's."""
        auth = self.auth
        if auth is None:
            return
        identity = identity_of(request)
        labels = await self.stamp_owner(request, "runs", dict(args.get("labels") or {}))
        owner = labels[auth.owner_label]
        args["labels"] = labels
        thread_id = args.get("thread_id")
        if thread_id is None:
            return
        page = await self.runner.list(thread_id=thread_id, limit=1)
        first = page.records[0] if page.records else None
        if first is not None:
            thread_owner = first.labels.get(auth.owner_label)
        else:
            thread_owner = owner
            if not await auth.allows(Access(identity, "threads", "create", thread_id, owner)):
                raise self._thread_refused(thread_id)
            thread_owner = await self._claim_thread(thread_id, owner)
            if thread_owner == owner:
                return
        if not await auth.allows(Access(identity, "threads", "update", thread_id, thread_owner)):
            raise self._thread_refused(thread_id)

    def _thread_refused(self, thread_id: str) -> ServeError:
        return ServeError(
            403,
            f"thread {thread_id!r} belongs to another user; start your run on a thread id "
            "of your own (a random one, such as a UUID, is never taken).",
            code="forbidden",
            param="thread_id",
        )

    async def _claim_thread(self, thread_id: str, owner: str) -> str | None:
        """Claim a thread that has no run yet for ``owner``; return whoever holds the claim.

        Two users starting runs on one new thread id at the same instant both find it empty;
        the claim is a ``kind="thread"`` record whose idempotency key is the thread id, so the
        store keeps exactly one of the two inserts (atomically, on every store) and the loser
        learns who won."""
        assert self.auth is not None
        label = self.auth.owner_label
        claim = RunRecord(
            run_id=f"thread_{uuid.uuid4().hex}",
            thread_id=thread_id,
            graph=getattr(self.runner.graph, "name", ""),
            status="succeeded",
            kind="thread",
            labels={label: owner},
            idempotency_key=f"thread:{len(thread_id)}:{thread_id}",
        )
        try:
            stored, _ = await self.runner.store.create(claim)
        except BackendUnavailableError as exc:
            raise ServeError(
                503,
                f"the run store is unavailable: {exc}",
                code="busy",
                headers={"Retry-After": "1"},
            ) from None
        holder: str | None = stored.labels.get(label)
        return holder

    def idempotency_key(self, request: Request, key: str | None) -> str | None:
        """``key`` in the caller's own space: another user's identical key names another run
        (without this, a retry with someone else's key would hand back their run)."""
        if self.auth is None or key is None:
            return key
        user = identity_of(request).id
        return f"{len(user)}:{user}:{key}"

    async def run_labels(self, request: Request, labels: dict[str, str]) -> dict[str, str]:
        """The label filter of a listing, narrowed to the caller's runs (an admin's is not)."""
        return await self.listing_labels(request, "runs", labels)

    # -- resources owned through the owner label (runs, schedules) ----------------------------

    async def stamp_owner(
        self, request: Request, resource: str, labels: dict[str, str]
    ) -> dict[str, str]:
        """``labels`` of a new ``resource`` item with the caller as its owner; a 403 when
        they name someone else (only an admin may) or the ``create`` handler refuses."""
        auth = self.auth
        if auth is None:
            return labels
        identity = identity_of(request)
        asked = labels.get(auth.owner_label)
        if asked is not None and asked != identity.id and not identity.admin:
            raise ServeError(
                403,
                f"the `{auth.owner_label}` label is set by the server to who creates the "
                f"{resource.removesuffix('s')}; leave it out (you are {identity.id!r}).",
                param=f"labels.{auth.owner_label}",
            )
        owner = labels.setdefault(auth.owner_label, identity.id)
        if not await auth.allows(Access(identity, resource, "create", None, owner)):
            raise ServeError(
                403, f"{identity.id!r} may not create {resource} here.", code="forbidden"
            )
        return labels

    async def listing_labels(
        self, request: Request, resource: str, labels: dict[str, str]
    ) -> dict[str, str]:
        """The label filter of a ``resource`` listing, narrowed to the caller's own (an
        admin's is not); a 403 when it asks for someone else's."""
        auth = self.auth
        if auth is None:
            return labels
        identity = identity_of(request)
        if not await auth.allows(Access(identity, resource, "list", dict(labels), identity.id)):
            raise ServeError(
                403, f"{identity.id!r} may not list {resource} here.", code="forbidden"
            )
        if identity.admin:
            return labels
        asked = labels.get(auth.owner_label)
        if asked is not None and asked != identity.id:
            raise ServeError(
                403,
                f"you can list only your own {resource}: drop `label={auth.owner_label}="
                f"{asked}` (you are {identity.id!r}).",
                code="forbidden",
                param="label",
            )
        return {**labels, auth.owner_label: identity.id}

    async def owns(self, request: Request, resource: str, action: str, record: Any) -> bool:
        """Whether the caller may ``action`` ``record`` (a run or schedule record, owned
        through its owner label); always, without authorization."""
        if self.auth is None:
            return True
        owner = record.labels.get(self.auth.owner_label)
        access = Access(identity_of(request), resource, action, record.run_id, owner)
        return await self.auth.allows(access)

    async def visible_runs(self, request: Request, records: Iterable[Any]) -> list[Any]:
        """``records`` less those the ``runs`` ``read`` handler refuses the caller."""
        if self.auth is None:
            return list(records)
        identity = identity_of(request)
        label = self.auth.owner_label
        return [
            r
            for r in records
            if await self.auth.allows(
                Access(identity, "runs", "read", r.run_id, r.labels.get(label))
            )
        ]

    # -- memory -------------------------------------------------------------------------------

    def _memory_refused(self, identity: Identity, namespace: Sequence[str]) -> ServeError:
        assert self.auth is not None
        mine = list(self.auth.user_namespace(identity))
        return ServeError(
            403,
            f"namespace {list(namespace)} is outside your memory, {mine}: {identity.id!r} "
            f"reads and writes namespaces that start with {mine}.",
            code="forbidden",
            param="namespace",
        )

    async def memory(self, request: Request, action: str, namespace: Sequence[str]) -> None:
        """Refuse (403) an item the caller may not ``action``."""
        auth = self.auth
        if auth is None:
            return
        identity = identity_of(request)
        owner = auth.namespace_owner(namespace)
        if not await auth.allows(Access(identity, "memory", action, tuple(namespace), owner)):
            raise self._memory_refused(identity, namespace)

    async def memory_prefix(self, request: Request, prefix: tuple[str, ...]) -> tuple[str, ...]:
        """A listing's prefix, narrowed to the caller's scope when it is wider."""
        auth = self.auth
        if auth is None:
            return prefix
        identity = identity_of(request)
        mine = auth.user_namespace(identity)
        if not identity.admin and mine[: len(prefix)] == prefix:
            prefix = mine  # wider than the caller's scope: narrowed to it
        owner = auth.namespace_owner(prefix)
        if not await auth.allows(Access(identity, "memory", "list", prefix, owner)):
            raise self._memory_refused(identity, prefix)
        return prefix

    async def visible_items(self, request: Request, items: Iterable[Any]) -> list[Any]:
        """Listed ``items`` less those the ``memory`` ``read`` handler refuses the caller."""
        if self.auth is None:
            return list(items)
        identity = identity_of(request)
        owner = self.auth.namespace_owner
        return [
            i
            for i in items
            if await self.auth.allows(
                Access(identity, "memory", "read", i.namespace, owner(i.namespace))
            )
        ]

    async def visible_namespaces(
        self, request: Request, namespaces: Iterable[tuple[str, ...]]
    ) -> list[tuple[str, ...]]:
        """Listed namespaces less those the ``memory`` ``read`` handler refuses."""
        if self.auth is None:
            return list(namespaces)
        identity = identity_of(request)
        owner = self.auth.namespace_owner
        return [
            ns
            for ns in namespaces
            if await self.auth.allows(Access(identity, "memory", "read", ns, owner(ns)))
        ]

    # -- sessions -----------------------------------------------------------------------------

    async def session(self, request: Request, action: str) -> None:
        """Refuse (403) a session the caller may not ``action``."""
        auth = self.auth
        if auth is None:
            return
        identity = identity_of(request)
        session_id = request.path_params["id"]
        owner = auth.session_owner(session_id)
        if not await auth.allows(Access(identity, "sessions", action, session_id, owner)):
            mine = auth.user_sessions(identity)
            raise ServeError(
                403,
                f"session {session_id!r} is not yours: {identity.id!r} reaches the sessions "
                f"whose id starts with {mine!r}.",
                code="forbidden",
            )

    async def session_prefix(self, request: Request, prefix: str) -> str:
        """A session listing's prefix, narrowed to the caller's scope when it is wider."""
        auth = self.auth
        if auth is None:
            return prefix
        identity = identity_of(request)
        mine = auth.user_sessions(identity)
        if not identity.admin and mine.startswith(prefix):
            prefix = mine
        owner = auth.session_owner(prefix)
        if not await auth.allows(Access(identity, "sessions", "list", prefix, owner)):
            raise ServeError(
                403,
                f"you can list only your own sessions: a `prefix` that starts with {mine!r} "
                f"(you are {identity.id!r}).",
                code="forbidden",
                param="prefix",
            )
        return prefix

    async def visible_sessions(self, request: Request, ids: Iterable[str]) -> list[str]:
        """Listed session ids less those the ``sessions`` ``read`` handler refuses."""
        if self.auth is None:
            return list(ids)
        identity = identity_of(request)
        owner = self.auth.session_owner
        return [
            s
            for s in ids
            if await self.auth.allows(Access(identity, "sessions", "read", s, owner(s)))
        ]


def check_routes(routes: Iterable[str]) -> None:
    """Refuse an app whose routes include one without a decision in :data:`ROUTES`."""
    missing = sorted(set(routes) - set(ROUTES))
    if missing:
        msg = (
            f"route(s) {missing} have no authorization decision; add each to "
            "tensorsketch.serve._authorization.ROUTES as (resource, action), or None for a "
            "route every caller may use."
        )
        raise ValueError(msg)
