"""``SessionHistory``: middleware that carries a user's conversation across threads through a
:class:`~tensorsketch.memory.SessionStore`.

Before each model call it puts the session's earlier messages in front of the thread's own;
when a turn ends with an answer (a reply with no tool calls) it appends the turn's user
messages and the answer to the session. Failed turns write nothing. It runs inside the
agent's journaled model step, so a resumed run replays the recorded call instead of reading
and appending again, and the append names its turn, so a call re-run after a crash (between
the append and the journal record) appends nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorsketch.agents.memory_tools import fill_namespace
from tensorsketch.memory.sessions import SessionStore
from tensorsketch.messages import Message
from tensorsketch.middleware import Middleware, ModelHandler, ModelRequest
from tensorsketch.provider import Completion

__all__ = ["SessionHistory"]


class SessionHistory(Middleware):
    """Load a session's history into each prompt and append each finished turn to it.

    :param store: where sessions live (``SqliteSessionStore("sessions.db")``, ...).
    :param session: the session id, or a template filled from the run's ``deps``
        (``"{user_id}"``, ``"support:{user_id}"``), as :func:`memory_tools` fills namespaces.
    :param last: the most earlier messages put in front of the thread's (the newest ones).

    Turns this thread appended are not put in front again: they are already in its
    transcript. A turn is keyed by thread (or run), superstep and node.
    """

    def __init__(self, store: SessionStore, session: str, *, last: int = 50) -> None:
        if not isinstance(store, SessionStore):
            msg = (
                f"SessionHistory(store=...) needs a SessionStore (InMemorySessionStore, "
                f"SqliteSessionStore, ...), got {type(store).__name__}."
            )
            raise TypeError(msg)
        if not isinstance(session, str) or not session:
            msg = f"SessionHistory(session=...) must be a non-empty str, got {session!r}."
            raise ValueError(msg)
        if not isinstance(last, int) or isinstance(last, bool) or not 1 <= last <= 10_000:
            msg = f"SessionHistory(last=...) must be an int from 1 to 10000, got {last!r}."
            raise ValueError(msg)
        self.store = store
        self.session = session
        self.last = last

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        ctx = request.ctx
        (session_id,) = fill_namespace((self.session,), ctx)
        owner = ctx.thread_id or ctx.run_id
        mine = f"{owner}:"
        entries = await self.store.read(session_id, last=self.last)
        earlier = [e.message for e in entries if not (e.turn or "").startswith(mine)]
        asked = this_turns_questions(request.messages)
        at = 0
        while at < len(request.messages) and request.messages[at].role == "system":
            at += 1
        request.messages[at:at] = earlier
        completion = await call_next(request)
        if not completion.message.tool_calls and asked:
            turn = f"{mine}{ctx.superstep}:{ctx.node}{ctx.instance}"
            await self.store.append(session_id, [*asked, completion.message], turn=turn)
        return completion


def this_turns_questions(messages: Sequence[Message]) -> list[Message]:
    """The user messages since the thread's last answer (an assistant message that called no
    tool): what this turn was asked."""
    start = 0
    for index, message in enumerate(messages):
        if message.role == "assistant" and not message.tool_calls:
            start = index + 1
    return [m for m in messages[start:] if m.role == "user"]
