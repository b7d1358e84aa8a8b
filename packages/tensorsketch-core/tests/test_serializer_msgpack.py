"""``MsgpackSerializer``: what only the msgpack format has — its marker byte, tags as
extensions, the JSON fallback, hostile msgpack — and that either serializer reads the other's
payloads, so a store can switch (the shared round trips are in test_serializers)."""

from __future__ import annotations

import asyncio
import enum
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import ormsgpack
import pytest
from pydantic import BaseModel

from tensorsketch import START, Context, Graph, Node, Reducer, Schema
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.runtime.backends import SqliteBackend
from tensorsketch.serializers import (
    MSGPACK_MAGIC,
    JsonSerializer,
    MsgpackSerializer,
    resolve_serializer,
)


class Tone(enum.StrEnum):
    CALM = "calm"


class Note(BaseModel):
    text: str
    tone: Tone = Tone.CALM
    tags: tuple[str, ...] = ()


def _tagged(mapping: dict[str, Any]) -> bytes:
    """A payload as MsgpackSerializer frames a tagged value (crafted by hand, as an attacker
    would)."""
    return MSGPACK_MAGIC + ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(mapping)))


def test_payloads_start_with_the_marker_and_are_smaller_than_json() -> None:
    value = {"messages": [{"role": "user", "content": f"message {i}"} for i in range(100)]}
    packed, text = MsgpackSerializer().dumps(value), JsonSerializer().dumps(value)
    assert packed[:1] == MSGPACK_MAGIC and text[:1] == b"{"
    assert len(packed) < len(text)
    assert ormsgpack.unpackb(packed[1:]) == value  # plain data is plain msgpack


def test_each_serializer_reads_the_others_payloads() -> None:
    value = {"note": Note(text="hi", tags=("a",)), "when": (1, {2, 3}), "raw": b"\x00\xff"}
    for writer in (JsonSerializer(), MsgpackSerializer()):
        data = writer.dumps(value)
        for reader in (JsonSerializer(), MsgpackSerializer()):
            back = reader.loads(data)
            assert back == value
            assert type(back["note"]) is Note and back["note"].tone is Tone.CALM


def test_tagged_values_are_extensions_not_maps() -> None:
    """A tag is an extension, so a plain dict using the tag's own key stays a plain dict."""
    data = MsgpackSerializer().dumps([(1, 2), {"$t": "tuple", "v": [1]}])
    assert MsgpackSerializer().loads(data) == [(1, 2), {"$t": "tuple", "v": [1]}]

    def seen(code: int, packed: bytes) -> Any:
        return ("ext", code, ormsgpack.unpackb(packed, ext_hook=seen))

    raw = ormsgpack.unpackb(data[1:], ext_hook=seen)
    assert raw[0] == ("ext", 1, {"$t": "tuple", "v": [1, 2]})
    assert raw[1] == ("ext", 1, {"$t": "dict", "v": [["$t", "tuple"], ["v", [1]]]})


@pytest.mark.parametrize("value", [2**70, -(2**80), "lone \ud800 surrogate", {"k": [2**64]}])
def test_what_msgpack_cannot_hold_is_written_as_json(value: Any) -> None:
    data = MsgpackSerializer().dumps(value)
    assert data[:1] != MSGPACK_MAGIC
    assert MsgpackSerializer().loads(data) == value
    assert JsonSerializer().loads(data) == value


def _nested_tuples(depth: int) -> Any:
    value: Any = "core"
    for _ in range(depth):
        value = (value,)
    return value


def test_tags_nested_deeper_than_the_reader_allows_are_written_as_json() -> None:
    """What a write accepts must read back: past 200 nested tags the reader refuses msgpack,
    so the writer falls back to JSON there."""
    codec = MsgpackSerializer()
    shallow, deep = _nested_tuples(150), _nested_tuples(300)
    assert codec.dumps(shallow)[:1] == MSGPACK_MAGIC
    assert codec.dumps(deep)[:1] == b"{"
    for value in (shallow, deep):
        assert codec.loads(codec.dumps(value)) == value


def test_subclasses_of_plain_types_are_stored_as_the_plain_value() -> None:
    class Name(str):
        pass

    class Count(int):
        pass

    back = MsgpackSerializer().loads(MsgpackSerializer().dumps([Name("ada"), Count(3), 1.5]))
    assert back == ["ada", 3, 1.5] and [type(v) for v in back] == [str, int, float]


