"""Engine-side durability rules that are not about one store: serializer safety, effects
recorded under cancellation, lease length and lease loss."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import pickle
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, field_validator

from tensorsketch import (
    END,
    START,
    CheckpointDecodeError,
    Context,
    Graph,
    LeaseLostError,
    Node,
    NotDurableWarning,
    Reducer,
    Schema,
    Send,
    ThreadBusyError,
)
from tensorsketch.durable import RunJournal, read_checkpoint, schema_fingerprint
from tensorsketch.pregel.restore import SpecCodec
from tensorsketch.runtime.backends.base import StoredCheckpoint
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serializers import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    resolve_serializer,
)


class Note(Schema):
    text: str = ""


class Write(Node):
    class In(Schema):
        text: str

    class Out(Schema):
        text: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(text=inp.text + "!")


NOTE = Graph(Note).add(Write).edge(START, "Write").edge("Write", END).compile()


class _Exploit:
    """Unpickling this runs code: it writes a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (Path(self.marker), "pwned"))


# -- the serializer seam -------------------------------------------------------------------------


def test_serializer_names() -> None:
    assert isinstance(resolve_serializer(None), MsgpackSerializer)
    assert isinstance(resolve_serializer("json"), JsonSerializer)
    assert isinstance(resolve_serializer("pickle"), PickleSerializer)
    with pytest.raises(ValueError, match="unknown serializer 'yaml'"):
        resolve_serializer("yaml")
    for backend in (InMemoryBackend(), SqliteBackend()):
        assert type(backend.serializer) is MsgpackSerializer  # safe by default
    assert isinstance(SqliteBackend(serializer="pickle").serializer, PickleSerializer)


async def test_default_store_never_unpickles(tmp_path: Path) -> None:
    """A pickle planted in a store with the default serializer is refused, and its code never
    runs."""
    marker = tmp_path / "marker"
    backend = SqliteBackend(tmp_path / "store.db")
    planted = pickle.dumps(_Exploit(str(marker)))
    await backend.save_checkpoint(StoredCheckpoint("victim", "cp-1", None, 0, 0.0, planted))
    with pytest.raises(CheckpointDecodeError, match="'cp-1' of thread 'victim'"):
        await NOTE.invoke(thread_id="victim", backend=backend)
    assert not marker.exists()
    await backend.aclose()


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"[1, 2]", "is not a TensorSketch checkpoint"),
        (b'{"v": "2", "changes": {}, "plan": []}', "is not a TensorSketch checkpoint"),
        (b'{"v": 2, "changes": [], "plan": []}', "is not a TensorSketch checkpoint"),
        (b'{"v": 2, "changes": {}, "plan": {}}', "is not a TensorSketch checkpoint"),
        (b'{"v": 2, "changes": {}}', "is not a TensorSketch checkpoint"),
        (b'{"v": 99, "changes": {}, "plan": []}', "format version 99, newer than this release"),
    ],
)
async def test_a_row_that_is_not_a_checkpoint_is_refused_by_name(payload: bytes, says: str) -> None:
    """Rows of another shape (valid JSON, wrong layout) fail reads with the row named."""
    backend = InMemoryBackend()
    await backend.save_checkpoint(StoredCheckpoint("t", "cp-9", None, 0, 0.0, payload))
    with pytest.raises(CheckpointDecodeError, match=f"'cp-9' of thread 't' .*{says}"):
        await NOTE.aget_state("t", backend)


def test_json_rebuilds_only_known_models() -> None:
    codec = JsonSerializer()
    data = codec.dumps({"note": Note(text="hi"), "at": (1, 2), "raw": b"\x00\xff"})
    assert codec.loads(data) == {"note": Note(text="hi"), "at": (1, 2), "raw": b"\x00\xff"}
    crafted = json.dumps({"$t": "model", "c": "not_a_real_module_xyz:Thing", "v": {}}).encode()
    with pytest.raises(CheckpointDecodeError, match="not registered"):
        codec.loads(crafted)
    assert "not_a_real_module_xyz" not in sys.modules
    strict = JsonSerializer(strict=True)
    with pytest.raises(CheckpointDecodeError, match="not registered"):
        strict.loads(data)  # even an imported model must be listed in strict mode
    assert JsonSerializer(types=[Note], strict=True).loads(data)["note"] == Note(text="hi")


