"""``MsgpackSerializer.dumps`` lets ormsgpack walk the value in C and calls Python only for
the values that take a tag: it must write exactly the bytes of the Python walk it replaced
(``_dumps_walked``, still what decides every value the native walk is unsure of), raise the
same errors, and make no Python call per plain container."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import gc
import sys
import threading
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from tensorsketch.serializers import MsgpackSerializer, UnstorableValueError, shared_encoding


class Color(enum.Enum):
    RED = "red"
    BLUE = (1, 2)


class Level(enum.IntEnum):
    LOW = 1


class Tone(enum.StrEnum):
    CALM = "calm"


class Word(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Items(list[Any]):
    pass


class Fields(dict[Any, Any]):
    pass


class Blob(bytes):
    pass


Pair = collections.namedtuple("Pair", "left right")


class Msg(BaseModel):
    role: str = "user"
    content: Any = None
    at: float = 0.0


class Aliased(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(default="a", alias="Name")
    value: Any = None


class Tagged(BaseModel):
    tag: Any = Field(default=None, alias="$t")


@dataclasses.dataclass
class Point:
    x: Any = 0
    y: Any = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    items: Any = ()


_UTC = dt.UTC
_ODD = dt.timezone(dt.timedelta(hours=5, microseconds=7))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["$t", "\ud800", "¢$t", "v", "c", ""]),
    st.binary(max_size=6),
    st.binary(max_size=4).map(bytearray),
    st.sampled_from([Color.RED, Color.BLUE, Level.LOW, Tone.CALM]),
    st.text(max_size=4).map(Word),
    st.integers(-5, 5).map(Count),
    st.floats(allow_nan=False).map(Ratio),
    st.datetimes(timezones=st.sampled_from([None, _UTC, _ODD])),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.decimals(allow_nan=False, places=3),
    st.uuids(),
    st.binary(max_size=3).map(Blob),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=4), st.sampled_from(["$t", "v"]))
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(
            st.one_of(
                keys,
                st.integers(0, 3),
                st.tuples(st.integers()),
                st.text(max_size=2).map(Word),
                st.just(Tone.CALM),
            ),
            children,
            max_size=4,
        ),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(Items),
        st.dictionaries(keys, children, max_size=3).map(Fields),
        st.frozensets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
        st.sets(st.integers(), max_size=3),
        st.builds(Pair, children, children),
        st.builds(Msg, content=children, at=st.floats(allow_nan=False)),
        st.builds(
            lambda v, e: Aliased(Name="n", value=v, **e),
            children,
            st.dictionaries(st.sampled_from(["x", "$t"]), children, max_size=2),
        ),
        st.builds(lambda v: Tagged(**{"$t": v}), children),
        st.builds(Point, children, children),
        st.builds(Frozen, children),
    )


values = st.recursive(scalars, _containers, max_leaves=25)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(values)
def test_native_walk_writes_the_bytes_of_the_python_walk(value: Any) -> None:
    serializer = MsgpackSerializer(types=[Msg, Aliased, Tagged, Point, Frozen])
    for wrapped in (value, {"at": 1.5, "value": value}):  # a float on top: the bin probe
        assert _outcome(serializer.dumps, wrapped) == _outcome(serializer._dumps_walked, wrapped)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(values)
def test_native_walk_in_a_shared_encoding_writes_the_same_bytes(value: Any) -> None:
    serializer = MsgpackSerializer(types=[Msg, Aliased, Tagged, Point, Frozen])
    checkpoint, event = {"state": value, "at": 2.5}, {"kind": "values", "values": [value]}
    expected = [_outcome(serializer._dumps_walked, v) for v in (checkpoint, event, checkpoint)]
    with shared_encoding(serializer):
        written = [_outcome(serializer.dumps, v) for v in (checkpoint, event, checkpoint)]
    assert written == expected


def _outcome(dumps: Any, value: Any) -> bytes | str:
    """The bytes written, or the error raised (its type and text)."""
    try:
        return bytes(dumps(value))
    except (TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(
    "value",
    [
        {"data": b"\x00\xff", "at": 1796609073.9226878},  # bin inside, a float on top
        [{"b": bytearray(b"xy")}],
        {"m": Msg(content=[b"deep"])},  # bytes inside a model
        {"at": 1796609073.9226878, "m": Msg(content={"at": 1.25})},
        {"k": {"$t": "tuple", "v": [1]}},  # a plain dict holding the tag key
        {"m": Msg(content={"$t": 1})},
        {"¢$t": "¢$t"},  # the packed tag key's bytes inside a string
        {1: "one", (2, 3): "pair"},  # keys that are not strings
        {"n": 2**64},  # beyond 64 bits
        {"s": "\ud800"},
        Color.BLUE,
        Pair(1, (2, Level.LOW)),
        {"t": dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=_ODD).replace(fold=1)},
        {"x": frozenset({1, "a"}), "y": {decimal.Decimal("1.5"), uuid.UUID(int=5)}},
        [()] * 3,
        {"nested": [[[[{}]]]], "empty": (), "e": [], "d": {}},
    ],
)
def test_native_walk_matches_on_the_edges(value: Any) -> None:
    serializer = MsgpackSerializer(types=[Msg])
    assert serializer.dumps(value) == serializer._dumps_walked(value)


def _deep_tags(n: int) -> Any:
    value: Any = "leaf"
    for _ in range(n):
        value = (value,)
    return value


def _deep_lists(n: int) -> Any:
    value: Any = []
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value", [_deep_tags(199), _deep_tags(201), _deep_lists(254), _deep_lists(300)]
)
def test_deep_values_are_written_as_before(value: Any) -> None:
    serializer = MsgpackSerializer()
    assert serializer.dumps(value) == serializer._dumps_walked(value)


@pytest.mark.parametrize("value", [{"lock": threading.Lock()}, [memoryview(b"x")], {1: object()}])
def test_unstorable_values_raise_as_before(value: Any) -> None:
    serializer = MsgpackSerializer()
    with pytest.raises(UnstorableValueError) as walked:
        serializer._dumps_walked(value)
    with pytest.raises(UnstorableValueError) as native:
        serializer.dumps(value)
    assert str(native.value) == str(walked.value)


def test_memoryview_under_a_float_is_still_refused() -> None:
    # A bin header byte from the float alone would not prove there is no bin: the probe does.
    with pytest.raises(UnstorableValueError):
        MsgpackSerializer().dumps({"at": 1796609073.9226878, "view": memoryview(b"x")})


def test_shared_encoding_packs_a_model_once_and_writes_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ormsgpack

    serializer = MsgpackSerializer()
    message = Msg(content="hello")
    checkpoint = {"messages": [message], "n": (1, 2), "at": 1796609073.9226878}
    event = {"kind": "values", "messages": [message]}
    expected = [serializer._dumps_walked(checkpoint), serializer._dumps_walked(event)]
    models = 0
    packb = ormsgpack.packb

    def counted(obj: Any, *args: Any, **kwargs: Any) -> bytes:
        nonlocal models
        models += isinstance(obj, dict) and obj.get("$t") == "model"
        return bytes(packb(obj, *args, **kwargs))

    monkeypatch.setattr(ormsgpack, "packb", counted)
    with shared_encoding(serializer):
        assert [serializer.dumps(checkpoint), serializer.dumps(event)] == expected
    assert models == 1


def _python_calls(fn: Any) -> int:
    """Python-level function calls while ``fn`` runs (C calls excluded; the garbage
    collector is off, as a collection's callbacks are Python calls of nobody's)."""
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return calls


def test_plain_containers_take_no_python_call() -> None:
    serializer = MsgpackSerializer()
    record = {
        "run_id": "r1",
        "events": [{"kind": "node_end", "values": {"n": [i, [i], {"i": i}]}} for i in range(50)],
        "labels": {"a": {"b": {"c": ["d"]}}},
    }
    serializer.dumps(record)  # warm: imports, caches
    small = _python_calls(lambda: serializer.dumps({"events": []}))
    assert _python_calls(lambda: serializer.dumps(record)) == small  # not per container


def test_each_tagged_value_takes_one_python_call() -> None:
    serializer = MsgpackSerializer(types=[Msg])
    serializer.dumps({"m": Msg()})
    one = _python_calls(lambda: serializer.dumps({"m": [Msg()]}))
    ten = _python_calls(lambda: serializer.dumps({"m": [Msg() for _ in range(10)]}))
    per_model = (ten - one) / 9
    # extend, _tag_of (and _qualified), _model_data; the Python walk took 9 (an _encode per
    # model and per dict, and their comprehensions)
    assert per_model < 6, per_model


def test_a_float_beside_tagged_values_keeps_the_native_walk() -> None:
    """A record's timestamps put bin-header bytes in the output; the probe (the floats as
    None, each tagged value as its extension) clears them without the Python walk, in a
    shared encoding too."""
    serializer = MsgpackSerializer(types=[Msg])
    message = Msg(content="hi")
    record = {"created_at": 1796609073.9226878, "messages": [message], "pair": (1, 2)}
    written = serializer._dumps_walked(record)
    assert any(header in written for header in (b"\xc4", b"\xc5", b"\xc6"))  # the float's
    walked = 0
    original = serializer._dumps_walked

    def counted(value: Any) -> bytes:
        nonlocal walked
        walked += 1
        return original(value)

    serializer._dumps_walked = counted  # type: ignore[method-assign]
    expected = original(record)
    assert serializer.dumps(record) == expected
    with shared_encoding(serializer):
        assert [serializer.dumps(record), serializer.dumps(record)] == [expected, expected]
    assert walked == 0


def _packs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every value ``ormsgpack.packb`` is handed from now on."""
    import ormsgpack

    handed: list[Any] = []
    packb = ormsgpack.packb

    def counted(obj: Any, *args: Any, **kwargs: Any) -> bytes:
        handed.append(obj)
        return bytes(packb(obj, *args, **kwargs))

    monkeypatch.setattr(ormsgpack, "packb", counted)
    return handed


