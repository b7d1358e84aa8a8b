"""State deltas: the patch sent for a superstep turns the client's copy into the new state.

The patch is checked with a small RFC 6902 applier written for the tests from the RFC
(agui_client.apply_rfc6902), not with the library that made it, so a wrong patch cannot be
confirmed by its own author.
"""

from __future__ import annotations

import json
from typing import Any

from agui_client import apply_rfc6902  # type: ignore[import-not-found]
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsketch.messages import user
from tensorsketch.serve._agui_state import StateTracker, state_json

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
states = st.dictionaries(st.sampled_from(["a", "b/c", "d~e", "items", ""]), json_values, max_size=4)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON text (so `1` and `true`, `1` and `1.0` differ as they do on the wire)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(states, states)
def test_the_delta_turns_the_previous_state_into_the_next(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    tracker = StateTracker()
    assert tracker.update(old) == ("snapshot", old)
    update = tracker.update(new)
    if update is None:
        assert _same(old, new)
        return
    kind, patch = update
    assert kind == "delta" and patch
    assert _same(apply_rfc6902(old, patch), new)


def test_an_unchanged_state_sends_nothing_and_the_transcript_is_left_out() -> None:
    tracker = StateTracker(exclude=["messages"])
    first = tracker.update({"count": 1, "messages": [user("hi")]})
    assert first == ("snapshot", {"count": 1})
    assert tracker.update({"count": 1, "messages": [user("hi"), user("again")]}) is None
    assert tracker.update({"count": 2}) == (
        "delta",
        [{"op": "replace", "path": "/count", "value": 2}],
    )


def test_state_values_become_plain_json() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque!"

    data = state_json({"m": user("hi"), "o": Opaque(), "f": float("nan"), "s": {1, 2}})
    assert data["m"]["role"] == "user" and data["m"]["content"] == "hi"
    assert data["o"] == "opaque!" and data["f"] is None
    assert sorted(data["s"]) == [1, 2]
    json.dumps(data)  # it is JSON
