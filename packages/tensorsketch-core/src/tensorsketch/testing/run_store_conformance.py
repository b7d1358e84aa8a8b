"""The behaviour every run store must have, as one reusable pytest suite.

Subclass :class:`RunStoreConformance` with the same ``backend_factory`` fixture as
:class:`~tensorsketch.testing.backend_conformance.BackendConformance` (every call without
arguments reaches the same store; a second handle stands in for a second process)::

    class TestAcmeRuns(RunStoreConformance):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return lambda **kw: AcmeBackend(tmp_path / "store", **kw)

It checks the record round trip, idempotent creation (also racing from two handles), filtered
and paginated listing, compare-and-set writes fenced by owner, claiming orphans (never a live
owner's run, and only one claimer wins), the due-timer index, lease renewal, counts, and
deleting a thread's runs (refused while one is queued or running).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tensorsketch.errors import LeaseLostError, ThreadBusyError
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import RunConflictError, RunRecord, RunStore, run_store
from tensorsketch.testing.backend_conformance import BackendFactory

__all__ = ["RunStoreConformance"]


def _record(**changes: Any) -> RunRecord:
    base = RunRecord(run_id=f"run-{uuid.uuid4().hex[:12]}", thread_id=f"t-{uuid.uuid4().hex[:8]}")
    return base.replace(**changes)


class RunStoreConformance:
    """Subclass with a ``backend_factory`` fixture; every test below then runs on it."""

    @pytest.fixture
    async def backend(self, backend_factory: BackendFactory) -> AsyncIterator[Backend]:
        handle = backend_factory()
        yield handle
        await handle.aclose()

    @pytest.fixture
    def store(self, backend: Backend) -> RunStore:
        return run_store(backend)

    @pytest.mark.asyncio
    async def test_a_record_round_trips_every_field(self, store: RunStore) -> None:
        record = _record(
            graph="support",
            input={"query": "refund order 7", "items": [1, 2.5, None, "ü"]},
            labels={"tenant": "acme", "tier": "gold"},
            idempotency_key=f"key-{uuid.uuid4().hex}",
            owner="host:1:ab",
            lease_expires_at=time.time() + 60,
            interrupts=({"id": "call_1", "kind": "approval", "value": {"tool": "refund"}},),
            error=None,
        )
        stored, created = await store.create(record)
        assert created
        assert stored.version == 1
        assert stored.created_at > 0
        got = await store.get(record.run_id)
        assert got == stored
        assert got.input == record.input
        assert got.labels == {"tenant": "acme", "tier": "gold"}
        assert got.interrupts == record.interrupts
        assert await store.get("run-that-does-not-exist") is None

    @pytest.mark.asyncio
    async def test_creating_in_turn_names_the_head_of_the_threads_queue(
        self, store: RunStore
    ) -> None:
        first = _record(created_at=1000.0)
        thread = first.thread_id
        made = await store.create_in_turn(first)
        assert made.created and made.record.run_id == first.run_id
        assert made.queue_head == first.run_id
        second = _record(thread_id=thread, created_at=1001.0)
        assert (await store.create_in_turn(second)).queue_head == first.run_id
        done = await store.transition(first.run_id, lambda r: r.replace(status="succeeded"))
        assert done is not None
        third = _record(thread_id=thread, created_at=1002.0)
        assert (await store.create_in_turn(third)).queue_head == second.run_id
        keyed = _record(idempotency_key=f"key-{uuid.uuid4().hex}")
        assert (await store.create_in_turn(keyed)).created
        again = await store.create_in_turn(keyed.replace(run_id="run-other"))
        assert not again.created and again.record.run_id == keyed.run_id

    @pytest.mark.asyncio
    async def test_a_write_that_reads_the_thread_head_sees_where_the_thread_stands(
        self, store: RunStore, backend: Backend
    ) -> None:
        if not store.reads_thread_head:
            pytest.skip("this store does not read a thread's head with its writes")
        record, _ = await store.create(_record())
        thread = record.thread_id
        made = await store.create_in_turn(_record(thread_id=thread))
        assert made.thread_head == (None, None)
        await backend.append_events(thread, [StoredEvent(0, b"e0")])
        await backend.save_checkpoint(
            StoredCheckpoint(thread, "cp-1", None, 0, time.time(), b"payload")
        )
        ride = await store.transition_reading_head(
            record.run_id, lambda r: r.replace(status="running"), known=record
        )
        assert ride is not None
        stored, head = ride
        assert stored is not None and stored.status == "running"
        assert head == ("cp-1", 0) == await backend.thread_head(thread)
        # A stale known record loses the compare-and-set: nothing written, the caller reads.
        stale = await store.transition_reading_head(
            record.run_id, lambda r: r.replace(status="succeeded"), known=record
        )
        assert stale is None
        assert (await store.get(record.run_id)) == stored

    @pytest.mark.asyncio
    async def test_records_are_visible_to_another_handle(
        self, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        stored, _ = await store.create(_record(graph="g"))
        other = backend_factory()
        try:
            assert await run_store(other).get(stored.run_id) == stored
        finally:
            await other.aclose()

    @pytest.mark.asyncio
    async def test_an_idempotency_key_returns_the_existing_run_unless_it_failed(
        self, store: RunStore
    ) -> None:
        key = f"key-{uuid.uuid4().hex}"
        first, created = await store.create(_record(idempotency_key=key))
        assert created
        again, created = await store.create(_record(idempotency_key=key))
        assert not created
        assert again.run_id == first.run_id
        await store.transition(first.run_id, lambda r: r.replace(status="failed"))
        retry, created = await store.create(_record(idempotency_key=key))
        assert created
        assert retry.run_id != first.run_id
        once_more, created = await store.create(_record(idempotency_key=key))
        assert not created
        assert once_more.run_id == retry.run_id
        # A finished (not failed) run keeps its key.
        await store.transition(retry.run_id, lambda r: r.replace(status="succeeded"))
        _, created = await store.create(_record(idempotency_key=key))
        assert not created

    @pytest.mark.asyncio
    async def test_concurrent_creates_with_one_key_make_one_run(
        self, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        other = backend_factory()
        try:
            stores = [store, run_store(other)]
            key = f"key-{uuid.uuid4().hex}"
            results = await asyncio.gather(
                *(stores[i % 2].create(_record(idempotency_key=key)) for i in range(12))
            )
            assert sum(created for _, created in results) == 1
            assert len({r.run_id for r, _ in results}) == 1
        finally:
            await other.aclose()

    @pytest.mark.asyncio
    async def test_list_filters_and_pages_in_creation_order(self, store: RunStore) -> None:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        tenant = uuid.uuid4().hex[:8]
        made = []
        for n in range(7):
            record = _record(
                thread_id=thread,
                created_at=1_800_000_000.0 + n // 2,  # ties: ordered by run id
                status="succeeded" if n % 3 == 0 else "queued",
                labels={"tenant": tenant, "even": str(n % 2 == 0)},
            )
            made.append((await store.create(record))[0])
        await store.create(_record(labels={"tenant": "someone-else"}))
        expected = sorted(made, key=lambda r: (r.created_at, r.run_id))

        seen: list[RunRecord] = []
        cursor = None
        while True:
            page = await store.list(thread_id=thread, limit=3, cursor=cursor)
            seen += page.records
            if page.cursor is None:
                break
            cursor = page.cursor
        assert [r.run_id for r in seen] == [r.run_id for r in expected]

        by_label = await store.list(labels={"tenant": tenant, "even": "True"}, limit=100)
        assert {r.run_id for r in by_label.records} == {
            r.run_id for r in made if r.labels["even"] == "True"
        }
        done = await store.list(status="succeeded", thread_id=thread, limit=100)
        assert {r.run_id for r in done.records} == {
            r.run_id for r in made if r.status == "succeeded"
        }
        both = await store.list(status=["succeeded", "queued"], labels={"tenant": tenant})
        assert len(both.records) == 7
        assert (await store.list(thread_id="no-such-thread")).records == []

    @pytest.mark.asyncio
    async def test_bad_list_arguments_are_refused_with_a_clear_error(self, store: RunStore) -> None:
        with pytest.raises(ValueError, match="unknown run status 'done'"):
            await store.list(status="done")
        with pytest.raises(ValueError, match="`limit`"):
            await store.list(limit=0)
        with pytest.raises(ValueError, match="`cursor`"):
            await store.list(cursor="not-a-cursor")
        with pytest.raises(ValueError, match="label"):
            await store.create(_record(labels={"": "x"}))
        with pytest.raises(ValueError, match="string value"):
            await store.create(_record(labels={"n": 3}))

    @pytest.mark.asyncio
    async def test_writes_are_compare_and_set_on_the_version(self, store: RunStore) -> None:
        stored, _ = await store.create(_record())
        moved = await store._replace(stored.replace(status="running"))
        assert moved is not None
        assert moved.version == stored.version + 1
        # A writer holding the old version loses and stores nothing.
        assert await store._replace(stored.replace(status="cancelled")) is None
        current = await store.get(stored.run_id)
        assert current is not None
        assert current.status == "running"
        assert current.version == moved.version

    @pytest.mark.asyncio
    async def test_transition_retries_a_lost_race_and_is_fenced_by_owner(
        self, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        stored, _ = await store.create(_record(owner="me", lease_expires_at=time.time() + 60))
        other = run_store(backend_factory())
        bumps = 0

        def change(record: RunRecord) -> RunRecord:
            return record.replace(attempts=record.attempts + 1)

        async def bump() -> None:
            nonlocal bumps
            await other.transition(stored.run_id, change)
            bumps += 1

        await asyncio.gather(*(bump() for _ in range(5)), *(bump() for _ in range(5)))
        final = await store.get(stored.run_id)
        assert final is not None
        assert final.attempts == bumps == 10
        with pytest.raises(LeaseLostError, match="no longer owned"):
            await store.transition(stored.run_id, change, owner="someone-else")
        assert await store.transition(stored.run_id, lambda r: None) is None

        def refuse(record: RunRecord) -> RunRecord:
            raise RunConflictError("not in this state")

        with pytest.raises(RunConflictError):
            await store.transition(stored.run_id, refuse)

    @pytest.mark.asyncio
    async def test_claim_takes_orphans_but_never_a_live_owners_run(
        self, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        now = time.time()
        live, _ = await store.create(_record(owner="other-host:1:a", lease_expires_at=now + 60))
        lapsed, _ = await store.create(
            _record(status="running", owner="other-host:1:b", lease_expires_at=now - 1)
        )
        unowned, _ = await store.create(_record())
        suspended, _ = await store.create(_record(status="suspended", waiting_for="approval"))
        assert await store.claim(live.run_id, "me", now + 60) is None
        assert await store.claim(suspended.run_id, "me", now + 60) is None
        claimed = await store.claim(lapsed.run_id, "me", now + 60)
        assert claimed is not None
        assert claimed.owner == "me"
        assert claimed.status == "running"
        orphans = {r.run_id for r in await store.orphans(now)}
        assert unowned.run_id in orphans
        assert live.run_id not in orphans
        assert lapsed.run_id not in orphans  # it has a live owner again
        # Two claimers racing: exactly one wins.
        other = run_store(backend_factory())
        wins = await asyncio.gather(
            store.claim(unowned.run_id, "a", now + 60), other.claim(unowned.run_id, "b", now + 60)
        )
        assert sum(w is not None for w in wins) == 1

    @pytest.mark.asyncio
    async def test_the_due_index_returns_suspended_timers_in_wake_order(
        self, store: RunStore
    ) -> None:
        base = 2_000_000_000.0 + uuid.uuid4().int % 1_000_000  # far from other tests' timers
        late, _ = await store.create(
            _record(status="suspended", waiting_for="timer", wake_at=base + 30)
        )
        early, _ = await store.create(
            _record(status="suspended", waiting_for="timer", wake_at=base + 10)
        )
        await store.create(_record(status="suspended", waiting_for="approval"))
        # A wake time on a run that is not suspended is not in the index.
        await store.create(_record(status="running", wake_at=base + 5))
        due = [r.run_id for r in await store.due(base + 20) if r.wake_at and r.wake_at >= base]
        assert due == [early.run_id]
        due = [r.run_id for r in await store.due(base + 40) if r.wake_at and r.wake_at >= base]
        assert due == [early.run_id, late.run_id]
        await store.transition(early.run_id, lambda r: r.replace(status="running"))
        due = [r.run_id for r in await store.due(base + 40) if r.wake_at and r.wake_at >= base]
        assert due == [late.run_id]
        soonest = await store.next_wake()
        assert soonest is not None
        assert soonest <= base + 30

    @pytest.mark.asyncio
    async def test_the_undelivered_index_holds_finished_runs_whose_webhook_is_owed(
        self, backend: Backend, store: RunStore
    ) -> None:
        """The write that finishes a run naming a webhook puts it in the index (in the same
        unit, a ride included); the one recording the delivery takes it out; a claim (an
        owner on the finished run) leaves it in; deleting the run removes it."""
        hook = "https://hooks.example.com/done"
        thread = f"t-{uuid.uuid4().hex[:8]}"
        owed, _ = await store.create(_record(webhook=hook, owner="me"))
        plain, _ = await store.create(_record(owner="me"))
        ridden, _ = await store.create(_record(thread_id=thread, webhook=hook, owner="me"))

        def mine() -> set[str]:
            return {owed.run_id, plain.run_id, ridden.run_id}

        async def listed() -> set[str]:
            return {r.run_id for r in await store.undelivered(1000)} & mine()

        assert await listed() == set()  # not finished yet
        for run in (owed, plain):
            await store.transition(run.run_id, lambda r: r.replace(status="succeeded", owner=None))
        if getattr(backend, "carries_rides", False):
            first = StoredCheckpoint(thread, "c0", None, 0, time.time(), b"in")
            opening = RecordRide(ridden.run_id, ridden.replace(status="running"))
            await backend.open_thread(thread, "me", 30, first, ride=opening)  # type: ignore[call-arg]
            assert opening.result is not None and opening.result.stored is not None
            ending = opening.result.stored.replace(status="failed", owner=None)
            done = RecordRide(ridden.run_id, ending)
            last = StoredCheckpoint(thread, "c1", "c0", 1, time.time(), b"out")
            await backend.commit_step(  # type: ignore[call-arg]
                thread, last, [], release_owner="me", fence="me", ride=done
            )
            assert done.result is not None and done.result.stored is not None
        else:
            await store.transition(ridden.run_id, lambda r: r.replace(status="failed", owner=None))
        assert await listed() == {owed.run_id, ridden.run_id}
        claimed = await store.transition(
            owed.run_id, lambda r: r.replace(owner="sender", lease_expires_at=time.time() + 60)
        )
        assert claimed is not None and claimed.webhook_pending
        assert await listed() == {owed.run_id, ridden.run_id}
        await store.transition(
            owed.run_id, lambda r: r.replace(webhook_delivery={"delivered": True}, owner=None)
        )
        assert await listed() == {ridden.run_id}
        assert await store.delete(ridden.run_id)
        assert await listed() == set()
        counts = await store.counts()
        assert not any(k.endswith(":webhook") for k in counts), counts

    @pytest.mark.asyncio
    async def test_renew_extends_only_the_owners_active_runs(self, store: RunStore) -> None:
        now = time.time()
        mine, _ = await store.create(_record(owner="me", lease_expires_at=now + 5))
        theirs, _ = await store.create(_record(owner="them", lease_expires_at=now + 5))
        finished, _ = await store.create(
            _record(status="cancelled", owner="me", lease_expires_at=now + 5)
        )
        kept = await store.renew("me", [mine.run_id, theirs.run_id, finished.run_id], now + 99)
        assert kept == {mine.run_id}
        got = await store.get(mine.run_id)
        assert got is not None
        assert got.lease_expires_at == pytest.approx(now + 99)
        assert got.version == mine.version + 1
        untouched = await store.get(theirs.run_id)
        assert untouched == theirs

    @pytest.mark.asyncio
    async def test_counts_by_status_and_waiting_reason(self, store: RunStore) -> None:
        before = await store.counts()
        await store.create(_record(status="suspended", waiting_for="approval"))
        await store.create(_record(status="suspended", waiting_for="timer", wake_at=1.0))
        await store.create(_record(status="queued"))
        await store.create(_record(status="suspended", kind="schedule", wake_at=1.0))
        after = await store.counts()

        def grew(name: str) -> int:
            return after.get(name, 0) - before.get(name, 0)

        assert grew("suspended") == 2
        assert grew("suspended:approval") == 1
        assert grew("suspended:timer") == 1
        assert grew("queued") == 1

    @pytest.mark.asyncio
    async def test_delete_thread_removes_its_runs_and_their_index_entries(
        self, backend: Backend, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        key = f"key-{uuid.uuid4().hex}"
        tag = {"deleted": uuid.uuid4().hex[:8]}
        wake = 2_100_000_000.0 + uuid.uuid4().int % 1_000_000
        done, _ = await store.create(
            _record(thread_id=thread, status="succeeded", idempotency_key=key, labels=tag)
        )
        timer, _ = await store.create(
            _record(thread_id=thread, status="suspended", waiting_for="timer", wake_at=wake)
        )
        await store.create(_record(thread_id=thread, status="suspended", waiting_for="approval"))
        other, _ = await store.create(_record(status="succeeded", labels=tag))
        before = await store.counts()
        assert await store.delete_thread(thread) == 3
        assert (await store.list(thread_id=thread)).records == []
        assert await store.get(done.run_id) is None
        assert await store.get(timer.run_id) is None
        assert timer.run_id not in {r.run_id for r in await store.due(wake + 1, limit=1000)}
        assert [r.run_id for r in (await store.list(labels=tag)).records] == [other.run_id]
        after = await store.counts()
        assert before.get("succeeded", 0) - after.get("succeeded", 0) == 1
        assert before.get("suspended:timer", 0) - after.get("suspended:timer", 0) == 1
        assert before.get("suspended:approval", 0) - after.get("suspended:approval", 0) == 1
        # The idempotency key is free again: a new run takes it.
        again, created = await store.create(_record(thread_id=thread, idempotency_key=key))
        assert created
        assert again.run_id != done.run_id
        # Another handle sees the deletion; the other thread's run is untouched.
        handle = backend_factory()
        try:
            second = run_store(handle)
            assert await second.get(done.run_id) is None
            assert await second.get(other.run_id) == other
        finally:
            if handle is not backend:
                await handle.aclose()
        assert await store.delete_thread(f"t-{uuid.uuid4().hex[:8]}") == 0  # unknown: no-op

    @pytest.mark.asyncio
    async def test_delete_removes_one_finished_run_and_refuses_an_active_one(
        self, backend: Backend, store: RunStore, backend_factory: BackendFactory
    ) -> None:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        key = f"key-{uuid.uuid4().hex}"
        tag = {"one": uuid.uuid4().hex[:8]}
        wake = 2_100_000_000.0 + uuid.uuid4().int % 1_000_000
        done, _ = await store.create(
            _record(thread_id=thread, status="succeeded", idempotency_key=key, labels=tag)
        )
        timer, _ = await store.create(
            _record(thread_id=thread, status="suspended", waiting_for="timer", wake_at=wake)
        )
        sibling, _ = await store.create(_record(thread_id=thread, status="failed", labels=tag))
        live, _ = await store.create(
            _record(
                thread_id=thread,
                status="running",
                owner="host:1:ab",
                lease_expires_at=time.time() + 60,
            )
        )
        before = await store.counts()
        assert await store.delete(done.run_id) is True
        assert await store.delete(timer.run_id) is True
        assert await store.get(done.run_id) is None
        assert timer.run_id not in {r.run_id for r in await store.due(wake + 1, limit=1000)}
        assert [r.run_id for r in (await store.list(labels=tag)).records] == [sibling.run_id]
        listed = {r.run_id for r in (await store.list(thread_id=thread)).records}
        assert listed == {sibling.run_id, live.run_id}
        after = await store.counts()
        assert before.get("succeeded", 0) - after.get("succeeded", 0) == 1
        assert before.get("suspended:timer", 0) - after.get("suspended:timer", 0) == 1
        again, created = await store.create(_record(thread_id=thread, idempotency_key=key))
        assert created and again.run_id != done.run_id  # the key is free again
        with pytest.raises(RunConflictError, match=r"it is running\. Cancel it"):
            await store.delete(live.run_id)
        assert await store.get(live.run_id) == live
        assert await store.delete(done.run_id) is False  # gone already
        handle = backend_factory()
        try:
            assert await run_store(handle).get(timer.run_id) is None
        finally:
            if handle is not backend:
                await handle.aclose()

    @pytest.mark.asyncio
    async def test_delete_thread_refuses_a_thread_with_an_active_run(self, store: RunStore) -> None:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        finished, _ = await store.create(_record(thread_id=thread, status="failed"))
        for status in ("queued", "running"):
            live, _ = await store.create(
                _record(
                    thread_id=thread,
                    status=status,
                    owner="host:1:ab",
                    lease_expires_at=time.time() + 60,
                )
            )
            with pytest.raises(ThreadBusyError, match=f"{live.run_id} \\({status}\\).*[Cc]ancel"):
                await store.delete_thread(thread)
            assert await store.get(finished.run_id) == finished  # nothing was removed
            assert await store.get(live.run_id) == live
            await store.transition(live.run_id, lambda r: r.replace(status="cancelled"))
        assert await store.delete_thread(thread) == 3

    @pytest.mark.asyncio
    async def test_the_store_delete_never_removes_an_active_run(self, store: RunStore) -> None:
        # The unit of work itself (what a run that starts during a delete meets): active rows
        # stay and come back as kept, the rest go.
        thread = f"t-{uuid.uuid4().hex[:8]}"
        idle, _ = await store.create(_record(thread_id=thread, status="suspended"))
        live, _ = await store.create(_record(thread_id=thread, status="running", owner="x"))
        removed, kept = await store._delete_thread(thread)
        assert removed == 1
        assert [r.run_id for r in kept] == [live.run_id]
        assert await store.get(idle.run_id) is None
        assert await store.get(live.run_id) == live

    @pytest.mark.asyncio
    async def test_a_record_write_rides_the_threads_own_units(
        self, backend: Backend, store: RunStore
    ) -> None:
        """A backend that carries rides writes a record (compare-and-set) and reads its
        version in the units that open a thread, journal effects and commit a checkpoint;
        a stale write is skipped without failing the unit, and a write fenced by a lease
        the unit no longer holds is refused with it."""
        thread = f"t-{uuid.uuid4().hex[:8]}"
        queued, _ = await store.create(_record(thread_id=thread, owner="me"))
        if not getattr(backend, "carries_rides", False):  # asked once its store is in use
            pytest.skip("this backend carries no rides")
        running = queued.replace(status="running")
        opening = RecordRide(queued.run_id, running)
        first = StoredCheckpoint(thread, "c0", None, 0, time.time(), b"in")
        opened = await backend.open_thread(  # type: ignore[call-arg]
            thread, "me", 30, first, ride=opening
        )
        assert opened.acquired and opened.created
        assert opening.result == RideResult(2, running.replace(version=2))
        assert (await store.get(queued.run_id)).status == "running"  # type: ignore[union-attr]
        # Another owner's opening is refused while the lease is held: its ride writes nothing.
        theirs = RecordRide(queued.run_id, running.replace(owner="them", version=2))
        refused = await backend.open_thread(  # type: ignore[call-arg]
            thread, "them", 30, None, ride=theirs
        )
        assert not refused.acquired
        assert (await store.get(queued.run_id)).owner == "me"  # type: ignore[union-attr]
        # Somebody else writes the record: the next unit's read sees the new version.
        steered = await store.transition(queued.run_id, lambda r: r.replace(labels={"a": "b"}))
        assert steered is not None and steered.version == 3
        reading = RecordRide(queued.run_id)
        await backend.record_effects(  # type: ignore[call-arg]
            thread, [("k", b"v")], fence="me", ride=reading
        )
        assert reading.result == RideResult(3)
        # A write from the stale version 2 is skipped; the checkpoint commits all the same.
        stale = RecordRide(queued.run_id, running.replace(status="succeeded", version=2))
        second = StoredCheckpoint(thread, "c1", "c0", 1, time.time(), b"out")
        await backend.commit_step(thread, second, [], fence="me", ride=stale)  # type: ignore[call-arg]
        assert stale.result == RideResult(3)
        assert [c.checkpoint_id for c in await backend.list_checkpoints(thread)] == ["c0", "c1"]
        # The last commit: the outcome rides it, with the lease given back.
        done = RecordRide(queued.run_id, steered.replace(status="succeeded", owner=None))
        third = StoredCheckpoint(thread, "c2", "c1", 2, time.time(), b"end")
        await backend.commit_step(  # type: ignore[call-arg]
            thread, third, [], release_owner="me", fence="me", ride=done
        )
        assert done.result is not None and done.result.version == 4
        ended = await store.get(queued.run_id)
        assert ended is not None and ended.status == "succeeded" and ended.version == 4
        assert ended.labels == {"a": "b"}
        counts = await store.counts()
        assert counts.get("succeeded", 0) >= 1
        # A unit whose lease is gone stores nothing, the ride's write included.
        if backend.fences_writes:
            later = RecordRide(queued.run_id, ended.replace(status="failed"))
            fourth = StoredCheckpoint(thread, "c3", "c2", 3, time.time(), b"late")
            with pytest.raises(LeaseLostError):
                await backend.commit_step(  # type: ignore[call-arg]
                    thread, fourth, [], fence="me", ride=later
                )
            assert (await store.get(queued.run_id)).status == "succeeded"  # type: ignore[union-attr]

    @pytest.mark.asyncio
    async def test_a_folded_opening_stores_the_run_and_leases_only_the_head_of_the_queue(
        self, backend: Backend, store: RunStore
    ) -> None:
        """A backend that folds submits (``folds_submits``) stores a ride's ``insert`` in the
        opening's unit; the lease, the input checkpoint and the ride's write only where that
        run heads its thread's queue. A refused opening still answers the ride."""
        thread = f"t-{uuid.uuid4().hex[:8]}"
        await store.create(_record(thread_id="warm", owner="me"))  # its tables are in use
        if not getattr(backend, "folds_submits", False):
            pytest.skip("this backend does not fold submits")
        at = time.time()
        first = _record(thread_id=thread, owner="me", created_at=at, updated_at=at, version=1)
        ride = RecordRide(first.run_id, first.replace(status="running"), insert=first)
        checkpoint = StoredCheckpoint(thread, "c0", None, 0, time.time(), b"in")
        opened = await backend.open_thread(  # type: ignore[call-arg]
            thread, "me", 30, checkpoint, ride=ride
        )
        assert opened.acquired and opened.created
        assert ride.result is not None and ride.result.version == 2
        assert (await store.get(first.run_id)).status == "running"  # type: ignore[union-attr]
        # A second run on the thread, even by the lease's holder: stored queued; not its
        # turn, so no lease, no checkpoint, no `running`.
        second = _record(thread_id=thread, owner="me", created_at=at + 1, updated_at=at + 1)
        second = second.replace(version=1)
        behind = RecordRide(second.run_id, second.replace(status="running"), insert=second)
        late = StoredCheckpoint(thread, "c9", None, 0, time.time(), b"late")
        refused = await backend.open_thread(  # type: ignore[call-arg]
            thread, "me", 30, late, ride=behind
        )
        assert not refused.acquired
        assert behind.result is not None and behind.result.stored is None
        stored = await store.get(second.run_id)
        assert stored is not None and stored.status == "queued" and stored.version == 1
        assert [c.checkpoint_id for c in await backend.list_checkpoints(thread)] == ["c0"]
