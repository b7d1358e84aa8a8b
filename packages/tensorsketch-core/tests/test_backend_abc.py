"""A backend written from the documentation's eight operations instantiates and works: the
lease has a default that gives one writer per thread within the process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tensorsketch import END, START, Context, Graph, Node, Schema, ThreadBusyError
from tensorsketch.errors import ForkEffectError
from tensorsketch.interrupts import interrupt, run_info
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing.backend_conformance import BackendConformance, BackendFactory


class EightOpsBackend(Backend):
    """Exactly the eight documented operations, over plain dictionaries."""

    name = "eight-ops"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoints: dict[str, list[StoredCheckpoint]] = {}
        self.effects: dict[tuple[str, str], bytes] = {}
        self.events: dict[str, list[StoredEvent]] = {}

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        self.checkpoints.setdefault(checkpoint.thread_id, []).append(checkpoint)

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        found = self.checkpoints.get(thread_id)
        return found[-1] if found else None

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        found = self.checkpoints.get(thread_id, [])
        return next((c for c in found if c.checkpoint_id == checkpoint_id), None)

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        return list(self.checkpoints.get(thread_id, []))

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        self.effects.setdefault((thread_id, key), value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        return self.effects.get((thread_id, key))

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        self.events.setdefault(thread_id, []).extend(events)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        return [e for e in self.events.get(thread_id, []) if e.seq >= since]


class NoSuperInit(EightOpsBackend):
    """Forgot ``super().__init__()``: the lease still works (the table is made on first use)."""

    def __init__(self) -> None:
        from tensorsketch.serializers import JsonSerializer

        self.serializer = JsonSerializer()
        self.checkpoints, self.effects, self.events = {}, {}, {}


class Job(Schema):
    order: str = ""
    charged: str = ""


CHARGES: list[str] = []
FAIL_AFTER_CHARGE: set[str] = set()


class Charge(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        charged: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        def charge() -> str:
            CHARGES.append(inp.order)
            return f"charged {inp.order}"

        charged = await ctx.step("charge", charge)
        if inp.order in FAIL_AFTER_CHARGE:
            FAIL_AFTER_CHARGE.discard(inp.order)
            raise RuntimeError("crash after the charge")
        return self.Out(charged=charged)


APP = Graph(Job).add(Charge).edge(START, "Charge").edge("Charge", END).compile()


async def test_a_backend_of_the_eight_operations_runs_a_graph_durably_and_resumes() -> None:
    backend = EightOpsBackend()
    CHARGES.clear()
    FAIL_AFTER_CHARGE.add("A-1")
    with pytest.raises(RuntimeError, match="crash after the charge"):
        await APP.invoke({"order": "A-1"}, thread_id="t", backend=backend)
    out = await APP.invoke(thread_id="t", backend=backend)  # resume: no input passed again
    assert out.charged == "charged A-1"
    assert CHARGES == ["A-1"]  # the journaled effect was replayed, not repeated
    state = await APP.aget_state("t", backend)
    assert state is not None and state.charged == "charged A-1"
    assert len(await backend.list_checkpoints("t")) >= 2


@pytest.mark.parametrize("make", [EightOpsBackend, NoSuperInit])
async def test_default_lease_gives_one_writer_per_thread_in_process(make: Any) -> None:
    backend = make()
    assert await backend.acquire_lease("t", "alice", 30)
    assert not await backend.acquire_lease("t", "bob", 30)
    assert await backend.acquire_lease("t", "alice", 30)  # renewal
    assert await backend.acquire_lease("other", "bob", 30)  # leases are per thread
    await backend.release_lease("t", "bob")  # not bob's: no effect
    assert not await backend.acquire_lease("t", "bob", 30)
    await backend.release_lease("t", "alice")
    assert await backend.acquire_lease("t", "bob", 0.05)
    await asyncio.sleep(0.1)  # bob "crashed": his lease lapses and can be taken over
    assert await backend.acquire_lease("t", "carol", 30)


async def test_a_second_runner_on_a_leased_thread_is_refused() -> None:
    backend = EightOpsBackend()
    assert await backend.acquire_lease("busy", "someone-else", 30)
    with pytest.raises(ThreadBusyError, match="'busy'"):
        await APP.invoke({"order": "B-2"}, thread_id="busy", backend=backend)
    await backend.release_lease("busy", "someone-else")
    out = await APP.invoke({"order": "B-2"}, thread_id="busy", backend=backend)
    assert out.charged == "charged B-2"
    assert await backend.acquire_lease("busy", "next", 30)  # the finished run gave it back


class TestEightOpsBackend(BackendConformance):
    """The whole shared suite: one object stands in for the store (the lease is in-process)."""

    thread_admin = False  # the eight operations only: admin must fail clearly

    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        shared = EightOpsBackend()

        def make(**kwargs: Any) -> Backend:
            return EightOpsBackend(**kwargs) if kwargs else shared

        return make


class OwnInit(EightOpsBackend):
    """Written like the docs' example: an ``__init__`` of its own that never calls
    ``super().__init__()`` and sets no serializer."""

    def __init__(self) -> None:
        self.checkpoints, self.effects, self.events = {}, {}, {}


async def test_a_backend_that_skips_super_init_gets_the_default_serializer() -> None:
    backend = OwnInit()
    CHARGES.clear()
    out = await APP.invoke({"order": "B-1"}, thread_id="t", backend=backend)
    assert out.charged == "charged B-1"
    state = await APP.aget_state("t", backend)
    assert state is not None and state.charged == "charged B-1"
    assert type(backend.serializer).__name__ == "MsgpackSerializer"
    assert backend.serializer is backend.serializer  # made once, then kept
    assert OwnInit().serializer is not backend.serializer  # each backend its own


# -- forks on a store of the eight operations (#47) ---------------------------------------------

PAID: list[str] = []
FAIL_ONCE: set[str] = set()


class Both(Schema):
    order: str = ""
    a: str = ""
    b: str = ""


class PayA(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        a: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        def pay() -> str:
            PAID.append(f"a:{ctx.thread_id}")
            return "paid a"

        return self.Out(a=await ctx.step("pay-a", pay))


class PayB(Node):
    """Pays, fails once after paying (a crash), then asks before finishing."""

    class In(Schema):
        order: str

    class Out(Schema):
        b: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        def pay() -> str:
            PAID.append(f"b:{ctx.thread_id}")
            return "paid b"

        paid = await ctx.step("pay-b", pay)
        if inp.order in FAIL_ONCE:
            FAIL_ONCE.discard(inp.order)
            raise RuntimeError("crash after paying b")
        answer = await interrupt(ctx, "ship?")
        return self.Out(b=f"{paid}:{answer}")


TWO = (
    Graph(Both)
    .add(PayA)
    .add(PayB)
    .edge(START, "PayA")
    .edge(START, "PayB")
    .edge("PayA", END)
    .edge("PayB", END)
    .compile()
)


async def _suspended_after_a_resume(backend: Backend, thread: str) -> str:
    """PayA finishes, PayB pays and fails; the resume runs PayB only (PayA's writes are
    journaled), which suspends: the fork point, in the superstep both paid in."""
    FAIL_ONCE.add(thread)
    with pytest.raises(RuntimeError, match="crash after paying b"):
        await TWO.invoke({"order": thread}, thread_id=thread, backend=backend)
    out = await TWO.invoke(thread_id=thread, backend=backend)
    assert run_info(out).suspended
    assert sorted(PAID) == [f"a:{thread}", f"b:{thread}"]
    return (await TWO.aget_history(thread, backend))[-1].id


@pytest.mark.parametrize("make", [EightOpsBackend, InMemoryBackend])
async def test_a_fork_reusing_what_its_origin_paid_before_the_fork_point_pays_nothing(
    make: Any,
) -> None:
    backend, thread = make(), f"pay-{make.__name__}"
    PAID.clear()
    suspended = await _suspended_after_a_resume(backend, thread)
    out = await TWO.fork(backend, thread, suspended, "forked", effects="reuse")
    assert run_info(out).suspended and [f"a:{thread}", f"b:{thread}"] == PAID


async def test_a_rerunning_fork_refuses_an_effect_it_cannot_place_before_or_after_the_fork_point() -> (
    None
):
    """The eight operations cannot list the journal: PayA's payment, journaled before the
    resume that suspended, is in no list the fork point has. Rerunning it could pay twice
    for what ran before the fork point, so the fork refuses, by name, instead."""
    backend, thread = EightOpsBackend(), "pay-rerun"
    PAID.clear()
    suspended = await _suspended_after_a_resume(backend, thread)
    with pytest.raises(ForkEffectError, match=r"ctx\.step 'pay-a'.*cannot list its journal"):
        await TWO.fork(backend, thread, suspended, "forked", effects="rerun")
    assert [f"a:{thread}", f"b:{thread}"] == PAID  # nothing ran twice


async def test_a_rerunning_fork_on_a_listing_store_inherits_what_ran_before_the_fork_point() -> (
    None
):
    backend, thread = InMemoryBackend(), "pay-rerun-listed"
    PAID.clear()
    suspended = await _suspended_after_a_resume(backend, thread)
    out = await TWO.fork(backend, thread, suspended, "forked", effects="rerun")
    assert run_info(out).suspended and [f"a:{thread}", f"b:{thread}"] == PAID
