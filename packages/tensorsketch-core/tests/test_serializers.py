"""``JsonSerializer`` and ``MsgpackSerializer`` round-trip every type they claim to store,
however deeply nested, and turn whatever is not their format into ``CheckpointDecodeError``
(the msgpack-only cases are in test_serializer_msgpack)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.serializers import JsonSerializer, MsgpackSerializer, shared_encoding

#: Each round-trip test runs on both formats.
BOTH = pytest.mark.parametrize(
    "codec_type", [JsonSerializer, MsgpackSerializer], ids=["json", "msgpack"]
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Card(BaseModel):
    name: str
    tags: tuple[str, ...] = ()
    colour: Colour = Colour.RED


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.datetimes()
    | st.dates()
    | st.times()
    | st.timedeltas()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.uuids()
    | st.sampled_from(Colour)
    | st.builds(Card, name=st.text(max_size=5), tags=st.tuples(st.text(max_size=3)))
)
_keys = st.text(max_size=6) | st.integers() | st.tuples(st.integers(), st.text(max_size=3))
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
        | st.frozensets(st.integers(), max_size=4)
        | st.sets(st.text(max_size=3), max_size=4)
        # A plain dict that happens to use the tag's own key must not be mistaken for a tag.
        | st.dictionaries(st.sampled_from(["$t", "v", "c"]), inner, max_size=3)
    ),
    max_leaves=20,
)


@BOTH
@settings(max_examples=300, deadline=None)
@given(_values)
def test_every_supported_value_round_trips(
    codec_type: type[JsonSerializer | MsgpackSerializer], value: Any
) -> None:
    codec = codec_type()
    assert codec.loads(codec.dumps(value)) == value


@BOTH
def test_tagged_keys_and_nested_models_come_back_as_their_types(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    value = {(1, "a"): [Card(name="x", tags=("t",), colour=Colour.BLUE)], 2: {frozenset({1})}}
    back = codec.loads(codec.dumps(value))
    assert back == value
    key = next(iter(back))
    assert isinstance(key, tuple)
    assert isinstance(back[key][0], Card) and back[key][0].colour is Colour.BLUE
    assert isinstance(back[2], set)
    assert isinstance(next(iter(back[2])), frozenset)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xfe not json", "not valid JSON"),
        (b'{"$t": "hologram", "v": 1}', "unknown type tag 'hologram'"),
        (b'{"$t": "decimal", "v": "one point five"}', "cannot decode stored 'decimal'"),
        (b'{"$t": "model", "c": "nowhere:Ghost", "v": {}}', "not registered"),
        (b'[1, {"$t": "date", "v": "2026-13-40"}]', "cannot decode stored 'date'"),
    ],
)
def test_what_is_not_our_format_is_a_decode_error(data: bytes, match: str) -> None:
    with pytest.raises(CheckpointDecodeError, match=match):
        JsonSerializer().loads(data)


@BOTH
def test_decimal_and_uuid_keep_their_exact_values(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    value = [decimal.Decimal("0.1000"), uuid.UUID(int=7), dt.timedelta(microseconds=1)]
    assert codec.loads(codec.dumps(value)) == value
    assert str(codec.loads(codec.dumps(value))[0]) == "0.1000"


def test_a_utc_offset_with_microseconds_survives() -> None:
    """CPython 3.11's ``fromisoformat`` drops an offset's microseconds (hypothesis found a
    ``time`` at UTC+1 µs coming back as UTC); the offset is stored beside the value."""
    codec = JsonSerializer()
    odd = dt.timezone(dt.timedelta(hours=-3, microseconds=7))
    for value in (
        dt.time(12, 0, tzinfo=dt.timezone(dt.timedelta(microseconds=1))),
        dt.datetime(2020, 1, 1, 12, 0, tzinfo=odd, fold=1),
    ):
        back = codec.loads(codec.dumps(value))
        assert (back, back.utcoffset(), back.fold) == (value, value.utcoffset(), value.fold)
    plain = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    assert json.loads(codec.dumps(plain)) == {"$t": "datetime", "v": plain.isoformat()}


def test_timedeltas_written_as_float_seconds_still_load() -> None:
    """Stores written before timedeltas were stored as exact parts stay readable."""
    old = b'{"$t":"timedelta","v":90.5}'
    assert JsonSerializer().loads(old) == dt.timedelta(seconds=90, microseconds=500_000)


@BOTH
def test_strings_that_look_like_the_tag_are_plain_data(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    for value in ({"a": "$t", "b": ["$t", {"$t": "x"}]}, ["$t"], "$t", {"$t": ("tuple",)}):
        assert codec.loads(codec.dumps(value)) == value


# -- dataclasses, enums of every flavour, and mixtures of all of them ----------------------------

POST_INITS: list[str] = []


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0
    label: str = dataclasses.field(default="", compare=True)

    def __post_init__(self) -> None:
        POST_INITS.append(f"Point({self.x})")


@dataclasses.dataclass(frozen=True)
class FrozenTag:
    name: str
    tags: frozenset[str] = frozenset()


@dataclasses.dataclass(slots=True)
class Slotted:
    items: list[Any]
    seen: set[int] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlotted:
    key: tuple[int, ...]
    when: dt.datetime


@dataclasses.dataclass
class Counted:
    """``init=False`` fields are state too: they are stored and set back."""

    n: int
    doubled: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.n * 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(enum.StrEnum):
    FAST = "fast"


class Perm(enum.Flag):
    R = 1
    W = 2


class Basket(BaseModel):
    """A model holding dataclasses (which hold models): nesting in any order."""

    points: list[Point] = []
    extra: Any = None


def _tz() -> st.SearchStrategy[dt.tzinfo]:
    offsets = st.timedeltas(min_value=-dt.timedelta(hours=23), max_value=dt.timedelta(hours=23))
    return st.builds(dt.timezone, offsets)


_rich_scalars = (
    _scalars
    | st.datetimes(timezones=st.none() | _tz()).map(lambda d: d.replace(fold=d.microsecond % 2))
    | st.times(timezones=st.none() | _tz())
    | st.sampled_from([*Level, *Mode, Perm.R, Perm.R | Perm.W])
    | st.builds(Point, st.integers(), st.floats(allow_nan=False), st.text(max_size=3))
    | st.builds(FrozenTag, st.text(max_size=3), st.frozensets(st.text(max_size=2), max_size=2))
)
_rich = st.recursive(
    _rich_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys | st.sampled_from(list(Level)), inner, max_size=3)
        | st.frozensets(st.integers() | st.sampled_from(list(Mode)), max_size=3)
        | st.builds(Slotted, st.lists(inner, max_size=3), st.sets(st.integers(), max_size=3))
        | st.builds(FrozenSlotted, st.tuples(st.integers()), st.datetimes())
        | st.builds(
            Basket, points=st.lists(st.builds(Point, st.integers()), max_size=2), extra=inner
        )
    ),
    max_leaves=25,
)


def _same_types(a: Any, b: Any) -> bool:
    """Equal *and* of the same type at every level (``1 == 1.0 == True`` would hide a loss)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(k, k2) and _same_types(a[k], b[k2]) for k, k2 in zip(a, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(
            _same_types(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, BaseModel):
        return all(_same_types(getattr(a, k), getattr(b, k)) for k in type(a).model_fields)
    if isinstance(a, dt.datetime | dt.time):
        return a.fold == b.fold and a.utcoffset() == b.utcoffset()
    return True


@BOTH
@settings(max_examples=300, deadline=None)
@given(_rich)
def test_nested_mixtures_of_every_supported_type_round_trip_exactly(
    codec_type: type[JsonSerializer | MsgpackSerializer], value: Any
) -> None:
    codec = codec_type()
    back = codec.loads(codec.dumps(value))
    assert back == value
    assert _same_types(back, value)


@BOTH
def test_dataclasses_come_back_without_running_init(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    value = [
        Point(1, 2.5, "a"),
        FrozenTag("t", frozenset({"x"})),
        Slotted([Point(2)], {3}),
        FrozenSlotted((1, 2), dt.datetime(2026, 1, 2, 3, 4, 5, 6)),
        Counted(4),
        Basket(points=[Point(5)], extra=FrozenTag("in-model")),
    ]
    data = codec.dumps(value)
    POST_INITS.clear()
    back = codec.loads(data)
    assert back == value
    assert [type(v) for v in back] == [type(v) for v in value]
    assert POST_INITS == []  # rebuilt by setting fields: __init__/__post_init__ never ran
    assert back[4].doubled == 8  # an init=False field is restored too
    with pytest.raises(dataclasses.FrozenInstanceError):
        back[1].name = "changed"  # still frozen


@BOTH
def test_int_and_str_enums_keep_their_type(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    value = {"level": Level.HIGH, "mode": Mode.FAST, Level.LOW: [Perm.R | Perm.W]}
    back = codec.loads(codec.dumps(value))
    assert back == value
    assert back["level"] is Level.HIGH and back["mode"] is Mode.FAST
    assert next(k for k in back if k != "level" and k != "mode") is Level.LOW


@BOTH
def test_a_dataclass_added_field_takes_its_default_and_unknown_fields_are_refused(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    old = json.dumps({"$t": "dataclass", "c": _qualified(Slotted), "v": {"items": [1]}}).encode()
    assert codec.loads(old) == Slotted([1], set())
    missing = json.dumps({"$t": "dataclass", "c": _qualified(Point), "v": {}}).encode()
    with pytest.raises(CheckpointDecodeError, match="lacks its field 'x'"):
        codec.loads(missing)
    smuggled = {"x": 1, "__class__": "x", "__post_init__": 0}
    data = json.dumps({"$t": "dataclass", "c": _qualified(Point), "v": smuggled}).encode()
    with pytest.raises(CheckpointDecodeError, match="does not declare"):
        codec.loads(data)


def test_a_class_a_load_could_not_find_is_refused_when_written() -> None:
    @dataclasses.dataclass
    class Local:
        n: int

    with pytest.raises(TypeError, match=r"Local.*define it at module level.*register it"):
        JsonSerializer().dumps({"x": Local(1)})
    codec = JsonSerializer(types=[Local])  # registered: found by name on load
    assert codec.loads(codec.dumps(Local(1))) == Local(1)
    with pytest.raises(TypeError, match="strict mode rebuilds only registered classes"):
        JsonSerializer(strict=True).dumps(Point(1))
    with pytest.raises(TypeError, match="can only register dataclasses"):
        JsonSerializer(types=[Path])


# -- hostile stores -------------------------------------------------------------------------------


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


@pytest.mark.parametrize("kind", ["model", "enum", "dataclass"])
@pytest.mark.parametrize(
    "target",
    [
        "os:system",
        "posix:system",
        "builtins:eval",
        "builtins:exec",
        "subprocess:Popen",  # a class, but not a dataclass/model/enum
        "pathlib:Path",
        "tensorsketch.serializers:JsonSerializer",
        "os:_wrap_close",
        "subprocess:Popen.__init__",
        "builtins:type",
        "builtins:object",
    ],
)
def test_type_tags_naming_callables_are_refused(target: str, kind: str, canary: Path) -> None:
    command = f"touch {canary}"
    value: Any = (
        {"args": ["touch", str(canary)], "cmd": command, "source": f"open({str(canary)!r}, 'w')"}
        if kind != "enum"
        else command
    )
    data = json.dumps({"$t": kind, "c": target, "v": value}).encode()
    with pytest.raises(CheckpointDecodeError, match=re.escape(repr(target))):
        JsonSerializer().loads(data)


@pytest.mark.parametrize("opener", ["[", '{"a":', '{"$t":"tuple","v":['])
def test_deep_nesting_is_a_decode_error_not_a_recursion_error(opener: str) -> None:
    depth = 200_000
    closer = {"[": "]", '{"a":': "}", '{"$t":"tuple","v":[': "]}"}[opener]
    data = (opener * depth + "1" + closer * depth).encode()
    with pytest.raises(CheckpointDecodeError, match="nested too deeply"):
        JsonSerializer().loads(data)


@BOTH
def test_huge_strings_decode_as_data_and_keep_error_messages_short(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    big = "x" * 20_000_000
    assert codec.loads(codec.dumps({"s": big, "t": (big[:10],)}))["s"] == big
    data = json.dumps({"$t": "model", "c": "m:" + big, "v": {}}).encode()
    with pytest.raises(CheckpointDecodeError) as caught:
        codec.loads(data)
    assert len(str(caught.value)) < 1000
    with pytest.raises(CheckpointDecodeError):
        codec.loads(json.dumps({"$t": big, "v": 1}).encode())
    with pytest.raises(CheckpointDecodeError):
        codec.loads(b"[" + b"9" * 100_000 + b"]")  # past int's digit limit


def test_tags_never_import_or_trigger_lazy_module_attributes() -> None:
    """``tensorsketch:AgentState`` is a lazy attribute of the package (its ``__getattr__``
    imports ``tensorsketch.agents``); a tag must not set that import off."""
    script = """
import json, sys
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.serializers import JsonSerializer
assert "tensorsketch.agents" not in sys.modules, "precondition: agents not imported"
for tag in ["tensorsketch.agents:AgentState", "tensorsketch:AgentState", "tensorsketch:Agent"]:
    for kind in ["model", "dataclass", "enum"]:
        data = json.dumps({"$t": kind, "c": tag, "v": {}}).encode()
        try:
            JsonSerializer().loads(data)
        except CheckpointDecodeError:
            pass
        else:
            raise SystemExit(f"{tag} decoded")
print(sorted(m for m in sys.modules if m.startswith("tensorsketch.agents")))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class Aliased(BaseModel):
    """Fields with aliases and no ``populate_by_name``: validation accepts only the aliases."""

    model_config = ConfigDict(alias_generator=to_camel)

    user_name: str
    item_count: int = Field(default=0, alias="N")


@BOTH
def test_models_with_aliased_fields_round_trip(
    codec_type: type[JsonSerializer | MsgpackSerializer],
) -> None:
    codec = codec_type()
    value = {"a": Aliased(userName="ada", N=3), "b": [Aliased(userName="bob")]}
    back = codec.loads(codec.dumps(value))
    assert back == value
    assert back["a"].user_name == "ada" and back["a"].item_count == 3


def test_values_stored_under_a_renamed_module_still_decode() -> None:
    """``Completion``/``Usage`` lived in ``tensorsketch.chat``: journaled model calls
    carry that tag. They decode to the classes' new home even when the old module was never
    imported in this process (decoding imports nothing, so the alias table must do it)."""
    script = """
import json, sys
from tensorsketch.messages import assistant
from tensorsketch.provider import Completion, Usage
from tensorsketch.graph_structure import BranchInfo
from tensorsketch.serializers import JsonSerializer
assert "tensorsketch.chat" not in sys.modules and "tensorsketch.structure" not in sys.modules
written = JsonSerializer().dumps([Completion(message=assistant("hi"), usage=Usage(input_tokens=3)),
                                  BranchInfo("loop", None, "p")])
old = written.replace(b'"tensorsketch.provider:', b'"tensorsketch.chat:').replace(
    b'"tensorsketch.graph_structure:', b'"tensorsketch.structure:')
assert old.count(b"tensorsketch.chat:") == 2 and b"tensorsketch.structure:" in old, old
out = JsonSerializer().loads(old)
assert type(out[0]) is Completion and out[0].usage == Usage(input_tokens=3), out
assert out[0].text == "hi", out
assert type(out[1]) is BranchInfo and out[1].kind == "loop", out
assert "tensorsketch.chat" not in sys.modules
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@BOTH
def test_a_shared_encoding_walks_each_model_once_and_writes_the_same_bytes(
    codec_type: type[JsonSerializer | MsgpackSerializer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint and the stream events committed with it hold the same messages: inside
    ``shared_encoding`` each instance is walked once, and every payload is byte for byte
    what it is without sharing."""
    codec = codec_type()
    card = Card(name="ace", tags=("x", "y"))
    values = [{"state": [card, card]}, {"event": {"writes": card}}, [Point(1, 2)] * 2]
    plain = [codec.dumps(v) for v in values]
    walked: list[str] = []
    tag_of = type(codec)._tag_of  # asked once per walk of a model's or dataclass's fields

    def counted(self: Any, cls: type) -> str:
        walked.append(cls.__name__)
        return tag_of(self, cls)

    monkeypatch.setattr(type(codec), "_tag_of", counted)
    with shared_encoding(codec):
        shared = [codec.dumps(v) for v in values]
    assert shared == plain
    assert sorted(w for w in walked if w != "Colour") == ["Card", "Point"]
    walked.clear()
    codec.dumps(values[0])  # outside the block nothing is kept
    assert walked.count("Card") == 2
    walked.clear()
    with shared_encoding(codec_type()):  # another serializer's block shares nothing here
        codec.dumps(values[0])
    assert walked.count("Card") == 2


@BOTH
def test_a_shared_encoding_inside_another_of_the_same_serializer_shares_its_walks(
    codec_type: type[JsonSerializer | MsgpackSerializer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit encodes its checkpoint in one block and its events in a block of their own
    inside it: the events reuse the checkpoint's walks (``node_end`` carries the messages the
    checkpoint does); a block of another serializer inside starts afresh."""
    codec, other = codec_type(), codec_type()
    card = Card(name="ace", tags=("x", "y"))
    plain = (codec.dumps({"changes": [card]}), codec.dumps({"writes": card}))
    walked: list[tuple[int, str]] = []
    tag_of = type(codec)._tag_of

    def counted(self: Any, cls: type) -> str:
        walked.append((id(self), cls.__name__))
        return tag_of(self, cls)

    monkeypatch.setattr(type(codec), "_tag_of", counted)
    with shared_encoding(codec):
        checkpoint = codec.dumps({"changes": [card]})
        with shared_encoding(codec):
            event = codec.dumps({"writes": card})
        with shared_encoding(other):
            other.dumps({"writes": card})
    assert (checkpoint, event) == plain
    cards = [who for who, name in walked if name == "Card"]
    assert cards == [id(codec), id(other)]


def test_a_shared_encoding_packs_each_model_once_unless_it_lands_deeper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside the block a model met again is not packed into msgpack again either: its
    extension is reused, byte for byte. Met nested deeper than where it was packed, it is
    packed again (what it nests must stay within the reader's depth limit)."""
    import ormsgpack

    codec = MsgpackSerializer()
    card = Card(name="ace", tags=("x", "y"))
    values = [{"state": [card, card]}, {"writes": card}, [card], (card,), [card]]
    plain = [codec.dumps(v) for v in values]
    packed: list[str] = []
    packb = ormsgpack.packb

    def counted(obj: Any, *args: Any, **kwargs: Any) -> bytes:
        if isinstance(obj, dict) and obj.get("$t") == "model":
            packed.append(obj["c"].rpartition(":")[2])
        return packb(obj, *args, **kwargs)

    monkeypatch.setattr(ormsgpack, "packb", counted)
    with shared_encoding(codec):
        shared = [codec.dumps(v) for v in values]
    assert shared == plain
    # Once at the top of the tagged values, once again inside the tuple (one level deeper).
    assert packed == ["Card", "Card"]
    packed.clear()
    codec.dumps(values[0])  # outside the block nothing is kept
    assert packed == ["Card", "Card"]
