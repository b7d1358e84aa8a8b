"""Server-Sent Events for ``GET /api/events``: ``file`` when the opened file changes on disk
(polled every 200 ms, and right after the Studio's own writes), ``trace`` when spans arrive,
a ``: ping`` comment every 15 s."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tensorsketch.canvas.studio._files import file_stamp, sha256_hex

__all__ = ["EventHub", "format_event"]

POLL_SECONDS = 0.2
PING_SECONDS = 15.0


def format_event(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class EventHub:
    """Fans events out to every open ``/api/events`` stream (all on the server's loop)."""

    def __init__(self, path: Path, *, poll: float = POLL_SECONDS, ping: float = PING_SECONDS):
        self.path = path
        self.poll = poll
        self.ping = ping
        self.stopping = threading.Event()
        self._queues: set[asyncio.Queue[tuple[str, dict[str, Any]]]] = set()

    @property
    def listeners(self) -> int:
        return len(self._queues)

    def publish(self, event: str, data: dict[str, Any]) -> None:
        """Queue an event for every stream; call it on the server's event loop."""
        for queue in list(self._queues):
            if queue.qsize() < 1000:  # a stalled client loses events, never memory
                queue.put_nowait((event, data))

    def _version(self) -> str | None:
        try:
            return sha256_hex(self.path.read_bytes())
        except OSError:
            return None

    async def stream(self) -> AsyncIterator[str]:
        """One client's stream, until it disconnects or the server stops."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._queues.add(queue)
        loop = asyncio.get_running_loop()
        try:
            stat = file_stamp(self.path)
            version = await asyncio.to_thread(self._version)
            yield "retry: 1000\n: connected\n\n"
            next_ping = loop.time() + self.ping
            while not self.stopping.is_set():
                try:
                    event, data = await asyncio.wait_for(queue.get(), self.poll)
                except TimeoutError:
                    pass
                else:
                    if event == "file":
                        if data.get("version") == version:
                            continue
                        version = data.get("version")
                        stat = file_stamp(self.path)
                    yield format_event(event, data)
                    continue
                current = file_stamp(self.path)
                if current != stat:
                    stat = current
                    new_version = await asyncio.to_thread(self._version)
                    if new_version != version:
                        version = new_version
                        yield format_event("file", {"version": version})
                if loop.time() >= next_ping:
                    next_ping = loop.time() + self.ping
                    yield ": ping\n\n"
        finally:
            self._queues.discard(queue)