def test_resolve_by_name_and_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(resolve_serializer("msgpack")) is MsgpackSerializer
    assert type(resolve_serializer(None)) is MsgpackSerializer  # the default
    assert type(resolve_serializer("json")) is JsonSerializer
    with pytest.raises(ValueError, match="'json', 'msgpack', 'pickle'"):
        resolve_serializer("yaml")
    msgpack_row = MsgpackSerializer().dumps({"a": 1})
    monkeypatch.setitem(sys.modules, "ormsgpack", None)  # as if it were not installed
    hint = re.escape("reinstall with `pip install tensorsketch-core`, or pass serializer='json'")
    with pytest.raises(ModuleNotFoundError, match=hint):
        resolve_serializer("msgpack")
    with pytest.raises(ModuleNotFoundError, match=hint):
        resolve_serializer(None)
    assert type(resolve_serializer("json")) is JsonSerializer  # JSON needs no ormsgpack
    with pytest.raises(ModuleNotFoundError, match=hint):
        MsgpackSerializer().dumps({"a": 1})
    with pytest.raises(ModuleNotFoundError, match=r"to read a msgpack payload"):
        JsonSerializer().loads(msgpack_row)
    assert MsgpackSerializer().loads(b'{"a":1}') == {"a": 1}  # JSON needs no ormsgpack


def test_import_tensorsketch_does_not_load_ormsgpack() -> None:
    script = (
        "import sys, tensorsketch\n"
        "from tensorsketch.serializers import MsgpackSerializer\n"
        "assert 'ormsgpack' not in sys.modules\n"
        "MsgpackSerializer().dumps({'a': 1})\n"
        "assert 'ormsgpack' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


# -- hostile msgpack ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["model", "enum", "dataclass"])
@pytest.mark.parametrize(
    "target", ["os:system", "builtins:eval", "subprocess:Popen", "builtins:type", "pathlib:Path"]
)
def test_type_tags_naming_callables_are_refused(target: str, kind: str, canary: Path) -> None:
    value: Any = {"args": ["touch", str(canary)]} if kind != "enum" else f"touch {canary}"
    data = _tagged({"$t": kind, "c": target, "v": value})
    for reader in (MsgpackSerializer(), JsonSerializer()):
        with pytest.raises(CheckpointDecodeError, match=re.escape(repr(target))):
            reader.loads(data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (MSGPACK_MAGIC, "not valid msgpack"),
        (MSGPACK_MAGIC + b"\x92\x01", "not valid msgpack"),
        (MSGPACK_MAGIC + b"\xc1", "not valid msgpack"),
        (MSGPACK_MAGIC + b"\xdb\xff\xff\xff\xff" + b"a", "not valid msgpack"),  # a 4 GB claim
        (MSGPACK_MAGIC + b"\xa3\xff\xfe\xfd", "not valid msgpack"),  # not UTF-8
        (MSGPACK_MAGIC + ormsgpack.packb(ormsgpack.Ext(7, b"")), "unknown extension type 7"),
        (MSGPACK_MAGIC + ormsgpack.packb(ormsgpack.Ext(1, b"\x01")), "not a tag mapping"),
        (_tagged({"$t": "hologram", "v": 1}), "unknown type tag 'hologram'"),
        (_tagged({"$t": "decimal", "v": "one point five"}), "cannot decode stored 'decimal'"),
        (_tagged({"$t": "model", "c": "nowhere:Ghost", "v": {}}), "not registered"),
    ],
)
def test_what_is_not_our_format_is_a_decode_error(data: bytes, match: str) -> None:
    with pytest.raises(CheckpointDecodeError, match=match):
        MsgpackSerializer().loads(data)


def test_deep_nesting_is_a_decode_error_not_a_recursion_error() -> None:
    arrays = MSGPACK_MAGIC + b"\x91" * 200_000 + b"\xc0"
    inner: Any = 1
    for _ in range(5_000):  # tags inside tags: each level is a call into the hook
        inner = ormsgpack.Ext(1, ormsgpack.packb({"$t": "tuple", "v": [inner]}))
    for data in (arrays, MSGPACK_MAGIC + ormsgpack.packb(inner)):
        with pytest.raises(CheckpointDecodeError, match="nested too deeply"):
            MsgpackSerializer().loads(data)


def test_huge_strings_decode_as_data_and_keep_error_messages_short() -> None:
    big = "x" * 20_000_000
    codec = MsgpackSerializer()
    assert codec.loads(codec.dumps({"s": big}))["s"] == big
    with pytest.raises(CheckpointDecodeError) as caught:
        codec.loads(_tagged({"$t": "model", "c": "m:" + big, "v": {}}))
    assert len(str(caught.value)) < 1000


# -- decoding a chain in one call (what a state read does) ------------------------------------


def _mixed_payloads() -> list[bytes]:
    msgpack, json_ = MsgpackSerializer(), JsonSerializer()
    return [
        msgpack.dumps({"plain": [1, 2.5, "x", None, True]}),
        msgpack.dumps({"note": Note(text="hi", tags=("a",)), "at": {1, 2}}),
        json_.dumps({"plain": ["y"]}),
        json_.dumps({"note": Note(text="json")}),
        b'{"s": "lone \\ud800 escape"}',  # pydantic-core refuses it; json reads it
        msgpack.dumps("lone \ud800 surrogate"),  # written as JSON by the msgpack serializer
    ]