def test_pickle_is_opt_in_and_says_so() -> None:
    backend = InMemoryBackend(serializer="pickle")
    assert backend.describe() == {"backend": "memory", "serializer": "pickle"}
    with pytest.raises(CheckpointDecodeError, match="cannot be loaded"):
        backend.serializer.loads(b"not a pickle")


# -- effects and cancellation -----------------------------------------------------------------


class SlowJournal(InMemoryBackend):
    """Records take a while, as over a network."""

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        await asyncio.sleep(0.05)
        await super().record_effect(thread_id, key, value)


RAN: dict[str, int] = {}


class Fan(Schema):
    jobs: list[str] = []
    done: Annotated[list[str], Reducer(operator.add)] = []
    crash: bool = True


class Work(Node):
    class In(Schema):
        jobs: list[str]
        crash: bool

    class Out(Schema):
        done: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        job = inp.jobs[0]
        if job == "fail" and inp.crash:
            await asyncio.sleep(0.01)  # the sibling's effect has run, its record is in flight
            msg = "worker failed"
            raise RuntimeError(msg)

        def pay() -> str:
            RAN[job] = RAN.get(job, 0) + 1
            return f"paid {job}"

        return self.Out(done=[await ctx.step("pay", pay)])


def _fan(state: Fan) -> list[Send]:
    return [Send("Work", {"jobs": [j]}) for j in state.jobs]


FAN = Graph(Fan).add(Work).conditional(START, _fan).edge("Work", END).compile()


async def test_sibling_failure_does_not_lose_a_completed_effect() -> None:
    """When one fan-out worker fails, the others are cancelled — but an effect that already
    happened is still recorded, so the resume does not run it again."""
    RAN.clear()
    backend = SlowJournal()
    with pytest.raises(RuntimeError, match="worker failed"):
        await FAN.invoke({"jobs": ["card", "fail"]}, thread_id="t", backend=backend)
    assert RAN == {"card": 1}
    out = await FAN.invoke({"crash": False}, thread_id="t", backend=backend)
    assert RAN == {"card": 1, "fail": 1}  # the card was not charged a second time
    assert out.done == ["paid card", "paid fail"]


# -- leases -----------------------------------------------------------------------------------


def test_lease_length_comes_from_the_backend() -> None:
    backend = SqliteBackend(lease_ttl=2.5)
    assert backend.lease_ttl == 2.5
    assert RunJournal(backend, "t", SpecCodec(NOTE.spec, backend.serializer)).ttl == 2.5
    memory = InMemoryBackend()
    assert RunJournal(memory, "t", SpecCodec(NOTE.spec, memory.serializer)).ttl == 30.0
    memory.lease_ttl = 0.5
    assert RunJournal(memory, "t", SpecCodec(NOTE.spec, memory.serializer)).ttl == 0.5


async def test_busy_error_names_the_thread_and_the_wait() -> None:
    backend = InMemoryBackend()
    backend.lease_ttl = 7
    assert await backend.acquire_lease("busy", "someone-else", 7)
    with pytest.raises(ThreadBusyError, match=r"thread 'busy' .*expires 7s after") as info:
        await NOTE.invoke({"text": "x"}, thread_id="busy", backend=backend)
    # After a crash the owner is gone, not busy: say so, and name the setting that is the wait.
    assert "may be gone" in str(info.value)
    assert "`lease_ttl`" in str(info.value)


