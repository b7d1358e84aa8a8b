"""The run record and the run store: runs as durable rows beside the checkpoints.

A *run* is one submitted piece of work on a thread (``AsyncRunner.submit``). Its record is the
system of record the runner, the HTTP task API and other worker processes all read: its status,
what a suspended run waits for, who owns it and until when, its idempotency key, times, error,
labels, decisions and pending events.

The run store is an **optional capability** of a backend (the documented eight operations stay
the only required ones): a backend that has one returns it from :meth:`Backend.run_store`;
:func:`run_store` turns a backend without one into a clear error. Every first-party backend
(memory, SQLite, PostgreSQL, Redis) has one.

A store implements six primitive operations over encoded records plus a few index columns; the
lifecycle rules (who may move a run where) live once, here, in :meth:`RunStore.transition` and
:meth:`RunStore.claim`, on top of a compare-and-set on the record's ``version``.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, get_args

from tensorsketch.errors import (
    LeaseLostError,
    RunConflictError,
    RunStoreUnsupportedError,
    ThreadBusyError,
)
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.serializers import Serializer

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.base import Backend

__all__ = [
    "ACTIVE",
    "STATUSES",
    "TERMINAL",
    "RunConflictError",
    "RunKind",
    "RunPage",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "RunStoreUnsupportedError",
    "WaitingFor",
    "check_labels",
    "new_owner_id",
    "owner_is_dead",
    "run_store",
]

#: Version of the run table / key layout written by this release.
RUN_LAYOUT_VERSION: Final = 1

RunStatus = Literal["queued", "running", "suspended", "succeeded", "failed", "cancelled"]
WaitingFor = Literal["approval", "timer", "input", "event", "breakpoint"]
#: ``thread``: who claimed a thread id first (the task API's thread ownership; a finished
#: record no loop picks up, removed with the thread).
RunKind = Literal["run", "schedule", "assistant", "thread"]

STATUSES: Final[tuple[RunStatus, ...]] = get_args(RunStatus)
#: Statuses a run never leaves.
TERMINAL: Final = frozenset({"succeeded", "failed", "cancelled"})
#: Statuses that need an owner working on them (the ones a crashed owner leaves behind).
ACTIVE: Final = frozenset({"queued", "running"})

#: What a store's ``waiting_for`` index column holds for a finished run whose webhook is
#: not delivered yet (:attr:`RunRecord.webhook_pending`); a finished run has no other reason
#: to wait, so the column serves as the undelivered index without a layout change.
UNDELIVERED: Final = "webhook"


def waiting_column(record: RunRecord) -> str | None:
    """The value a store keeps in its ``waiting_for`` index column for ``record``."""
    # RunRecord.webhook_pending, inline: every record write asks (most name no webhook).
    if record.webhook is None or record.webhook_delivery is not None:
        return record.waiting_for
    return UNDELIVERED if record.status in TERMINAL else record.waiting_for


#: Label keys and values: short strings (they end up in indexes and metric labels).
MAX_LABELS: Final = 16
MAX_LABEL_LENGTH: Final = 128


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run as the store keeps it. Build changed copies with :meth:`replace`.

    :param status: ``queued`` → ``running`` → ``succeeded`` / ``failed`` / ``cancelled``, with
        ``suspended`` in between while it waits (``waiting_for``: ``approval``, ``timer`` until
        ``wake_at``, ``input`` for an ``interrupt()`` question, ``event`` for a signal,
        ``breakpoint`` at a static ``interrupt_before`` / ``interrupt_after`` stop, which
        ``AsyncRunner.resume`` continues; its interrupt's ``value`` says
        ``{"when": "before" | "after", "nodes": [...]}``).
    :param owner: the runner process working on a ``queued`` or ``running`` run; it keeps
        ``lease_expires_at`` (Unix time) in the future while alive. A suspended or finished
        run has no owner (but while its completion webhook is being sent: see ``webhook``).
    :param interrupts: what a suspended run waits on (``PendingInterrupt.to_dict()`` each).
    :param decisions: approval decisions received so far, by interrupt id (first one wins).
    :param events: signals accepted but not yet delivered (bounded); ``delivered_event_ids``
        remembers recent event ids for deduplication.
    :param base_checkpoint: the thread's latest checkpoint id when the run first started
        (``""`` for none): a takeover passes the input again only if nothing was written since.
    :param first_seq: the thread's first event ``seq`` of this run (where its event stream
        starts).
    :param active_seconds: time the run spent executing in the segments that ended (what
        ``run_timeout`` bounds; time suspended is not in it); ``segment_started_at`` is when
        the current segment began (a takeover counts the crashed segment up to it).
    :param schedule: for a ``kind="schedule"`` record, what it submits and when.
    :param multitask_strategy: the double-texting policy the run was submitted with
        (``reject``, ``enqueue``, ``interrupt`` or ``rollback``; see ``tensorsketch.runs``).
    :param stop_requested: set on a run in flight when a later submit on its thread
        interrupts it (``interrupt`` or ``rollback``): its runner stops it at the next
        superstep barrier; ``stopped_by`` names the run that asked.
    :param webhook: a URL the run's terminal state is POSTed to (the task API's
        ``task_app(webhooks=...)`` delivers it); ``webhook_delivery`` records how that went
        (``delivered``, ``attempts``, ``status``, ``problem``, ``at``, ``id``). Until it is
        stored, a finished run is in :meth:`RunStore.undelivered`, and a sender delivering
        it holds it as ``owner`` until ``lease_expires_at``.
    :param steering: steering messages sent to the run while it executes
        (``AsyncRunner.steer``) that its agent has not taken yet, oldest first
        (``{"seq", "content", "at"}`` each); ``steering_taken`` is the ``seq`` of the last
        one taken (it stays, so a message is never taken twice).
    :param assistant: for a ``kind="assistant"`` record, the assistant's name and versions;
        for a run, the assistant version it runs with (``{"id", "name", "version",
        "config"}``; see :mod:`tensorsketch.runs.assistants`).
    :param durability: when the run's checkpoints commit (``"sync"``, ``"async"`` or
        ``"exit"``; see :mod:`tensorsketch.durable.modes`): every segment of the run uses it,
        on whichever runner resumes or takes it over.
    :param version: bumped by the store at every write (the compare-and-set token).
    """

    run_id: str
    thread_id: str
    graph: str = ""
    status: RunStatus = "queued"
    kind: RunKind = "run"
    input: Any = None
    output: Any = None
    waiting_for: WaitingFor | None = None
    wake_at: float | None = None
    interrupts: tuple[dict[str, Any], ...] = ()
    decisions: dict[str, Any] = field(default_factory=dict)
    events: tuple[dict[str, Any], ...] = ()
    delivered_event_ids: tuple[str, ...] = ()
    idempotency_key: str | None = None
    owner: str | None = None
    lease_expires_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    started_at: float | None = None
    suspended_at: float | None = None
    finished_at: float | None = None
    error: dict[str, str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    base_checkpoint: str | None = None
    first_seq: int | None = None
    active_seconds: float = 0.0
    segment_started_at: float | None = None
    schedule: dict[str, Any] | None = None
    multitask_strategy: str | None = None
    stop_requested: str | None = None
    stopped_by: str | None = None
    webhook: str | None = None
    webhook_delivery: dict[str, Any] | None = None
    steering: tuple[dict[str, Any], ...] = ()
    steering_taken: int = 0
    assistant: dict[str, Any] | None = None
    durability: str = "sync"
    version: int = 0

    @property
    def terminal(self) -> bool:
        """Whether the run is finished for good."""
        return self.status in TERMINAL

    @property
    def webhook_pending(self) -> bool:
        """Finished, naming a webhook, and no delivery recorded yet: what
        :meth:`RunStore.undelivered` indexes (the write that finishes the run is the one that
        puts it there, so a process killed before delivering loses nothing)."""
        return self.webhook is not None and self.webhook_delivery is None and self.terminal

    def replace(self, **changes: Any) -> RunRecord:
        """A copy with ``changes`` applied (a run's record changes about ten times: this is
        ``dataclasses.replace`` without its per-call walk of the fields, copied slot by slot
        into a :data:`_Draft` by :data:`_draft_of`)."""
        record: RunRecord = _draft_of(self)
        for name, value in changes.items():
            if name not in _FIELD_INDEX:
                msg = f"RunRecord has no field {name!r}."
                raise TypeError(msg)
            setattr(record, name, value)  # a draft's slots take writes
        object.__setattr__(record, "__class__", RunRecord)  # see _Draft
        return record

    @classmethod
    def new(cls, **values: Any) -> RunRecord:
        """``cls(**values)``, built as :meth:`replace` builds its copies (a run's record is
        made at every submit: the frozen ``__init__`` sets each of the forty fields through
        ``object.__setattr__``)."""
        if cls is not RunRecord:  # a subclass has its own layout: its own __init__
            return cls(**values)
        record: RunRecord = _Draft(**values)
        object.__setattr__(record, "__class__", RunRecord)  # see _Draft
        return record

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what the HTTP API returns)."""
        raw = dict(zip(_FIELD_NAMES, _ALL_FIELDS(self), strict=True))
        # Mostly empty: no comprehension (a call each) for those.
        raw["interrupts"] = [dict(i) for i in self.interrupts] if self.interrupts else []
        raw["events"] = [dict(e) for e in self.events] if self.events else []
        raw["delivered_event_ids"] = list(self.delivered_event_ids)
        raw["steering"] = [dict(m) for m in self.steering] if self.steering else []
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunRecord:
        """A record from :meth:`to_dict`'s data or a stored mapping: a field missing from
        ``raw`` takes its default, a key that is not a field is ignored."""
        values = {k: v for k, v in raw.items() if k in _FIELD_INDEX}
        values["interrupts"] = tuple(dict(i) for i in values.get("interrupts") or ())
        values["events"] = tuple(dict(e) for e in values.get("events") or ())
        values["delivered_event_ids"] = tuple(values.get("delivered_event_ids") or ())
        values["steering"] = tuple(dict(m) for m in values.get("steering") or ())
        values["decisions"] = dict(values.get("decisions") or {})
        values["labels"] = dict(values.get("labels") or {})
        return cls.new(**values)

    def encode(self, serializer: Serializer, *, version: int | None = None) -> bytes:
        """The record's bytes in the store (``version`` travels in its own column; pass the
        one it is stored under rather than copying the record to change it).

        Only the fields that differ from their defaults are written (a record has some
        forty, most at their defaults; :meth:`from_dict` restores a missing one), which
        halves both the bytes and the serializer's walk of them. A field counts as at its
        default only when it *is* the default object (``None``, ``0``, ``()``, a literal
        string), so no value's own ``__eq__`` runs; an equal copy is just written.
        """
        raw = _present_fields(self)
        # Tuples would be tagged as such: lists, as from_dict reads them.
        if "interrupts" in raw:
            raw["interrupts"] = list(self.interrupts)
        if "events" in raw:
            raw["events"] = list(self.events)
        if "delivered_event_ids" in raw:
            raw["delivered_event_ids"] = list(self.delivered_event_ids)
        if "steering" in raw:
            raw["steering"] = list(self.steering)
        raw["version"] = self.version if version is None else version
        return serializer.dumps(raw)

    @classmethod
    def decode(
        cls, serializer: Serializer, data: bytes, version: int, lease: float | None = None
    ) -> RunRecord:
        """Rebuild a stored record; ``version`` (and the ``lease`` expiry, when the store keeps
        it in a column that :meth:`RunStore.renew` updates alone) override the encoded ones."""
        raw = serializer.loads(bytes(data))
        if not isinstance(raw, dict):
            msg = f"a stored run record is not a mapping ({type(raw).__name__}); it is corrupt."
            raise TypeError(msg)
        raw["version"] = int(version)
        if lease is not None:
            raw["lease_expires_at"] = float(lease)
        return cls.from_dict(raw)


_FIELDS: Final = dataclasses.fields(RunRecord)
_FIELD_NAMES: Final = tuple(f.name for f in _FIELDS)
_FIELD_INDEX: Final = {name: i for i, name in enumerate(_FIELD_NAMES)}
#: Each field's default object, for :meth:`RunRecord.encode` (a fresh object for a field
#: without one, or with a factory: never the same object as a value).
_DEFAULTS: Final = tuple(
    object() if f.default is dataclasses.MISSING else f.default for f in _FIELDS
)

#: A mutable twin of :class:`RunRecord`: the same slots in the same order, so one memory
#: layout. A record is built as a twin and then given its class (CPython allows assigning
#: ``__class__`` between classes of one layout). The twin's ``__init__`` stores each field
#: directly, where the frozen class's calls ``object.__setattr__`` per field: forty calls a
#: record, its biggest cost when it changes about ten times a run.
_Draft: Final[Any] = dataclasses.make_dataclass(
    "RunRecord",  # what a missing field's TypeError names, as the frozen class's does
    [
        (
            f.name,
            f.type,
            field(default_factory=f.default_factory)
            if f.default_factory is not dataclasses.MISSING
            else field(default=f.default),
        )
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        else (f.name, f.type)
        for f in _FIELDS
    ],
    slots=True,
    eq=False,
    repr=False,
)


def _compile_field_access() -> tuple[
    Callable[[Any], tuple[Any, ...]], Callable[[Any], Any], Callable[[Any], dict[str, Any]]
]:
    """Three functions written out field by field and compiled once, as ``dataclasses``
    writes an ``__init__``: one reading a record's field values into a tuple, in order; one
    copying a record into a new :data:`_Draft`; one mapping the names of the fields that are
    not their default object to their values (what :meth:`RunRecord.encode` writes). Each
    field is then a few bytecodes the interpreter specializes (a direct slot read or write,
    an identity test), where the C iterators they replaced called a function per field
    (``operator.attrgetter`` looks each name up again; ``compress``/``zip``/``map`` with
    ``operator.is_not`` took 2.3 µs a record against 0.9 µs), and the draft's ``__init__``
    bound forty arguments (a one-field ``replace`` went from 2.0 to 1.0 µs)."""
    reads = "".join(f"r.{name}, " for name in _FIELD_NAMES)
    copies = "".join(f"    d.{name} = r.{name}\n" for name in _FIELD_NAMES)
    present = "".join(
        f"    if (v := r.{name}) is not default_{i}:\n        d[{name!r}] = v\n"
        for i, name in enumerate(_FIELD_NAMES)
    )
    source = (
        f"def field_values(r):\n    return ({reads})\n\n"
        f"def draft_of(r):\n    d = new(Draft)\n{copies}    return d\n\n"
        f"def present_fields(r):\n    d = {{}}\n{present}    return d\n"
    )
    namespace: dict[str, Any] = {"new": object.__new__, "Draft": _Draft}
    namespace.update({f"default_{i}": default for i, default in enumerate(_DEFAULTS)})
    # The source holds only the dataclass's own field names (identifiers), nothing given.
    exec(compile(source, f"<{__name__} field access>", "exec"), namespace)
    return namespace["field_values"], namespace["draft_of"], namespace["present_fields"]


#: A record's field values, in order; a record copied into a new draft; the fields of a
#: record that are not at their defaults, by name (see above).
_ALL_FIELDS, _draft_of, _present_fields = _compile_field_access()


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of :meth:`RunStore.list`; pass ``cursor`` back to read the next one."""

    records: list[RunRecord]
    cursor: str | None = None


