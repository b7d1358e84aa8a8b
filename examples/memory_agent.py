"""A user-preferences agent whose memory outlives its threads (no API key, no network).

Each conversation is its own durable thread; what the agent remembers goes to a memory store
(a SQLite file here) under ``("users", <user_id>, "prefs")``, where ``user_id`` is a field of
the run's input state — one agent serves every user, and the model never names the namespace.
A later conversation, on a new thread, recalls it. The memory store searches with sqlite-vec's
index when ``tensorsketch-core[sqlite-vec]`` is installed, else exactly (it says which). To
see what each thread read and wrote, open the Studio's debugger on the run database:

    tensorsketch studio examples/memory_agent.py --backend sqlite:///<workdir>/runs.db

Run: python examples/memory_agent.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from tensorsketch import END, START, Agent, FakeProvider, Graph, SqliteBackend
from tensorsketch.agents import AgentState, memory_tools
from tensorsketch.memory import HashingEmbedder, SqliteStore
from tensorsketch.messages import ToolCall, assistant


class UserChat(AgentState):
    """The agent's state, with who the conversation is with."""

    user_id: str = ""


REMEMBERED = "prefers answers in Portuguese"
model = FakeProvider(  # scripted turns standing in for a real model
    [
        assistant(tool_calls=[ToolCall(id="c1", name="remember", args={"content": REMEMBERED})]),
        assistant("Noted: Portuguese from now on."),
        assistant(tool_calls=[ToolCall(id="c2", name="recall", args={"query": "language"})]),
        assistant("Olá! Em que posso ajudar?"),
    ]
)
agent = Agent(model, tools=memory_tools(("users", "{user_id}", "prefs")), name="assistant")
app = Graph(UserChat).add(agent).edge(START, "assistant").edge("assistant", END).compile()


async def main() -> None:
    workdir = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())
    runs = SqliteBackend(workdir / "runs.db")
    memory = SqliteStore(workdir / "memory.db", embedder=HashingEmbedder())
    print(f"memory store: {memory!r}")
    try:
        await app.invoke(
            {"query": "Please answer in Portuguese.", "user_id": "ana"},
            thread_id="ana-monday",
            backend=runs,
            memory=memory,
        )
        later = await app.invoke(
            {"query": "Hi!", "user_id": "ana"},
            thread_id="ana-friday",
            backend=runs,
            memory=memory,
        )
        recalled = json.loads(next(m.text for m in later.messages if m.role == "tool"))
        print(f"friday's thread recalled: {recalled[0]['content']!r}")
        print(f"answer: {later.output}")
        (item,) = (await memory.list(("users", "ana", "prefs"))).items
        assert item.rev == 1
        print(f"stored under ('users', 'ana', 'prefs'): {item.value} (rev {item.rev})")
    finally:
        await memory.aclose()
        await runs.aclose()


if __name__ == "__main__":
    asyncio.run(main())
