"""Session stores: a conversation's history kept across threads, per session id.

A thread's checkpoints hold one conversation; a session outlives it, so a user who comes back
tomorrow in a new thread continues where they left off. The history is append-only and
orthogonal to memory items (a :class:`~tensorsketch.memory.MemoryStore` is a key-value
blackboard; a session is an ordered log of messages). Each append may name its *turn*: a turn
already appended is not appended again, which is what makes a retried write-back safe.

Core ships :class:`InMemorySessionStore` and :class:`SqliteSessionStore`;
``tensorsketch-backends`` adds PostgreSQL and Redis ones through the
``tensorsketch_session_stores`` hook. Agents use a store through
:class:`tensorsketch.agents.SessionHistory`.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tensorsketch.messages import Message
from tensorsketch.name_registry import Registry

__all__ = [
    "InMemorySessionStore",
    "SessionEntry",
    "SessionStore",
    "create_session_store",
    "register_session_store",
    "session_stores",
]

#: The longest session id and turn key a store accepts (they become keys and index entries).
MAX_ID_LENGTH = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One message of a session, where it stands and which turn appended it."""

    #: Its position in the session, from 0, in append order.
    seq: int
    #: The ``turn=`` its append named, or ``None``.
    turn: str | None
    message: Message


class SessionStore(ABC):
    """The contract: ``append`` messages to a session, ``read`` them back in order.

    Subclasses implement the four ``_``-prefixed methods on validated arguments and
    serialized messages (JSON text); this class checks the caller's input once for all.
    """

    #: The name the store is registered under.
    name: ClassVar[str] = ""

    async def append(
        self, session_id: str, messages: Sequence[Message], *, turn: str | None = None
    ) -> int:
        """Add ``messages`` at the end of the session, all or none; return its new length.

        :param turn: a key for this append; if an append with the same key already reached
            the session, nothing is added (a retried write-back never duplicates a turn).
            An empty append adds nothing and records no turn.
        """
        _check_id("session_id", session_id)
        if turn is not None:
            _check_id("turn", turn)
        if isinstance(messages, Message | str | bytes) or not isinstance(messages, Sequence):
            msg = (
                "append(session_id, messages) takes a list of Message objects, got "
                f"{type(messages).__name__}; wrap one message in a list."
            )
            raise TypeError(msg)
        for index, message in enumerate(messages):
            if not isinstance(message, Message):
                msg = (
                    f"append(...) messages[{index}] is {type(message).__name__}, not a Message; "
                    "build messages with tensorsketch.messages.user(...) / assistant(...)."
                )
                raise TypeError(msg)
        return await self._append(session_id, turn, [m.model_dump_json() for m in messages])

    async def read(self, session_id: str, *, last: int | None = None) -> list[SessionEntry]:
        """The session's entries in append order (only the ``last`` ones when given); an
        unknown session reads as empty."""
        _check_id("session_id", session_id)
        if last is not None and (not isinstance(last, int) or isinstance(last, bool) or last < 0):
            msg = f"read(..., last=...) must be a non-negative int or None, got {last!r}."
            raise ValueError(msg)
        if last == 0:
            return []
        rows = await self._read(session_id, last)
        return [
            SessionEntry(seq, turn, Message.model_validate_json(text)) for seq, turn, text in rows
        ]

    async def load(self, session_id: str, *, last: int | None = None) -> list[Message]:
        """The session's messages in order (the ``last`` ones when given)."""
        return [entry.message for entry in await self.read(session_id, last=last)]

    async def clear(self, session_id: str) -> int:
        """Delete the session's history (and the turns it remembers); return how many
        messages were removed."""
        _check_id("session_id", session_id)
        return await self._clear(session_id)

    async def sessions(
        self, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[str]:
        """Session ids that have messages, in code-point order: those starting with
        ``prefix``, after the id ``after`` (pass the last id of a page for the next)."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            msg = f"sessions(limit=...) must be an int from 1 to 1000, got {limit!r}."
            raise ValueError(msg)
        return await self._sessions(prefix, after, limit)

    async def aclose(self) -> None:  # noqa: B027 - optional: stores with connections close them
        """Release connections the store opened (a no-op by default)."""

    @abstractmethod
    async def _append(self, session_id: str, turn: str | None, payloads: list[str]) -> int: ...

    @abstractmethod
    async def _read(
        self, session_id: str, last: int | None
    ) -> list[tuple[int, str | None, str]]: ...

    @abstractmethod
    async def _clear(self, session_id: str) -> int: ...

    @abstractmethod
    async def _sessions(self, prefix: str, after: str | None, limit: int) -> list[str]: ...


def _check_id(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty str, got {value!r}."
        raise ValueError(msg)
    if len(value) > MAX_ID_LENGTH or _CONTROL.search(value):
        msg = (
            f"{what} must be at most {MAX_ID_LENGTH} characters with no control characters, "
            f"got {value[:40]!r}{'...' if len(value) > 40 else ''}."
        )
        raise ValueError(msg)


class InMemorySessionStore(SessionStore):
    """Sessions in this process's memory: for tests, scripts and single-process apps."""

    name = "memory"

    def __init__(self) -> None:
        self._entries: dict[str, list[tuple[str | None, str]]] = {}
        self._turns: dict[str, set[str]] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"InMemorySessionStore(sessions={len(self._entries)})"

    async def _append(self, session_id: str, turn: str | None, payloads: list[str]) -> int:
        async with self._lock:
            entries = self._entries.get(session_id, [])
            turns = self._turns.setdefault(session_id, set())
            if not payloads or (turn is not None and turn in turns):
                return len(entries)
            self._entries[session_id] = entries
            entries.extend((turn, text) for text in payloads)
            if turn is not None:
                turns.add(turn)
            return len(entries)

    async def _read(self, session_id: str, last: int | None) -> list[tuple[int, str | None, str]]:
        entries = self._entries.get(session_id, [])
        start = 0 if last is None else max(0, len(entries) - last)
        return [(seq, *entries[seq]) for seq in range(start, len(entries))]

    async def _clear(self, session_id: str) -> int:
        async with self._lock:
            self._turns.pop(session_id, None)
            return len(self._entries.pop(session_id, []))

    async def _sessions(self, prefix: str, after: str | None, limit: int) -> list[str]:
        ids = sorted(
            s for s in self._entries if s.startswith(prefix) and (after is None or s > after)
        )
        return ids[:limit]


#: Session stores by name (``create_session_store("sqlite", path=...)``), fed by the
#: ``tensorsketch_session_stores`` hook and the ``tensorsketch.sessions`` entry-point group.
session_stores: Registry[SessionStore] = Registry(
    "session_store", "tensorsketch_session_stores", "tensorsketch.sessions"
)


def create_session_store(name: str, /, **kwargs: Any) -> SessionStore:
    """Build a session store by name: ``create_session_store("sqlite", path="sessions.db")``."""
    return session_stores.create(name, **kwargs)


def register_session_store(name: str, store: Any) -> None:
    """Register a session store class (or a callable returning one) under ``name``."""
    session_stores.register(name, store)