def test_bin_header_bytes_inside_the_top_level_floats_take_no_second_pack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A timestamp's own bytes (``1796609073.92…``: ``41 da c5 …``) account for every bin
    header byte of the output: nothing else can hold a ``bin``, no probe packs it again."""
    serializer = MsgpackSerializer(types=[Msg])
    record = {"created_at": 1796609073.9226878, "messages": [Msg(content="hi")], "pair": (1, 2)}
    row = ["values", None, 1796609073.9226878, {"n": 1}, 1796609074.5]
    for value in (record, row):
        expected = serializer._dumps_walked(value)
        handed = _packs(monkeypatch)
        assert serializer.dumps(value) == expected
        assert handed[0] is value and len(handed) == (3 if value is record else 1)


@pytest.mark.parametrize("other", ["Ą", b"\xc4", 0xC4C4, [1796609073.9226878]])
def test_a_bin_header_byte_beside_the_floats_is_still_probed(
    monkeypatch: pytest.MonkeyPatch, other: Any
) -> None:
    # A byte outside the top-level floats (a letter's UTF-8, a bin, an int, a nested float): the
    # floats do not clear it, and the output is the walk's.
    serializer = MsgpackSerializer()
    value = {"at": 1796609073.9226878, "other": other}
    expected = serializer._dumps_walked(value)
    handed = _packs(monkeypatch)
    assert serializer.dumps(value) == expected
    assert len(handed) >= 2  # the value, then the probe (or the walk)
