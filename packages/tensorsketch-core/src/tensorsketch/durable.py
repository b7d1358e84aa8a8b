"""Durable execution: checkpoints at every barrier, the effect journal, the event log, leases.

A checkpoint stores only what changed at its barrier: a field that was replaced is written in
full (``set``), a list that only grew is written as the appended suffix (``append``). The full
state at any checkpoint is the fold of its ancestors, so bytes written per superstep stay flat
as a message history grows, while :meth:`CompiledGraph.get_state` still returns whole values.
A root checkpoint (the first of a thread, or of a fork) is a full snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tensorsketch.errors import (
    BackendUnavailableError,
    CheckpointDecodeError,
    ThreadBusyError,
)
from tensorsketch.events import Event

# Checkpoint ids: the runtime's fast, fork-safe 128-bit random ids (the ones spans use).
from tensorsketch.observability.tracing import new_trace_id as _new_id
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent

if TYPE_CHECKING:
    from tensorsketch.pregel import GraphSpec, Run, Task

__all__ = ["FORMAT_VERSION", "Checkpoint", "RunJournal", "load_chain", "validated_values"]

#: Version of the checkpoint payload layout; a newer one is refused with a clear error.
FORMAT_VERSION = 1
LEASE_TTL = 30.0
#: Seconds a run waits for its lease heartbeat to stop (a renewal is one short round trip).
HEARTBEAT_STOP_WAIT = 2.0


def _drain_task(task: asyncio.Task[None]) -> None:
    """Retrieve a finished background task's outcome so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The state of a thread at one barrier (what ``get_history`` returns).

    :param tasks: the next superstep's tasks in plan order, as ``(node, payload)`` pairs
        (``payload`` is ``None`` for a plain node, the ``Send`` payload for a fan-out
        instance); the order is the barrier's fold order, so it is kept exactly.
    :param parent_id: the checkpoint this one grew from (the checkpoints of a thread and its
        forks form a tree).
    """

    id: str
    thread_id: str
    parent_id: str | None
    step: int
    values: dict[str, Any]
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]
    created_at: float
    source: str = "loop"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def next(self) -> tuple[str, ...]:
        """Names of the plain (non-``Send``) nodes planned next."""
        return tuple(name for name, payload in self.tasks if payload is None)

    @property
    def sends(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """Pending ``Send`` instances as ``(node, payload)`` pairs."""
        return tuple((name, payload) for name, payload in self.tasks if payload is not None)

    @property
    def plan(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The tasks to run next, in plan order (copies, safe to change)."""
        return [(n, None if p is None else dict(p)) for n, p in self.tasks]


def _decode_payload(backend: Backend, stored: StoredCheckpoint) -> dict[str, Any]:
    try:
        payload = backend.serializer.loads(stored.payload)
    except CheckpointDecodeError as exc:
        msg = (
            f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} cannot be "
            f"decoded: {exc}"
        )
        raise CheckpointDecodeError(msg) from exc
    not_ours = (
        f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} is not a "
        "TensorSketch checkpoint (corrupt or written by something else); fork from an "
        "earlier checkpoint or start a new thread."
    )
    if not isinstance(payload, dict) or type(payload.get("v")) is not int:
        raise CheckpointDecodeError(not_ours)
    if payload["v"] > FORMAT_VERSION:
        msg = (
            f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} uses format "
            f"version {payload['v']}, newer than this release understands ({FORMAT_VERSION}); "
            "upgrade tensorsketch-core to resume it."
        )
        raise CheckpointDecodeError(msg)
    if not isinstance(payload.get("changes"), dict) or not isinstance(payload.get("plan"), list):
        raise CheckpointDecodeError(not_ours)
    return payload