@pytest.mark.parametrize("codec", [MsgpackSerializer(), JsonSerializer()])
def test_loads_many_decodes_each_payload_as_loads_does(codec: Any) -> None:
    payloads = _mixed_payloads()
    got = codec.loads_many(payloads)
    assert got == [codec.loads(p) for p in payloads]
    assert type(got[1]["note"]) is Note and got[1]["at"] == {1, 2}
    assert got[4] == {"s": "lone \ud800 escape"}


def test_loads_many_shares_one_hook_and_its_depth_starts_again_per_payload() -> None:
    """Each payload may nest tags up to the limit: the depth the shared hook counts goes back
    to zero after every payload."""
    inner: Any = 1
    for _ in range(150):
        inner = ormsgpack.Ext(1, ormsgpack.packb({"$t": "tuple", "v": [inner]}))
    deep = MSGPACK_MAGIC + ormsgpack.packb(inner)
    codec = MsgpackSerializer()
    assert codec.loads_many([deep] * 3) == [codec.loads(deep)] * 3
    with pytest.raises(CheckpointDecodeError, match="unknown type tag 'hologram'"):
        codec.loads_many([deep, _tagged({"$t": "hologram", "v": 1}), deep])


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (MSGPACK_MAGIC + b"\x92\x01", "not valid msgpack"),
        (_tagged({"$t": "model", "c": "os:system", "v": {}}), "'os:system'"),
        (b'{"$t": "hologram", "v": 1}', "unknown type tag 'hologram'"),
        (b"{not json", "not valid JSON"),
    ],
)
def test_loads_many_raises_what_loads_raises(bad: bytes, match: str) -> None:
    good = MsgpackSerializer().dumps({"ok": 1})
    for codec in (MsgpackSerializer(), JsonSerializer()):
        with pytest.raises(CheckpointDecodeError, match=match):
            codec.loads_many([good, bad, good])


def test_a_corrupt_row_in_the_middle_of_a_chain_is_named(tmp_path: Path) -> None:
    """A read decodes its chain in one call; when a row fails, the error still names the
    thread and that row's checkpoint, and says how to go on."""
    path = tmp_path / "corrupt.db"
    app = LOG.compile()
    backend = SqliteBackend(path, serializer="msgpack")
    asyncio.run(app.invoke({}, thread_id="t", backend=backend))
    chain = asyncio.run(backend.read_chain("t"))
    asyncio.run(backend.aclose())
    assert len(chain) > 2
    victim = chain[1].checkpoint_id
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE tensorsketch_checkpoints SET payload = ? WHERE checkpoint_id = ?",
            (_tagged({"$t": "model", "c": "os:system", "v": {}}), victim),
        )
    backend = SqliteBackend(path, serializer="msgpack")
    try:
        with pytest.raises(CheckpointDecodeError) as caught:
            app.get_state("t", backend)
        text = str(caught.value)
        assert repr(victim) in text and "'t'" in text and "'os:system'" in text
        assert "fork from an earlier checkpoint" in text
    finally:
        asyncio.run(backend.aclose())


# -- a store that switches format -----------------------------------------------------------------


class Log(Schema):
    notes: Annotated[list[Note], Reducer(lambda a, b: a + b)] = []
    turns: int = 0


class Write(Node):
    class In(Schema):
        turns: int

    class Out(Schema):
        notes: list[Note]
        turns: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(notes=[Note(text=f"note {inp.turns}")], turns=inp.turns + 1)


LOG = Graph(Log).add(Write).edge(START, "Write").loop("Write", until=lambda s: s.turns % 10 == 0)


def test_a_thread_written_as_json_continues_as_msgpack_and_back(tmp_path: Path) -> None:
    """Switching a store's serializer needs no migration: each row is read by its marker,
    and a chain of deltas mixing both formats folds to the same state."""
    path = tmp_path / "switch.db"
    app = LOG.compile()
    writers = ["json", "msgpack", "json"]
    out = None
    for serializer in writers:
        backend = SqliteBackend(path, serializer=serializer)
        out = asyncio.run(app.invoke({}, thread_id="t", backend=backend))
        asyncio.run(backend.aclose())
    assert out is not None and out.turns == 30 and len(out.notes) == 30
    with sqlite3.connect(path) as conn:
        firsts = {
            bytes(r[0])[:1] for r in conn.execute("SELECT payload FROM tensorsketch_checkpoints")
        }
    assert firsts == {b"{", MSGPACK_MAGIC}
    for serializer in ("json", "msgpack"):
        backend = SqliteBackend(path, serializer=serializer)
        state = backend and app.get_state("t", backend)
        assert state == out and all(type(n) is Note for n in state.notes)
        history = app.get_history("t", backend)
        assert [c.values["turns"] for c in history][-1] == 30
        asyncio.run(backend.aclose())
    assert json.loads(JsonSerializer().dumps(1)) == 1