class Stall(Node):
    class In(Schema):
        text: str

    class Out(Schema):
        text: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        backend = STALLED[ctx.thread_id or ""]
        with backend._lease_guard():  # another runner takes the thread over while this stalls
            backend._leases[ctx.thread_id or ""] = ("usurper", float("inf"))
        await asyncio.sleep(backend.lease_ttl)  # long enough for the heartbeat to notice
        return self.Out(text="late")


STALLED: dict[str, InMemoryBackend] = {}
STALL = Graph(Note).add(Stall).edge(START, "Stall").edge("Stall", END).compile()


async def test_a_runner_that_lost_its_lease_stops_before_writing() -> None:
    backend = InMemoryBackend()
    backend.lease_ttl = 0.15
    STALLED["t"] = backend
    with pytest.raises(LeaseLostError, match="no longer holds the lease on thread 't'"):
        await STALL.invoke({"text": "x"}, thread_id="t", backend=backend)
    history = await STALL.aget_history("t", backend)
    assert [c.source for c in history] == ["input"]  # the stale runner wrote nothing more


# -- the documented example ----------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "durable_resume.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from a source checkout")
async def test_durable_resume_example_charges_exactly_once(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        cwd=tmp_path,
        env={**os.environ, "TS_EXAMPLE_TMP": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "worker exited with -9" in text  # the worker really died mid-run
    assert "checkpointed state before resuming: charged=0" in text
    assert "resumed: user-42 paid 42.00 EUR" in text
    assert "payment API calls: 1" in text
    assert (tmp_path / "payment-api.log").read_text().splitlines() == ["charged user-42 4200"]


# -- opening a thread -----------------------------------------------------------------------------

ROUTES: list[str] = []


def _pick(state: Note) -> str:
    ROUTES.append(state.text)
    return "Write"


ROUTED = Graph(Note).add(Write).router(START, _pick).edge("Write", END).compile()


class Opening(InMemoryBackend):
    """Records which batched units the runtime used (the store itself is the real default)."""

    def __init__(self) -> None:
        super().__init__()
        self.initials: list[StoredCheckpoint | None] = []
        self.durable: list[bool] = []

    async def open_thread(
        self, thread_id: str, owner: str, ttl: float, initial: StoredCheckpoint | None = None
    ) -> Any:
        self.initials.append(initial)
        return await super().open_thread(thread_id, owner, ttl, initial)

    async def commit_step(self, thread_id: str, checkpoint: Any, events: Any, **kw: Any) -> None:
        self.durable.append(kw.get("durable", True))
        await super().commit_step(thread_id, checkpoint, events, **kw)


async def test_new_thread_saves_its_input_with_the_lease() -> None:
    backend = Opening()
    out = await NOTE.invoke({"text": "hi"}, thread_id="t", backend=backend)
    assert out.text == "hi!"
    assert backend.initials[0] is not None and backend.initials[0].step == 0
    assert backend.durable == [True]  # only the superstep's commit; the input rode the open
    history = await NOTE.aget_history("t", backend)
    assert [c.source for c in history] == ["input", "loop"]
    assert history[0].values == {"text": "hi"}


async def test_routed_entry_runs_its_router_only_for_the_real_plan() -> None:
    """A routing function at START is user code: it is not run speculatively."""
    backend = Opening()
    ROUTES.clear()
    out = await ROUTED.invoke({"text": "a"}, thread_id="t", backend=backend)
    assert out.text == "a!"
    assert ROUTES == ["a"]
    assert backend.initials == [None]
    # The input checkpoint is then its own unit, which need not wait for the disk.
    assert backend.durable == [False, True]
    assert [c.source for c in await ROUTED.aget_history("t", backend)] == ["input", "loop"]


async def test_resume_with_new_input_drops_the_fresh_plan_and_applies_input_first() -> None:
    backend = Opening()
    await NOTE.invoke({"text": "one"}, thread_id="t", backend=backend)
    out = await NOTE.invoke({"text": "two"}, thread_id="t", backend=backend)
    assert out.text == "two!"  # a finished thread given input runs again from its entry
    history = await NOTE.aget_history("t", backend)
    assert [(c.source, c.values["text"]) for c in history] == [
        ("input", "one"),
        ("loop", "one!"),
        ("input", "two"),
        ("loop", "two!"),
    ]
    assert [c.parent_id for c in history[1:]] == [c.id for c in history[:-1]]


async def test_bad_input_on_a_new_thread_writes_nothing_and_frees_the_thread() -> None:
    backend = Opening()
    with pytest.raises(ValueError, match="'txt' is not a field of Note — did you mean 'text'"):
        await NOTE.invoke({"txt": "typo"}, thread_id="t", backend=backend)
    assert await backend.list_checkpoints("t") == []
    assert await backend.acquire_lease("t", "next", 30)  # the failed run let go of the lease


async def test_a_thread_id_without_a_backend_warns_once_per_graph_that_nothing_is_stored() -> None:
    app = Graph(Note).add(Write).edge(START, "Write").edge("Write", END).compile()
    with pytest.warns(NotDurableWarning, match="thread_id='t' but no backend=") as caught:
        out = await app.invoke({"text": "hi"}, thread_id="t")
    assert out.text == "hi!" and len(caught) == 1
    assert "Pass backend=" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await app.invoke({"text": "again"}, thread_id="t")  # once per graph
        events = [e async for e in app.stream({"text": "x"}, thread_id="t")]
        assert events[-1].type == "run_end"
        await NOTE.invoke({"text": "durable"}, thread_id="t", backend=InMemoryBackend())
        await NOTE.invoke({"text": "no thread"})
    other = Graph(Note).add(Write).edge(START, "Write").edge("Write", END).compile()
    with pytest.warns(NotDurableWarning):
        [e async for e in other.stream({"text": "x"}, thread_id="t")]


# -- real types through a real store, across processes -----------------------------------------

_DATACLASS_APP = """
import asyncio, dataclasses, datetime, decimal, os, sys
from pathlib import Path
from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.runtime.backends.sqlite import SqliteBackend

@dataclasses.dataclass(frozen=True, slots=True)
class Quote:
    amount: decimal.Decimal
    at: datetime.datetime
    tags: tuple[str, ...]

class Order(Schema):
    item: str = ""
    quote: Quote | None = None

CALLS = Path(sys.argv[2])

def fetch(item: str) -> Quote:
    CALLS.write_text(CALLS.read_text() + "x" if CALLS.exists() else "x")
    return Quote(decimal.Decimal("9.90"), datetime.datetime(2026, 5, 1, 12, 0, 0, 7), (item,))

class Price(Node):
    class In(Schema):
        item: str

    class Out(Schema):
        quote: Quote

    async def run(self, ctx: Context, inp: In) -> Out:
        quote = await ctx.step("quote", lambda: fetch(inp.item))
        if os.environ.get("CRASH_AFTER_STEP"):
            os._exit(17)  # the journal entry is committed; the checkpoint after it is not
        assert type(quote) is Quote, type(quote)
        return self.Out(quote=quote)

APP = Graph(Order).add(Price).edge(START, "Price").edge("Price", END).compile()

async def main() -> None:
    backend = SqliteBackend(sys.argv[1], lease_ttl=0.5)
    if os.environ.get("CRASH_AFTER_STEP"):
        await APP.invoke({"item": "lamp"}, thread_id="t-1", backend=backend)
    out = await APP.invoke(thread_id="t-1", backend=backend)
    state = await APP.aget_state("t-1", backend)
    await backend.aclose()
    print(type(out.quote).__qualname__, repr(out.quote), state.quote == out.quote, type(state.quote) is Quote)

asyncio.run(main())
"""


def test_a_dataclass_from_ctx_step_comes_back_in_a_fresh_process(tmp_path: Path) -> None:
    """First process: the step completes and the process dies. Second process (a fresh
    backend on the same file): the journaled dataclass comes back, equal and of its type."""
    import subprocess

    app = tmp_path / "dataclass_app.py"
    app.write_text(_DATACLASS_APP)
    db, calls = str(tmp_path / "runs.db"), str(tmp_path / "calls")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    first = subprocess.run(
        [sys.executable, str(app), db, calls],
        env={**env, "CRASH_AFTER_STEP": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert first.returncode == 17, first.stderr
    time.sleep(0.6)  # the dead process's lease lapses
    second = subprocess.run(
        [sys.executable, str(app), db, calls],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == [
        "Quote",
        *[
            "Quote(amount=Decimal('9.90'),",
            "at=datetime.datetime(2026,",
            "5,",
            "1,",
            "12,",
            "0,",
            "0,",
            "7),",
            "tags=('lamp',))",
            "True",
            "True",
        ],
    ]
    assert Path(calls).read_text() == "x"  # the effect ran once: the resume replayed it


async def test_a_hostile_journal_entry_names_thread_entry_and_tag(tmp_path: Path) -> None:
    """Through a real store: the journal's decode error says which thread, which entry and
    which tag, and the tag's target never runs."""
    canary = tmp_path / "canary"

    class Effect(Node):
        class In(Schema):
            text: str

        class Out(Schema):
            text: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(text=str(await ctx.step("effect", lambda: "real")))

    graph = Graph(Note).add(Effect).edge(START, "Effect").edge("Effect", END).compile()
    backend = SqliteBackend(tmp_path / "store.db")
    planted = json.dumps(
        [{"$t": "dataclass", "c": "subprocess:Popen", "v": {"args": ["touch", str(canary)]}}]
    ).encode()
    # The thread exists (stopped before Effect): a run that creates a thread reads nothing
    # from its journal, so the entry is planted in a thread the run resumes.
    await graph.invoke(
        {"text": "hi"}, thread_id="victim", backend=backend, interrupt_before=["Effect"]
    )
    await backend.record_effect("victim", "0:Effect:0:effect", planted)
    with pytest.raises(CheckpointDecodeError) as caught:
        await graph.invoke(None, thread_id="victim", backend=backend, interrupt_before=[])
    message = str(caught.value)
    assert "journal entry '0:Effect:0:effect' of thread 'victim'" in message
    assert "'subprocess:Popen'" in message
    assert not canary.exists()
    await backend.aclose()


# -- the delta ladder: bounded reads, exact history -----------------------------------------------


class Ladder(Schema):
    messages: Annotated[list[str], Reducer(operator.add)] = []
    items: list[int] = []
    note: str = ""
    turns: int = 0
    limit: int = 0


class Grow(Node):
    class In(Schema):
        turns: int
        items: list[int]

    class Out(Schema):
        messages: list[str]
        items: list[int]
        note: str
        turns: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        n = inp.turns + 1
        # `items` is replaced whole (a set), and emptied every fifth step.
        items = [] if n % 5 == 0 else [*inp.items, n]
        return self.Out(
            messages=[f"m{n}\udc80" if n % 7 == 0 else f"m{n}"], items=items, note=f"n{n}", turns=n
        )


LADDER = (
    Graph(Ladder)
    .add(Grow)
    .edge(START, "Grow")
    .loop("Grow", until=lambda s: s.turns >= s.limit)
    .compile()
)


def _expected(turns: int) -> dict[str, Any]:
    items = [i for i in range(1, turns + 1) if i > turns // 5 * 5]
    return {
        "messages": [f"m{n}\udc80" if n % 7 == 0 else f"m{n}" for n in range(1, turns + 1)],
        "items": items,
        "note": f"n{turns}" if turns else "",
        "turns": turns,
    }


@pytest.mark.parametrize("small_epochs", [False, True])
async def test_ladder_over_many_resumes_keeps_every_checkpoint_exact(
    monkeypatch: pytest.MonkeyPatch, small_epochs: bool
) -> None:
    from tensorsketch.durable import ladder
    from tensorsketch.testing.backend_conformance import CountingBackend

    if small_epochs:  # snapshots early and often: exercises epochs and their ends
        monkeypatch.setattr(ladder, "MIN_CHAIN_BYTES", 0)
        monkeypatch.setattr(ladder, "SNAPSHOT_RATIO", 0.5)
    backend = InMemoryBackend()
    turns = 0
    for burst in [1, 3, 8, 7, 1, 64, 2, 150, 5]:  # each invoke resumes the thread
        turns += burst
        out = await LADDER.invoke({"limit": turns}, thread_id="t", backend=backend, max_steps=200)
        assert out.model_dump(exclude={"limit"}) == _expected(turns)
    history = await LADDER.aget_history("t", backend)
    for checkpoint in history:
        values = {k: v for k, v in checkpoint.values.items() if k != "limit"}
        assert values == _expected(values.get("turns", 0))
    counted = CountingBackend(backend)
    for checkpoint in history[::17]:
        counted.rows_read = 0
        state = await LADDER.aget_state_at("t", counted, checkpoint.id)
        assert state.model_dump() == {**_expected(0), **checkpoint.values}
        assert counted.rows_read <= 30
    stored = await backend.list_checkpoints("t")
    snapshots = [s for s in stored if backend.serializer.loads(s.payload)["base"]]
    if small_epochs:
        assert len(snapshots) > 1  # epochs ended (the state is tiny: snapshots are cheap)
    else:
        assert snapshots == stored[:1]  # resumes continue the ladder: one snapshot only


# -- reading back what this schema wrote: no second validation ------------------------------------


class Ledger(Schema):
    entries: Annotated[list[dict[str, str]], Reducer(operator.add)] = []
    turns: int = 0


class AddEntry(Node):
    class In(Schema):
        turns: int

    class Out(Schema):
        entries: list[dict[str, str]]
        turns: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(entries=[{"n": str(inp.turns)}], turns=inp.turns + 1)


def _ledger_graph(state: type[Schema] = Ledger) -> Any:
    return (
        Graph(state)
        .add(AddEntry)
        .edge(START, "AddEntry")
        .loop("AddEntry", until=lambda s: s.turns >= 20)
        .compile()
    )


async def test_a_state_read_by_the_schema_that_wrote_it_is_taken_as_decoded(
    tmp_path: Path,
) -> None:
    """Every checkpoint carries its writer's schema fingerprint; a reader with the same one
    builds no validator at all (validating 10,000 messages again was most of a read), and
    still gets exactly the state the run ended with, fresh on every read."""
    backend = SqliteBackend(tmp_path / "store.db")
    out = await _ledger_graph().invoke({}, thread_id="t", backend=backend, max_steps=30)
    stamps = {backend.serializer.loads(s.payload)["s"] for s in await backend.list_checkpoints("t")}
    assert stamps == {schema_fingerprint(Ledger)} and None not in stamps
    reader = _ledger_graph()  # a fresh compile: no field validator built yet
    state = await reader.aget_state("t", backend)
    assert state == out and len(state.entries) == 20
    assert reader._spec.adapters == {}
    state.entries.append({"n": "mine"})  # the caller's copy: the next read is unaffected
    again = await reader.aget_state("t", backend)
    assert again == out
    resumed = await reader.invoke(thread_id="t", backend=backend)  # restore: same rule
    assert resumed == out
    await backend.aclose()


async def test_a_checkpoint_id_that_is_not_a_string_is_a_type_error_on_every_store(
    tmp_path: Path,
) -> None:
    """PostgreSQL would compare a text column with an int and raise its own driver error."""
    for backend in (InMemoryBackend(), SqliteBackend(tmp_path / "store.db")):
        await _ledger_graph().invoke({}, thread_id="t", backend=backend, max_steps=30)
        with pytest.raises(TypeError, match=r"checkpoint_id must be a str, got int 5"):
            await _ledger_graph().aget_state_at("t", backend, 5)  # type: ignore[arg-type]
        await backend.aclose()


async def test_a_changed_schema_of_the_same_name_still_validates(tmp_path: Path) -> None:
    """The fingerprint is of the types, not the name: a field retyped under the same class
    name is validated, and its error still names the checkpoint and points at migrate."""
    backend = SqliteBackend(tmp_path / "store.db")
    await _ledger_graph().invoke({}, thread_id="t", backend=backend, max_steps=30)

    class Ledger(Schema):
        # An unannotated reducer, so the graph (whose node still writes dicts) compiles.
        entries: Annotated[list[int], Reducer(lambda a, b: a + b)] = []
        turns: int = 0

    assert schema_fingerprint(Ledger) != schema_fingerprint(globals()["Ledger"])
    with pytest.raises(CheckpointDecodeError, match=r"of thread 't'.*'entries'.*migrate") as err:
        await _ledger_graph(Ledger).aget_state("t", backend)
    # the reason is pydantic's message and where it failed, not the link its text ends with
    assert "Input should be a valid integer" in str(err.value)
    assert "at 0" in str(err.value) and "errors.pydantic.dev" not in str(err.value)
    await backend.aclose()


def test_a_schema_with_validator_functions_is_never_taken_on_trust() -> None:
    """Validator code can change without changing the JSON schema: such a state is always
    validated on read (no fingerprint is written, so none can match)."""

    class Checked(Schema):
        name: str = ""

        @field_validator("name")
        @classmethod
        def _upper(cls, value: str) -> str:
            return value.upper()

    class Annotated_(Schema):
        name: Annotated[str, AfterValidator(str.upper)] = ""

    assert schema_fingerprint(Checked) is None
    assert schema_fingerprint(Annotated_) is None
    assert schema_fingerprint(Ledger) is not None


async def test_rows_written_by_two_schemas_are_validated(tmp_path: Path) -> None:
    """Values folded from rows of different fingerprints (a thread continued after a schema
    change) carry none, so they are validated."""
    backend = SqliteBackend(tmp_path / "store.db")
    await _ledger_graph().invoke({}, thread_id="t", backend=backend, max_steps=30)
    stored = await backend.read_chain("t")
    last = stored[-1]
    payload = backend.serializer.loads(last.payload)
    payload["s"] = "0123456789abcdef"
    await backend.save_checkpoint(
        StoredCheckpoint(
            "t", "cp-other", last.checkpoint_id, last.step + 1, 2.0, json.dumps(payload).encode()
        )
    )
    found = await read_checkpoint(backend, "t")
    assert found is not None and found.id == "cp-other" and found.schema_id is None
    reader = _ledger_graph()
    assert await reader.aget_state("t", backend) is not None
    assert "entries" in reader._spec.adapters  # validated
    await backend.aclose()


class _Wrapped:
    """A serializer of the user's own (here lossless, but the runtime cannot know that)."""

    name = "wrapped"

    def __init__(self) -> None:
        self.inner = JsonSerializer()

    def dumps(self, obj: Any) -> bytes:
        return self.inner.dumps(obj)

    def loads(self, data: bytes) -> Any:
        return self.inner.loads(data)


async def test_values_through_a_custom_serializer_are_always_validated(tmp_path: Path) -> None:
    """Only the built-in serializers are known to give back exactly what they were given; a
    custom one could be lossy (dates as strings, say), so its values are validated."""
    backend = SqliteBackend(tmp_path / "store.db", serializer=_Wrapped())
    out = await _ledger_graph().invoke({}, thread_id="t", backend=backend, max_steps=30)
    assert all(b'"s":' not in s.payload for s in await backend.list_checkpoints("t"))
    reader = _ledger_graph()
    assert await reader.aget_state("t", backend) == out
    assert "entries" in reader._spec.adapters
    await backend.aclose()