def load_chain(
    backend: Backend,
    stored: list[StoredCheckpoint],
    target_id: str | None = None,
    *,
    last_only: bool = False,
) -> list[Checkpoint]:
    """Fold stored deltas into full checkpoints along the chain ending at ``target_id``.

    Returns the chain oldest first (the whole history when ``target_id`` is ``None`` and the
    thread never branched). ``last_only`` returns just the chain's last checkpoint and folds
    appends in place, so rebuilding a state costs time linear in the bytes stored rather than
    a copy of every list at every step (what resuming and ``get_state`` need).
    """
    if not stored:
        return []
    by_id = {s.checkpoint_id: s for s in stored}
    end = by_id.get(target_id) if target_id is not None else stored[-1]
    if end is None:
        return []
    chain: list[StoredCheckpoint] = []
    cursor: StoredCheckpoint | None = end
    while cursor is not None:
        chain.append(cursor)
        payload_base = cursor.parent_id is None or cursor.parent_id not in by_id
        if payload_base:
            break
        cursor = by_id[cursor.parent_id]  # type: ignore[index]
    chain.reverse()
    values: dict[str, Any] = {}
    result: list[Checkpoint] = []
    for s in chain:
        payload = _decode_payload(backend, s)
        if payload.get("base"):
            values = {}
        try:
            _apply_changes(values, payload["changes"], s, in_place=last_only)
            plan = [(str(name), p) for name, p in payload["plan"]]
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            if isinstance(exc, CheckpointDecodeError):
                raise
            msg = (
                f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r} is malformed "
                f"({type(exc).__name__}: {exc}); fork from an earlier checkpoint or start a "
                "new thread."
            )
            raise CheckpointDecodeError(msg) from exc
        if last_only and s is not end:
            continue
        result.append(
            Checkpoint(
                id=s.checkpoint_id,
                thread_id=s.thread_id,
                parent_id=s.parent_id,
                step=s.step,
                values=dict(values),
                tasks=tuple(plan),
                created_at=s.created_at,
                source=payload.get("source", "loop"),
                metadata={"seq": payload.get("seq", 0), **payload.get("meta", {})},
            )
        )
    return result


def _apply_changes(
    values: dict[str, Any], changes: dict[str, Any], s: StoredCheckpoint, *, in_place: bool
) -> None:
    """Apply one checkpoint's ``set``/``append``/``unset`` changes to ``values``.

    ``in_place`` extends lists the fold already owns (every list here was decoded for this
    fold); otherwise each append builds a new list, so earlier checkpoints keep their values.
    """
    for name, change in changes.items():
        op = change[0]
        if op == "set":
            values[name] = change[1]
        elif op == "append":
            current = values.get(name)
            if in_place and isinstance(current, list):
                current.extend(change[1])
            else:
                values[name] = [*(current or ()), *change[1]]
        elif op == "unset":
            values.pop(name, None)
        else:
            msg = (
                f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r} has unknown "
                f"change {op!r} for {name!r}; it was written by a newer release?"
            )
            raise CheckpointDecodeError(msg)