def check_labels(labels: Mapping[str, Any] | None) -> dict[str, str]:
    """Validate attribution labels: at most 16 non-empty string keys with string values."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        msg = f"`labels` must be a dict of strings, got {type(labels).__name__}."
        raise TypeError(msg)
    if len(labels) > MAX_LABELS:
        msg = f"at most {MAX_LABELS} labels per run, got {len(labels)}."
        raise ValueError(msg)
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not key or len(key) > MAX_LABEL_LENGTH:
            msg = (
                f"label keys must be non-empty strings of at most {MAX_LABEL_LENGTH} "
                f"characters, got {key!r}."
            )
            raise ValueError(msg)
        if not isinstance(value, str) or len(value) > MAX_LABEL_LENGTH:
            msg = (
                f"label {key!r} must have a string value of at most {MAX_LABEL_LENGTH} "
                f"characters, got {value!r:.60}."
            )
            raise ValueError(msg)
        if "\x00" in key or "\x00" in value or "=" in key:
            msg = f"label {key!r} contains a NUL byte or '=' in its key; remove it."
            raise ValueError(msg)
        checked[key] = value
    return checked


def new_owner_id() -> str:
    """An owner id naming this process: ``host:pid:random`` (liveness is checkable on the
    same host)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def owner_is_dead(owner: str) -> bool:
    """Whether ``owner`` names a process of *this* host that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False  # another host (or an unknown format): only its lease can tell
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (killed, not yet reaped by its parent) is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


def _page_limit(limit: int) -> int:
    if type(limit) is not int or not 1 <= limit <= 1000:
        msg = f"`limit` must be an int from 1 to 1000, got {limit!r}."
        raise ValueError(msg)
    return limit


def _statuses(status: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if status is None:
        return None
    found = (status,) if isinstance(status, str) else tuple(status)
    bad = [s for s in found if s not in STATUSES]
    if bad:
        msg = f"unknown run status {bad[0]!r}; one of {', '.join(STATUSES)}."
        raise ValueError(msg)
    return found


def encode_cursor(record: RunRecord) -> str:
    """The position after ``record`` in creation order."""
    return f"{record.created_at!r}/{record.run_id}"


def decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    if cursor is None:
        return None
    created, sep, run_id = cursor.partition("/")
    try:
        value = float(created)
    except ValueError:
        value = math.nan
    if not sep or not run_id or not math.isfinite(value):
        msg = f"`cursor` {cursor!r} is not one a previous page returned; start without it."
        raise ValueError(msg)
    return value, run_id


#: A thread's head: its latest checkpoint id and highest event seq (``None`` for none).
ThreadHead = tuple[str | None, int | None]


class InTurn(NamedTuple):
    """What :meth:`RunStore.create_in_turn` stored and saw."""

    record: RunRecord
    created: bool
    #: The oldest queued or running run of the thread right after the insert.
    queue_head: str | None
    #: The thread's head as the run was stored (``None``: not read).
    thread_head: ThreadHead | None = None


class RunStore(ABC):
    """Run records of one backend. Subclasses implement the primitive operations.

    Records are ordered by ``(created_at, run_id)``; ``version`` is the compare-and-set token
    every write checks and bumps.
    """

    def __init__(self, serializer: Serializer) -> None:
        self.serializer = serializer

    # -- primitives (one unit of work each) -------------------------------------------------

    @abstractmethod
    async def _insert(self, record: RunRecord) -> tuple[RunRecord, bool]:
        """Insert ``record`` (version 1) unless its idempotency key names a run that has
        not failed; return ``(stored, created)``. A failed run's key moves to the new run."""

    @abstractmethod
    async def get(self, run_id: str) -> RunRecord | None:
        """The record, or ``None``."""

    @abstractmethod
    async def _list(
        self,
        statuses: tuple[str, ...] | None,
        thread_id: str | None,
        labels: dict[str, str],
        kind: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        """Up to ``limit`` matching records after the cursor position, in creation order."""

    @abstractmethod
    async def _replace(self, record: RunRecord) -> RunRecord | None:
        """Write ``record`` if the stored version is still ``record.version``; return it with
        the bumped version, or ``None`` when someone wrote in between (or it is gone)."""

    async def _replace_relaxed(self, record: RunRecord) -> RunRecord | None:
        """:meth:`_replace`, allowed to skip waiting for the disk; a store whose writes have
        no such choice keeps the default (the durable write)."""
        return await self._replace(record)

    @abstractmethod
    async def due(self, before: float, limit: int = 100) -> list[RunRecord]:
        """Suspended timer runs (and schedules) with ``wake_at <= before``, earliest first —
        read from an index, never a scan of every run."""

    @abstractmethod
    async def next_wake(self) -> float | None:
        """The earliest ``wake_at`` of a suspended run, from the same index."""

    @abstractmethod
    async def renew(self, owner: str, run_ids: Sequence[str], lease_expires_at: float) -> set[str]:
        """Extend the lease of ``owner``'s active runs among ``run_ids``; return the ids still
        owned (one missing was cancelled or taken over). Bumps their versions."""

    @abstractmethod
    async def counts(self) -> dict[str, int]:
        """Run counts by status, plus ``suspended:<reason>`` per waiting reason."""

    async def _delete_thread(self, thread_id: str) -> tuple[int, builtins.list[RunRecord]]:
        """In one unit: remove every record of ``thread_id`` that is not queued or running
        (with its idempotency key, labels and due-index entry); return how many were removed
        and the active records kept. Not abstract, so a store written before it existed still
        loads; deleting a thread through such a store is refused clearly."""
        msg = (
            f"{type(self).__name__} cannot delete a thread's run records: it does not "
            "implement `_delete_thread`, so `delete_thread` would leave them behind. Add it "
            "(see tensorsketch.runtime.backends.runs.RunStore._delete_thread)."
        )
        raise RunStoreUnsupportedError(msg)

    # -- the operations the runner uses -----------------------------------------------------

    async def create(self, record: RunRecord) -> tuple[RunRecord, bool]:
        """Store a new run; with an idempotency key, the existing run of that key is returned
        instead (``created`` is ``False``) unless it failed."""
        now = time.time()
        fresh = record.replace(
            created_at=record.created_at or now,
            updated_at=now,
            labels=check_labels(record.labels),
            version=1,
        )
        return await self._insert(fresh)

    #: Whether :meth:`_replace_reading_head` reads the thread's head in the write's own unit
    #: of work (a store sharing one database with the checkpoints); the runner then starts
    #: a run in one round trip instead of two.
    reads_thread_head: bool = False

    async def _replace_reading_head(
        self, record: RunRecord, *, durable: bool = True
    ) -> tuple[RunRecord | None, ThreadHead]:
        """:meth:`_replace` (or the relaxed one), also reading — in the same unit of work —
        the head of the record's thread: its latest checkpoint id and highest event seq.
        Only called when :attr:`reads_thread_head` is set; the default says it cannot."""
        msg = f"{type(self).__name__} cannot read a thread's head with its writes."
        raise RunStoreUnsupportedError(msg)

    async def transition_reading_head(
        self,
        run_id: str,
        change: Callable[[RunRecord], RunRecord | None],
        *,
        known: RunRecord,
        durable: bool = True,
    ) -> tuple[RunRecord | None, ThreadHead] | None:
        """One compare-and-set attempt of ``change`` on ``known`` that also reads the
        thread's head (as :meth:`_replace_reading_head`). ``None`` when the store cannot, the
        change declines, or ``known`` was stale; the caller then reads and transitions as
        usual. Otherwise the stored record (``None``: the write lost) and the head."""
        if not self.reads_thread_head:
            return None
        updated = change(known)
        if updated is None:
            return None
        write = updated.replace(version=known.version, updated_at=time.time())
        stored, head = await self._replace_reading_head(write, durable=durable)
        return (stored, head) if stored is not None else None

    async def carry(self, ride: RecordRide) -> RideResult:
        """Do what ``ride`` asks in units of this store's own: the compare-and-set write
        (relaxed), then the version read. What a backend that carries rides in its commits
        does in the commit's unit instead (see :mod:`tensorsketch.runtime.backends.rides`)."""
        stored = None
        if ride.write is not None:
            stored = await self._replace_relaxed(ride.write)
        if stored is not None:
            return RideResult(stored.version, stored)
        current = await self.get(ride.run_id)
        return RideResult(None if current is None else current.version)

    async def create_in_turn(self, record: RunRecord) -> InTurn:
        """:meth:`create`, also naming the run at the head of its thread's queue right after
        (the oldest queued or running run there) — what a runner needs to know whether the
        new run may start at once — and, where :attr:`reads_thread_head`, the thread's head
        as a guess of where the run will begin. The default reads the queue after the
        insert; a store that can do both in one round trip overrides :meth:`_insert_in_turn`."""
        now = time.time()
        fresh = record.replace(
            created_at=record.created_at or now,
            updated_at=now,
            labels=check_labels(record.labels),
            version=1,
        )
        return await self._insert_in_turn(fresh)

    async def _insert_in_turn(self, record: RunRecord) -> InTurn:
        """:meth:`_insert`, then the id of the oldest active run of ``record``'s thread.
        Not abstract: the default composes the two primitives (two round trips)."""
        stored, created = await self._insert(record)
        head = await self._list(tuple(sorted(ACTIVE)), stored.thread_id, {}, "run", None, 1)
        return InTurn(stored, created, head[0].run_id if head else None)

    async def list(
        self,
        *,
        status: str | Iterable[str] | None = None,
        thread_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        kind: RunKind | None = "run",
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Records matching every filter given, oldest first, one page at a time."""
        page = _page_limit(limit)
        rows = await self._list(
            _statuses(status), thread_id, check_labels(labels), kind, decode_cursor(cursor), page
        )
        more = len(rows) == page
        return RunPage(rows, encode_cursor(rows[-1]) if more else None)

    async def transition(
        self,
        run_id: str,
        change: Callable[[RunRecord], RunRecord | None],
        *,
        owner: str | None = None,
        attempts: int = 20,
        known: RunRecord | None = None,
        durable: bool = True,
    ) -> RunRecord | None:
        """Apply ``change`` to the current record with compare-and-set, retrying on a
        concurrent write. ``change`` returns the new record, or ``None`` to leave it as is
        (the method then returns ``None``); it may raise to refuse.

        ``owner``: fence the write on that owner still holding the run (a runner that lost
        its run to a takeover gets :class:`LeaseLostError` and must drop its outcome).
        ``known``: a recent read of the record, tried first (saves a read; a stale one just
        loses the compare-and-set and the record is read again).
        ``durable=False``: the write may skip waiting for the disk (:meth:`_replace_relaxed`)
        — for a change that a later durable write of the same store carries to the disk
        anyway, and whose loss in a power cut before it leaves the run recoverable.
        """
        for attempt in range(attempts):
            current = known if attempt == 0 and known is not None else await self.get(run_id)
            if current is None:
                return None
            if owner is not None and current.owner != owner:
                msg = (
                    f"run {run_id!r} is no longer owned by this runner (owner now "
                    f"{current.owner!r}, status {current.status!r}); its outcome is dropped."
                )
                raise LeaseLostError(msg)
            updated = change(current)
            if updated is None:
                return None
            write = self._replace if durable else self._replace_relaxed
            stored = await write(updated.replace(version=current.version, updated_at=time.time()))
            if stored is not None:
                return stored
        msg = f"run {run_id!r} kept changing under {attempts} attempts to update it; retry."
        raise RunConflictError(msg)

    async def claim(
        self, run_id: str, owner: str, lease_expires_at: float, *, now: float | None = None
    ) -> RunRecord | None:
        """Take an active run whose owner is gone (no owner, lease expired, or a dead process
        on this host) — never a live owner's. Returns the claimed record, or ``None``."""
        at = time.time() if now is None else now

        def take(record: RunRecord) -> RunRecord | None:
            if record.status not in ACTIVE:
                return None
            holder = record.owner
            alive = (
                holder is not None
                and (record.lease_expires_at or 0.0) > at
                and not owner_is_dead(holder)
            )
            if alive:
                return None
            return record.replace(owner=owner, lease_expires_at=lease_expires_at)

        return await self.transition(run_id, take)

    async def _delete(self, record: RunRecord) -> bool:
        """In one unit: remove ``record``'s run unless it is queued or running now (with its
        idempotency key, labels and due-index entry); return whether it was removed. Not
        abstract, so a store written before it existed still loads."""
        msg = (
            f"{type(self).__name__} cannot delete a run record: it does not implement "
            "`_delete` (see tensorsketch.runtime.backends.runs.RunStore._delete)."
        )
        raise RunStoreUnsupportedError(msg)

    async def delete(self, run_id: str) -> bool:
        """Remove one run's record, with its idempotency key, labels and index entries;
        ``False`` when there is none. A queued or running run is refused with
        :class:`RunConflictError` (cancel it first): its runner would carry on against a
        record that is gone. The thread's checkpoints and events are not touched."""
        record = await self.get(run_id)
        if record is None:
            return False
        if record.status not in ACTIVE and await self._delete(record):
            return True
        current = await self.get(run_id)
        if current is not None and current.status in ACTIVE:
            msg = (
                f"cannot delete run {run_id!r}: it is {current.status}. Cancel it "
                "(runner.cancel, or POST /tasks/{id}/cancel) or wait for it to finish first."
            )
            raise RunConflictError(msg)
        return False

    async def delete_thread(self, thread_id: str) -> int:
        """Remove every run record of ``thread_id`` (what ``app.delete_thread`` calls);
        returns how many were removed.

        A thread with a queued or running run is refused with :class:`ThreadBusyError`
        before anything is removed: its runner would otherwise carry on against a record
        that is gone. A run that becomes active while the records are being removed is
        never removed (the store's delete skips active rows in the same unit); the call
        then removes the rest and still raises.
        """
        active = await self._list(tuple(sorted(ACTIVE)), thread_id, {}, None, None, 5)
        if active:
            raise ThreadBusyError(_busy(thread_id, active))
        removed, kept = await self._delete_thread(thread_id)
        if kept:
            raise ThreadBusyError(_busy(thread_id, kept))
        return removed

    async def undelivered(self, limit: int = 100) -> builtins.list[RunRecord]:
        """Finished runs whose webhook is not delivered yet (:attr:`RunRecord.webhook_pending`),
        oldest first. The default reads every finished run; the first-party stores read an
        index the finishing write itself keeps."""
        found: builtins.list[RunRecord] = []
        cursor: str | None = None
        while len(found) < limit:
            page = await self.list(status=TERMINAL, kind="run", limit=200, cursor=cursor)
            found += [r for r in page.records if r.webhook_pending]
            if page.cursor is None:
                break
            cursor = page.cursor
        return found[:limit]

    async def orphans(self, now: float, limit: int = 100) -> builtins.list[RunRecord]:
        """Active runs whose owner is gone (see :meth:`claim`), oldest first."""
        found: builtins.list[RunRecord] = []
        cursor: str | None = None
        while len(found) < limit:
            page = await self.list(status=ACTIVE, kind=None, limit=200, cursor=cursor)
            for record in page.records:
                holder = record.owner
                if (
                    holder is None
                    or (record.lease_expires_at or 0.0) <= now
                    or owner_is_dead(holder)
                ):
                    found.append(record)
            if page.cursor is None:
                break
            cursor = page.cursor
        return found[:limit]

    async def aclose(self) -> None:  # noqa: B027 - the backend owns the connections
        """Nothing to release by default (the backend's ``aclose`` does it)."""


def _busy(thread_id: str, active: Sequence[RunRecord]) -> str:
    runs = ", ".join(f"{r.run_id} ({r.status})" for r in active[:5])
    return (
        f"cannot delete thread {thread_id!r}: it has runs that are queued or running ({runs}). "
        "Cancel them (AsyncRunner.cancel(run_id), or POST /tasks/<id>/cancel on the task "
        "API) or wait for them to finish, then delete the thread."
    )


def run_store(backend: Backend) -> RunStore:
    """The backend's run store, or a clear error naming the backends that have one."""
    store = backend.run_store()
    if store is None:
        msg = (
            f"{type(backend).__name__} has no run store, which AsyncRunner and the task API "
            "need: it implements only the checkpoint operations. Use InMemoryBackend, "
            "SqliteBackend, PostgresBackend or RedisBackend, or give your backend a "
            "`run_store()` that returns a tensorsketch.runtime.backends.runs.RunStore."
        )
        raise RunStoreUnsupportedError(msg)
    return store
