"""A bounded load test: 200 concurrent streaming clients (the real ``AsyncOpenAI`` SDK) against
one uvicorn server. Every client must get exactly its own deltas, in order, with no errors; the
server's memory growth is reported (``-s`` shows it) and bounded loosely.

No timing is asserted: the machine is shared.
"""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import openai
import pytest

from tensorsketch import FakeProvider, create_agent
from tensorsketch.serve import openai_app

CLIENTS = 200
WORDS = 30


def _words(client: int) -> list[str]:
    return [f"c{client}w{k}" for k in range(WORDS)]


def _answer(messages: list[Any], tools: list[Any]) -> str:
    """The reply is the words named by the request, so each client knows what it must get."""
    client = int(messages[-1].text.split()[-1])
    return " ".join(_words(client))


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
def test_200_concurrent_streams_each_get_all_their_deltas_in_order(live: Any) -> None:
    server = live(openai_app(create_agent(FakeProvider(policy=_answer)), model="bot"))

    async def one(client: openai.AsyncOpenAI, n: int) -> list[str]:
        stream = await client.chat.completions.create(
            model="bot",
            messages=[{"role": "user", "content": f"words for client {n}"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        deltas = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
        return deltas

    async def main() -> list[list[str] | BaseException]:
        async with openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=120
        ) as client:
            return await asyncio.gather(
                *(one(client, n) for n in range(CLIENTS)), return_exceptions=True
            )

    gc.collect()
    before = _rss_mb()
    results = asyncio.run(main())
    gc.collect()
    after = _rss_mb()
    again = asyncio.run(main())  # a second wave: what stays behind per request
    gc.collect()
    second = _rss_mb()

    errors = [r for r in [*results, *again] if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    for n, deltas in [*enumerate(results), *enumerate(again)]:
        assert isinstance(deltas, list)
        expected = _words(n)
        assert deltas == [expected[0], *(f" {w}" for w in expected[1:])], f"client {n}"
    growth = after - before
    print(
        f"\n{CLIENTS} concurrent streams x {WORDS} deltas (client and server in one process): "
        f"RSS {before:.1f} -> {after:.1f} MB ({growth:+.1f}), second wave -> {second:.1f} MB "
        f"({second - after:+.1f})"
    )
    assert growth < 300, f"memory grew by {growth:.0f} MB for {CLIENTS} short streams"
    assert second - after < 150, "a second wave must not cost what the first did"