def validated_values(spec: GraphSpec, checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint's values validated into the state's field types.

    ``compile(migrate=fn)`` maps the stored values first. A stored field the state no longer
    declares, or one that no longer validates, is an error naming the fields: dropping or
    coercing it silently would lose data a renamed field still needs. Fields added since
    (with defaults) simply take their defaults.
    """
    where = f"checkpoint {checkpoint.id!r} of thread {checkpoint.thread_id!r}"
    hint = (
        "If the state changed on purpose, pass graph.compile(migrate=fn), where "
        "fn(values: dict) -> dict maps the stored values onto the current fields (see "
        "'Changing the state' in docs/durability.md)."
    )
    stored = checkpoint.values
    if spec.migrate is not None:
        try:
            stored = spec.migrate(dict(stored))
        except Exception as exc:
            msg = (
                f"{where}: compile(migrate=...) failed on its values ({type(exc).__name__}: {exc})."
            )
            raise CheckpointDecodeError(msg) from exc
        if not isinstance(stored, dict):
            msg = f"{where}: compile(migrate=...) must return a dict, got {type(stored).__name__}."
            raise CheckpointDecodeError(msg)
    fields = spec.state_schema.model_fields
    state = spec.state_schema.__name__
    unknown = sorted(name for name in stored if name not in fields)
    if unknown:
        msg = (
            f"{where} stores field(s) {', '.join(map(repr, unknown))} that the state {state} "
            f"no longer declares (renamed or removed?). {hint}"
        )
        raise CheckpointDecodeError(msg)
    values: dict[str, Any] = {}
    failed: list[str] = []
    for name, value in stored.items():
        try:
            values[name] = spec.adapter(name).validate_python(value)
        except Exception as exc:
            failed.append(f"{name!r} ({type(exc).__name__}: {str(exc).splitlines()[-1].strip()})")
    if failed:
        msg = (
            f"{where}: stored field(s) no longer validate as the state {state}'s types: "
            f"{'; '.join(failed)}. {hint}"
        )
        raise CheckpointDecodeError(msg)
    return values


@contextlib.asynccontextmanager
async def _guard(backend: Backend, what: str) -> AsyncIterator[None]:
    """Turn a lost connection into ``BackendUnavailableError`` saying how to resume."""
    try:
        yield
    except (OSError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, BackendUnavailableError):
            raise
        msg = (
            f"{backend.name} backend unavailable while {what}: {type(exc).__name__}: {exc}. "
            "The run stopped at its last checkpoint; invoke the same thread_id again once "
            "the store is back to resume."
        )
        raise BackendUnavailableError(msg) from exc


class RunJournal:
    """The durable side of one run: lease, restore, checkpoints, effects and events.

    A run reaches its store once to open the thread (:meth:`open`: lease, the reads a
    resume needs and, for a new thread, the input checkpoint) and once per barrier
    (:meth:`checkpoint`: the superstep's events and checkpoint in one unit; the last one also
    gives the lease back).
    """

    def __init__(self, backend: Backend, thread_id: str, spec: GraphSpec) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.spec = spec
        self.owner = uuid.uuid4().hex
        self._events: list[Event] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._lost_lease = False
        self._stopping = False
        self._held = False
        #: ``open`` saved the caller's fresh input checkpoint as the thread's first.
        self.created = False
        #: Lease length in seconds: the backend's ``lease_ttl`` (tests shorten it).
        self.ttl = float(getattr(backend, "lease_ttl", LEASE_TTL))

    # -- lease ------------------------------------------------------------------------------

    def _busy(self) -> ThreadBusyError:
        msg = (
            f"thread {self.thread_id!r} is being run by another process right now; only one "
            "writer may run a thread at a time. Wait for it to finish (its lease expires "
            f"{self.ttl:g}s after its owner stops), or use another thread_id."
        )
        return ThreadBusyError(msg)

    def _hold(self) -> None:
        self._held = True
        self._stopping = False
        self._heartbeat = asyncio.get_running_loop().create_task(self._renew())

    async def acquire(self) -> None:
        """Take the thread's lease (or raise :class:`ThreadBusyError`) and keep it renewed."""
        async with _guard(self.backend, "taking the thread lease"):
            ok = await self.backend.acquire_lease(self.thread_id, self.owner, self.ttl)
        if not ok:
            raise self._busy()
        self._hold()

    async def _renew(self) -> None:
        # ``_stopping`` ends the loop even when the driver ate the cancellation (redis-py's
        # ``wait_for`` can swallow it; psycopg_pool can turn it into ``PoolTimeout``).
        while not self._stopping:
            await asyncio.sleep(self.ttl / 3)
            try:
                ok = await self.backend.acquire_lease(self.thread_id, self.owner, self.ttl)
            except Exception:
                continue  # a transient store error: the next checkpoint write will tell
            if not ok and not self._stopping:
                self._lost_lease = True
                return

    async def _stop_heartbeat(self) -> None:
        """Stop renewing: cancel the heartbeat and wait for it, but never for long.

        A renewal stuck on a dead connection may not return at all; the run must not wait on
        it (the flag stops the loop once the call ends, and a renewal that lands after the
        release only keeps the lease for one more TTL, as a crash would). The caller's own
        cancellation is never swallowed here.
        """
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is None:
            return
        self._stopping = True
        heartbeat.cancel()
        await asyncio.wait([heartbeat], timeout=HEARTBEAT_STOP_WAIT)
        if not heartbeat.done():
            heartbeat.add_done_callback(_drain_task)
        else:
            _drain_task(heartbeat)

    async def release(self) -> None:
        """Stop renewing the lease and give it back (if the last checkpoint did not)."""
        await self._stop_heartbeat()
        if self._held:
            self._held = False
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)

    async def finish(self, *, store_down: bool = False) -> None:
        """End of a run, however it ended: store the events left, then release.

        ``store_down`` (the run failed with ``BackendUnavailableError``) skips both: each
        would wait out the store's timeout again before the caller hears of the outage, and
        the resume re-runs the failed superstep anyway (the lease runs out by itself).
        """
        if store_down:
            await self._stop_heartbeat()
            self._held = False
            return
        try:
            await self.flush_events()
        finally:
            await self.release()

    # -- restore ----------------------------------------------------------------------------

    async def open(
        self, run: Run, fresh: list[Task] | None = None
    ) -> list[tuple[str, dict[str, Any] | None]] | None:
        """Take the lease and load the latest checkpoint into ``run``; return its plan, or
        ``None`` for a thread with no checkpoint.

        ``fresh`` is the first superstep planned from ``run``'s current values (defaults and
        input): if the thread turns out to be new, they are saved as its input checkpoint in
        the same round trip and :attr:`created` is set (the return value is then ``None``).
        """
        initial = None
        if fresh is not None:
            initial = self._stored(run, None, fresh, source="input", parent_id=None)
        try:
            async with _guard(self.backend, "opening the thread"):
                opening = await self.backend.open_thread(
                    self.thread_id, self.owner, self.ttl, initial
                )
        except BackendUnavailableError:
            raise  # the store is gone: giving the lease back would only wait on it
        except Exception:
            # The store may have taken the lease before the failure (a row it could not
            # convert): give it back, or every retry would see ThreadBusyError for a whole TTL.
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)
            raise
        if not opening.acquired:
            raise self._busy()
        self._hold()
        if opening.created:
            assert initial is not None
            run.checkpoint_id = run.plan_id = initial.checkpoint_id
            self.created = True
            return None
        chain = load_chain(self.backend, opening.checkpoints, last_only=True)
        if not chain:
            return None
        latest = chain[-1]
        self.adopt(run, latest)
        if opening.last_event_seq is not None:
            run.seq = max(run.seq, opening.last_event_seq + 1)
        return latest.plan

    def adopt(self, run: Run, checkpoint: Checkpoint) -> None:
        """Put a checkpoint's values, step and cursor into a run."""
        run.values = validated_values(self.spec, checkpoint)
        run.step = checkpoint.step
        run.seq = int(checkpoint.metadata.get("seq", 0))
        run.checkpoint_id = checkpoint.id
        # A failed superstep's checkpoint plans the same tasks as the one that planned it:
        # its finished tasks' writes are journaled under that one's id.
        run.plan_id = str(checkpoint.metadata.get("retry_of") or checkpoint.id)
        run.restored = True
        suspended = checkpoint.metadata.get("interrupts")
        if suspended:
            from tensorsketch.interrupts import PendingInterrupt

            run.restored_interrupts = [PendingInterrupt.from_dict(p) for p in suspended]

    # -- checkpoints ------------------------------------------------------------------------

    def _stored(
        self,
        run: Run,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        *,
        source: str,
        parent_id: str | None,
        meta: dict[str, Any] | None = None,
    ) -> StoredCheckpoint:
        """Encode a checkpoint of ``run`` (``changed=None``: a full snapshot)."""
        values = run.values
        changes: dict[str, list[Any]] = {}
        names = list(values) if changed is None else list(changed)
        for name in names:
            appended = None if changed is None else changed[name]
            if appended is not None:
                changes[name] = ["append", appended]
            elif name in values:
                changes[name] = ["set", values[name]]
            else:
                changes[name] = ["unset"]
        payload: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "base": changed is None,
            "source": source,
            "seq": run.seq,
            "changes": changes,
            # Lists, not tuples: plain JSON, no type tag to write or read back.
            "plan": [[task.spec.name, task.payload] for task in tasks],
        }
        if meta:
            payload["meta"] = meta
        return StoredCheckpoint(
            thread_id=self.thread_id,
            checkpoint_id=_new_id(),
            parent_id=parent_id,
            step=run.step,
            created_at=time.time(),
            payload=self.backend.serializer.dumps(payload),
        )

    async def checkpoint(
        self,
        run: Run,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        *,
        source: str = "loop",
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
        final: bool = False,
    ) -> str:
        """Save a checkpoint after a barrier (``changed=None`` writes a full snapshot), with
        the events buffered since the last one.

        ``meta`` is stored with it and read back as ``Checkpoint.metadata`` (a suspended
        run records what it waits for there). ``final`` marks the run's last write: the lease
        is given back in the same unit of work.
        """
        if self._lost_lease:
            msg = (
                f"lost the lease on thread {self.thread_id!r} (another process took it over "
                "after this one stalled); stopping before writing a conflicting checkpoint."
            )
            raise ThreadBusyError(msg)
        stored = self._stored(
            run,
            changed,
            tasks,
            source=source,
            parent_id=parent_id if parent_id is not None else run.checkpoint_id,
            meta=meta,
        )
        events = self._encoded_events()
        release = None
        if final and self._held:
            await self._stop_heartbeat()
            release = self.owner
        async with _guard(self.backend, "saving a checkpoint"):
            await self.backend.commit_step(
                self.thread_id,
                stored,
                events,
                # The input is made durable by the next durable write (see open_thread).
                durable=source != "input",
                release_owner=release,
            )
        if release is not None:
            self._held = False
        run.checkpoint_id = stored.checkpoint_id
        run.plan_id = (meta or {}).get("retry_of") or stored.checkpoint_id
        return stored.checkpoint_id

    # -- effects ----------------------------------------------------------------------------

    async def lookup(self, key: str) -> tuple[bool, Any]:
        async with _guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effect(self.thread_id, key)
        if raw is None:
            return False, None
        return True, self._entry(key, raw)

    def _entry(self, key: str, raw: bytes) -> Any:
        """Decode one journal entry: ``record`` stores ``[value]``, so anything else (a
        string would replay its first character, ``{}`` would crash) is refused by name."""
        try:
            decoded = self.backend.serializer.loads(raw)
        except CheckpointDecodeError as exc:
            msg = f"journal entry {key!r} of thread {self.thread_id!r} cannot be decoded: {exc}"
            raise CheckpointDecodeError(msg) from exc
        if type(decoded) is not list or len(decoded) != 1:
            shape = type(decoded).__name__
            if isinstance(decoded, list):
                shape = f"a list of {len(decoded)} items"
            msg = (
                f"journal entry {key!r} of thread {self.thread_id!r} is malformed (a "
                f"one-item list was expected, found {shape}): it was not written by this "
                "runtime. Fork the thread from a checkpoint before the entry was written, or "
                "start a new thread."
            )
            raise CheckpointDecodeError(msg)
        return decoded[0]

    async def record(self, key: str, value: Any) -> None:
        data = self.backend.serializer.dumps([value])
        async with _guard(self.backend, "recording an effect"):
            await self.backend.record_effect(self.thread_id, key, data)

    async def lookup_many(self, keys: list[str]) -> dict[str, Any]:
        """The recorded values among ``keys``, in one store round trip."""
        async with _guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effects(self.thread_id, keys)
        return {key: self._entry(key, data) for key, data in raw.items()}

    async def record_many(self, items: list[tuple[str, Any]]) -> None:
        dumps = self.backend.serializer.dumps
        encoded = [(key, dumps([value])) for key, value in items]
        async with _guard(self.backend, "recording finished tasks"):
            await self.backend.record_effects(self.thread_id, encoded)

    # -- per-branch commit ------------------------------------------------------------------

    @staticmethod
    def task_key(plan_id: str | None, task: Task) -> str:
        """Where a finished task's writes are journaled: per planning checkpoint, so writes
        computed from one state are never replayed onto another (new input re-plans)."""
        return f"writes:{plan_id}:{task.spec.name}{task.instance}"

    async def finished_writes(self, plan_id: str | None, tasks: list[Task]) -> dict[int, Any]:
        """Writes of the tasks that finished before the run stopped, by task index."""
        keys = [self.task_key(plan_id, task) for task in tasks]
        found = await self.lookup_many(keys)
        return {i: found[key] for i, key in enumerate(keys) if key in found}

    def write_log(self, plan_id: str | None) -> TaskWriteLog:
        return TaskWriteLog(self, plan_id)

    # -- events -----------------------------------------------------------------------------

    def buffer_event(self, event: Event) -> None:
        self._events.append(event)

    def _encoded_events(self) -> list[StoredEvent]:
        if not self._events:
            return []
        events, self._events = self._events, []
        dumps = self.backend.serializer.dumps
        return [StoredEvent(seq=e.seq, payload=dumps(e.to_dict())) for e in events]

    async def flush_events(self) -> None:
        stored = self._encoded_events()
        if not stored:
            return
        async with _guard(self.backend, "appending stream events"):
            await self.backend.commit_step(self.thread_id, None, stored)


