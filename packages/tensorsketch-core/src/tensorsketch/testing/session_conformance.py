"""The behaviour every ``SessionStore`` must have, as one reusable pytest suite.

Subclass :class:`SessionStoreConformance` in your store's tests and provide a
``session_factory`` fixture: ``session_factory()`` returns a new handle on one storage private
to the test (a second handle stands in for a second process)::

    import pytest
    from tensorsketch.testing.session_conformance import SessionStoreConformance

    class TestAcmeSessions(SessionStoreConformance):
        @pytest.fixture
        def session_factory(self, tmp_path):
            return lambda: AcmeSessionStore(tmp_path / "sessions")

It checks order and round trips, ``last=``, turns appended once (also when many appends of
one turn race from two handles), racing appends that keep each one's messages together,
clearing, listing with prefixes and pages, and the errors bad input gets. The tests are
``async`` and marked for pytest-asyncio explicitly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tensorsketch.memory.sessions import SessionStore
from tensorsketch.messages import ImageBlock, Message, ToolCall, assistant, tool_result, user

__all__ = ["SessionFactory", "SessionStoreConformance"]

SessionFactory = Callable[[], SessionStore]


class SessionStoreConformance:
    """Mix into a test class that defines a ``session_factory`` fixture."""

    @pytest.mark.asyncio
    async def test_messages_come_back_in_order_and_intact(
        self, session_factory: SessionFactory
    ) -> None:
        store = session_factory()
        call = ToolCall(id="c:1", name="lookup", args={"city": "Zürich", "days": [1, 2]})
        first = [user("hello"), assistant("", tool_calls=[call])]
        second = [
            tool_result(call, {"temp": 21.5}, name="lookup"),
            Message(role="user", content=[ImageBlock(url="https://example.test/a.png")]),
            assistant("done", tool_calls=[]),
        ]
        assert await store.append("s1", first) == 2
        assert await store.append("s1", second) == 5
        assert await store.load("s1") == [*first, *second]
        entries = await store.read("s1")
        assert [e.seq for e in entries] == [0, 1, 2, 3, 4]
        assert [e.turn for e in entries] == [None] * 5
        assert await store.load("unknown") == []

    @pytest.mark.asyncio
    async def test_last_reads_the_tail_with_its_positions(
        self, session_factory: SessionFactory
    ) -> None:
        store = session_factory()
        for i in range(7):
            await store.append("s", [user(f"m{i}")], turn=f"t{i}")
        tail = await store.read("s", last=3)
        assert [(e.seq, e.turn, e.message.text) for e in tail] == [
            (4, "t4", "m4"),
            (5, "t5", "m5"),
            (6, "t6", "m6"),
        ]
        assert [m.text for m in await store.load("s", last=100)] == [f"m{i}" for i in range(7)]
        assert await store.load("s", last=0) == []

    @pytest.mark.asyncio
    async def test_a_turn_is_appended_once_even_from_another_handle(
        self, session_factory: SessionFactory
    ) -> None:
        one, two = session_factory(), session_factory()
        assert await one.append("s", [user("q"), assistant("a")], turn="run-1:3:agent") == 2
        assert await two.append("s", [user("q"), assistant("a")], turn="run-1:3:agent") == 2
        assert await two.append("s", [user("q2")], turn="run-1:5:agent") == 3
        assert [m.text for m in await one.load("s")] == ["q", "a", "q2"]
        # Turns belong to their session: the same key elsewhere is a different turn.
        assert await one.append("other", [user("x")], turn="run-1:3:agent") == 1

    @pytest.mark.asyncio
    async def test_racing_appends_of_one_turn_land_once(
        self, session_factory: SessionFactory
    ) -> None:
        handles = [session_factory(), session_factory()]
        results = await asyncio.gather(
            *(
                handles[i % 2].append("s", [user("q"), assistant("a")], turn="the-turn")
                for i in range(12)
            )
        )
        assert set(results) == {2}
        assert len(await handles[0].load("s")) == 2

    @pytest.mark.asyncio
    async def test_racing_appends_keep_each_batch_together(
        self, session_factory: SessionFactory
    ) -> None:
        handles = [session_factory(), session_factory()]
        await asyncio.gather(
            *(
                handles[i % 2].append("s", [user(f"{i}:a"), user(f"{i}:b"), user(f"{i}:c")])
                for i in range(10)
            )
        )
        entries = await handles[1].read("s")
        assert [e.seq for e in entries] == list(range(30))
        texts = [e.message.text for e in entries]
        for start in range(0, 30, 3):
            batch = {t.split(":")[0] for t in texts[start : start + 3]}
            assert len(batch) == 1, f"batch split at {start}: {texts[start : start + 3]}"
            assert [t.split(":")[1] for t in texts[start : start + 3]] == ["a", "b", "c"]

    @pytest.mark.asyncio
    async def test_clear_forgets_messages_and_turns(self, session_factory: SessionFactory) -> None:
        store = session_factory()
        await store.append("s", [user("a"), user("b")], turn="t")
        await store.append("keep", [user("k")])
        assert await store.clear("s") == 2
        assert await store.clear("s") == 0
        assert await store.load("s") == []
        assert await store.sessions() == ["keep"]
        assert await store.append("s", [user("again")], turn="t") == 1

    @pytest.mark.asyncio
    async def test_an_empty_append_adds_nothing_and_records_no_turn(
        self, session_factory: SessionFactory
    ) -> None:
        store = session_factory()
        assert await store.append("s", [], turn="t") == 0
        assert await store.sessions() == []
        assert await store.append("s", [user("x")], turn="t") == 1

    @pytest.mark.asyncio
    async def test_sessions_list_by_prefix_in_pages(self, session_factory: SessionFactory) -> None:
        store = session_factory()
        ids = ["user:b", "user:a", "user:ä", "user:c", "team:x", "user"]
        for sid in ids:
            await store.append(sid, [user(sid)])
        assert await store.sessions() == sorted(ids)
        assert await store.sessions(prefix="user:") == ["user:a", "user:b", "user:c", "user:ä"]
        page = await store.sessions(prefix="user:", limit=2)
        assert page == ["user:a", "user:b"]
        assert await store.sessions(prefix="user:", after=page[-1], limit=2) == [
            "user:c",
            "user:ä",
        ]
        assert await store.sessions(prefix="nobody") == []

    @pytest.mark.asyncio
    async def test_bad_input_is_refused_with_what_to_do(
        self, session_factory: SessionFactory
    ) -> None:
        store = session_factory()
        bad: list[tuple[Any, str]] = [
            (store.append("", [user("x")]), "session_id must be a non-empty str"),
            (store.append("s", [{"role": "user", "content": "x"}]), "not a Message"),  # type: ignore[list-item]
            (store.append("s", user("x")), "wrap one message in a list"),  # type: ignore[arg-type]
            (store.append("s", [user("x")], turn="a\nb"), "no control characters"),
            (store.read("s", last=-1), "non-negative int"),
            (store.sessions(limit=0), "from 1 to 1000"),
        ]
        for call, message in bad:
            with pytest.raises((TypeError, ValueError), match=message):
                await call
        assert await store.load("s") == []
