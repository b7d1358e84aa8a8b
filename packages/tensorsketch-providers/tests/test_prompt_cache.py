"""Prompt caching of the whole conversation, measured against a server that keeps Anthropic's
cache accounting: a 50-call agent run through the real SDK, billed with and without the
rolling history breakpoints."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from wire_server import Recorded, Reply

from tensorsketch import create_agent, tool
from tensorsketch.pricing import DEFAULT_PRICES, ModelPrice
from tensorsketch.provider import Usage
from tensorsketch.providers.anthropic import AnthropicProvider

MODEL = "claude-sonnet-4-6"
CALLS = 50  # model calls in the run: 49 tool turns, then the answer
LOOKBACK = 20  # blocks the API looks back from a breakpoint for an earlier cache entry
MINIMUM = 1024  # the shortest prefix the API caches, in tokens

RULES = "You are a meticulous research assistant. " * 200  # a long, stable system prompt


@tool
def fetch(page: int) -> str:
    """Fetch one page of the report."""
    return f"page {page}: " + "findings and figures " * 60


def _tokens(block: dict[str, Any]) -> int:
    return math.ceil(len(json.dumps(block, sort_keys=True)) / 4)


class CacheLedger:
    """Anthropic's prompt-cache accounting, per request: a prefix ending at a breakpoint is
    written (when long enough); a later request reads the longest written prefix found at a
    breakpoint or up to ``LOOKBACK`` blocks before one; tokens after the last breakpoint are
    plain input."""

    def __init__(self) -> None:
        self.written: set[str] = set()
        self.requests = 0

    def account(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        blocks: list[dict[str, Any]] = []
        marks: list[int] = []
        ttl_1h = False
        items = [*body.get("tools", []), *body.get("system", [])]
        items += [b for m in body["messages"] for b in m["content"]]
        for item in items:
            plain = {k: v for k, v in item.items() if k != "cache_control"}
            if "cache_control" in item:
                marks.append(len(blocks))
                ttl_1h = ttl_1h or item["cache_control"].get("ttl") == "1h"
            blocks.append(plain)
        sizes = [_tokens(b) for b in blocks]
        digests: list[str] = []
        running = hashlib.sha256()
        for block in blocks:
            running.update(json.dumps(block, sort_keys=True).encode())
            digests.append(running.copy().hexdigest())
        hit = -1
        for mark in marks:
            for at in range(mark, max(-1, mark - LOOKBACK), -1):
                if digests[at] in self.written:
                    hit = max(hit, at)
                    break
        read = sum(sizes[: hit + 1])
        last = marks[-1] if marks else -1
        write = 0
        if last > hit:
            write = sum(sizes[hit + 1 : last + 1])
            for mark in marks:
                if sum(sizes[: mark + 1]) >= MINIMUM:
                    self.written.add(digests[mark])
            if sum(sizes[: last + 1]) < MINIMUM:
                write = 0
        fresh = sum(sizes) - read - write
        return {
            "input_tokens": fresh,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 0 if ttl_1h else write,
                "ephemeral_1h_input_tokens": write if ttl_1h else 0,
            },
            "output_tokens": 20,
        }


def responder(ledger: CacheLedger) -> Any:
    """The vendor: fetch one page per turn until ``CALLS - 1`` pages are in, then answer."""

    def answer(request: Recorded) -> Reply:
        body = request.body
        pages = sum(
            1
            for m in body["messages"]
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        if pages < CALLS - 1:
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{pages}",
                    "name": "fetch",
                    "input": {"page": pages},
                }
            ]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": "Summary: all pages read."}]
            stop = "end_turn"
        return Reply(
            body={
                "id": f"msg_{ledger.requests}",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": ledger.account(body),
            }
        )

    return answer


async def run(server: Any, **cache: Any) -> tuple[Usage, float]:
    ledger = CacheLedger()
    server.responder = responder(ledger)
    provider = AnthropicProvider(
        model=MODEL, api_key="sk-ant-test", base_url=server.url, max_retries=0, **cache
    )
    try:
        agent = create_agent(
            provider, tools=[fetch], system=RULES, max_iterations=CALLS, stuck_after=None
        )
        result = await agent.invoke({"query": "Read the whole report, then summarize it."})
    finally:
        await provider.aclose()
    assert result.output == "Summary: all pages read." and result.iterations == CALLS
    assert ledger.requests == CALLS
    assert result.cost_usd is not None
    return result.usage, result.cost_usd


async def test_rolling_breakpoints_cache_the_history_of_a_50_call_run(server: Any) -> None:
    none_usage, none_cost = await run(server, cache_prefix=False, cache_conversation=False)
    prefix_usage, prefix_cost = await run(server, cache_conversation=False)
    full_usage, full_cost = await run(server)
    # Every configuration sends the same tokens; only how they are billed differs.
    assert none_usage.total_tokens == prefix_usage.total_tokens == full_usage.total_tokens
    assert none_usage.cache_read_tokens == 0
    # Prefix only: the history is billed as fresh input on every call.
    assert prefix_usage.input_tokens > 0.6 * prefix_usage.total_tokens
    # The rolling breakpoints: almost everything a call sends was read from the cache.
    fresh_share = full_usage.input_tokens / full_usage.total_tokens
    read_share = full_usage.cache_read_tokens / full_usage.total_tokens
    assert fresh_share < 0.02 and read_share > 0.85
    # Each call writes only what it added since the last one (no write of the whole history).
    assert full_usage.cache_write_tokens < 0.15 * full_usage.total_tokens
    saving = 1 - full_cost / prefix_cost
    assert saving > 0.7, f"the whole-conversation cache saved only {saving:.0%}"
    print(  # the measurement, shown with -s
        f"\n50-call run: no cache ${none_cost:.4f}, prefix ${prefix_cost:.4f}, "
        f"conversation ${full_cost:.4f} ({saving:.0%} less than prefix-only)"
    )


async def test_the_one_hour_ttl_is_sent_and_its_writes_are_priced_higher(server: Any) -> None:
    usage, cost = await run(server, cache_ttl="1h")
    body = server.requests[-1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["messages"][-1]["content"][-1]["cache_control"]["ttl"] == "1h"
    assert usage.cache_write_1h_tokens == usage.cache_write_tokens > 0
    short_usage, short_cost = await run(server)
    assert short_usage.cache_write_1h_tokens == 0
    assert short_usage.total_tokens == usage.total_tokens and cost > short_cost
    price = DEFAULT_PRICES[MODEL]
    extra = usage.cache_write_tokens * (2 * price.input - price.cache_write) / 1e6  # type: ignore[operator]
    assert cost - short_cost == pytest.approx(extra)


def test_one_hour_writes_cost_twice_the_input_price_unless_priced() -> None:
    usage = Usage(cache_write_tokens=1_000_000, cache_write_1h_tokens=400_000)
    assert ModelPrice(3.0, 15.0, cache_write=3.75).cost(usage) == pytest.approx(
        0.6 * 3.75 + 0.4 * 6.0
    )
    assert ModelPrice(3.0, 15.0, cache_write=3.75, cache_write_1h=5.0).cost(usage) == pytest.approx(
        0.6 * 3.75 + 0.4 * 5.0
    )
    assert ModelPrice(1.0, 2.0).cost(usage) == pytest.approx(1.0)  # no cache prices at all
    assert (usage + usage).cache_write_1h_tokens == 800_000


def test_a_bad_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="'5m' or '1h'"):
        AnthropicProvider(model=MODEL, api_key="k", cache_ttl="1d")  # type: ignore[arg-type]