class TaskWriteLog:
    """A superstep's finished tasks, journaled while their siblings still run, so a crash or
    a failing sibling costs only the unfinished tasks on resume.

    A finishing task writes its own entry before it counts as done, together with any that
    finished meanwhile (one batch while a write is in flight). The superstep's last task
    writes nothing: the barrier's checkpoint covers it a moment later.
    """

    __slots__ = ("_buffer", "_idle", "_journal", "_plan_id")

    def __init__(self, journal: RunJournal, plan_id: str | None) -> None:
        self._journal = journal
        self._plan_id = plan_id
        self._buffer: list[tuple[str, Any]] = []
        self._idle: asyncio.Event | None = None  # set while no batch is being written

    async def add(self, task: Task, writes: dict[str, Any]) -> None:
        self._buffer.append((RunJournal.task_key(self._plan_id, task), writes))
        if self._idle is not None and not self._idle.is_set():
            return  # the batch in flight is followed by one that includes this entry
        await self._drain()

    async def _drain(self) -> None:
        idle = self._idle = asyncio.Event()
        try:
            while self._buffer:
                batch, self._buffer = self._buffer, []
                # Shielded like an effect record: a cancelled task (its sibling failed)
                # still lets the write in flight finish instead of cutting it off.
                writing = asyncio.ensure_future(self._journal.record_many(batch))
                try:
                    await asyncio.shield(writing)
                except asyncio.CancelledError:
                    await asyncio.wait([writing])
                    raise
        finally:
            idle.set()

    async def close(self, *, keep: bool) -> None:
        """End of the superstep: ``keep`` stores every finished task (a sibling failed);
        otherwise what is not written yet is dropped. No batch is in flight on return (the
        run may be about to give its lease back)."""
        if not keep:
            self._buffer = []
        if self._idle is not None:
            await self._idle.wait()
        if keep and self._buffer:
            await self._drain()
