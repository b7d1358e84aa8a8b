"""``JsonSerializer`` round-trips every type it claims to store, however deeply nested, and
turns whatever is not its own format into ``CheckpointDecodeError``."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.serializers import JsonSerializer


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


@settings(max_examples=300, deadline=None)
@given(_values)
def test_every_supported_value_round_trips(value: Any) -> None:
    codec = JsonSerializer()
    assert codec.loads(codec.dumps(value)) == value


def test_tagged_keys_and_nested_models_come_back_as_their_types() -> None:
    codec = JsonSerializer()
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


def test_decimal_and_uuid_keep_their_exact_values() -> None:
    codec = JsonSerializer()
    value = [decimal.Decimal("0.1000"), uuid.UUID(int=7), dt.timedelta(microseconds=1)]
    assert codec.loads(codec.dumps(value)) == value
    assert str(codec.loads(codec.dumps(value))[0]) == "0.1000"


def test_timedeltas_written_as_float_seconds_still_load() -> None:
    """Stores written before timedeltas were stored as exact parts stay readable."""
    old = b'{"$t":"timedelta","v":90.5}'
    assert JsonSerializer().loads(old) == dt.timedelta(seconds=90, microseconds=500_000)


def test_strings_that_look_like_the_tag_are_plain_data() -> None:
    codec = JsonSerializer()
    for value in ({"a": "$t", "b": ["$t", {"$t": "x"}]}, ["$t"], "$t", {"$t": ("tuple",)}):
        assert codec.loads(codec.dumps(value)) == value
