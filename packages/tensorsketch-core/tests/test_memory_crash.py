"""A memory-writing agent SIGKILLed right after the store committed its write — before the
journal recorded it and before the checkpoint — resumes in another process and the item is
written once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tensorsketch import FakeProvider, create_agent
from tensorsketch.agents import memory_tools
from tensorsketch.errors import ThreadBusyError
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.messages import assistant
from tensorsketch.runtime.backends.sqlite import SqliteBackend

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys

    from tensorsketch import FakeProvider, create_agent
    from tensorsketch.agents import memory_tools
    from tensorsketch.memory.sqlite import SqliteStore
    from tensorsketch.messages import ToolCall, assistant
    from tensorsketch.runtime.backends.sqlite import SqliteBackend


    class DiesAfterWrite(SqliteStore):
        async def _write(self, writes, now):
            result = await super()._write(writes, now)  # committed to the file
            os.kill(os.getpid(), signal.SIGKILL)  # before anything hears of it
            return result


    async def main(folder):
        model = FakeProvider([
            assistant(tool_calls=[ToolCall(id="c1", name="remember", args={
                "content": "allergic to peanuts", "key": "allergy"})]),
            assistant("noted"),
        ])
        agent = create_agent(model, tools=memory_tools(("users", "{user_id}")))
        await agent.invoke(
            {"query": "remember my allergy"},
            thread_id="t1",
            backend=SqliteBackend(os.path.join(folder, "runs.db"), lease_ttl=1.0),
            memory=DiesAfterWrite(os.path.join(folder, "memory.db")),
            deps={"user_id": "u1"},
        )


    asyncio.run(main(sys.argv[1]))
    """
)


async def test_agent_killed_after_its_memory_write_writes_it_once(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    store = SqliteStore(tmp_path / "memory.db")
    written = await store.get(("users", "u1"), "allergy")
    assert written is not None and written.rev == 1  # the dead child's write landed

    agent = create_agent(
        FakeProvider([assistant("noted")]), tools=memory_tools(("users", "{user_id}"))
    )
    backend = SqliteBackend(tmp_path / "runs.db", lease_ttl=1.0)
    for _ in range(50):  # the dead child's lease lapses after lease_ttl
        try:
            out = await agent.invoke(
                {}, thread_id="t1", backend=backend, memory=store, deps={"user_id": "u1"}
            )
            break
        except ThreadBusyError:
            await asyncio.sleep(0.2)
    else:
        raise AssertionError("the dead child's lease never lapsed")
    assert out.status == "completed" and out.output == "noted"
    assert [m.text for m in out.messages if m.role == "tool"] == ["Remembered as 'allergy'."]
    again = await store.get(("users", "u1"), "allergy")
    assert again is not None
    assert (again.rev, again.updated_at) == (1, written.updated_at)  # not written a second time
