"""Middleware offline: a flaky model retried, a tool call observed, every event printed.

The fake model fails once with a 503, ``RetryMiddleware`` tries again, and
``ObservabilityMiddleware`` reports each model and tool call into the run's stream. A small
custom middleware adds a house-style instruction to every model call. Run:
python examples/middleware_retry.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from tensorsketch import (
    FakeProvider,
    Middleware,
    ObservabilityMiddleware,
    RetryMiddleware,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant, system
from tensorsketch.middleware import ModelRequest
from tensorsketch.provider import Completion, ProviderServerError


@tool
def weather(city: str) -> str:
    """Current weather.

    Args:
        city: the city to look up.
    """
    return f"{city}: 4°C, light rain"


class HouseStyle(Middleware):
    """Appends an instruction to every model call (the transcript itself is untouched)."""

    async def wrap_model(self, request: ModelRequest, call_next: Any) -> Completion:
        request.messages.append(system("Answer in one short sentence."))
        result: Completion = await call_next(request)
        return result


async def main() -> None:
    provider = FakeProvider(
        [
            ProviderServerError("rate limited (503)"),
            assistant(tool_calls=[ToolCall(id="w1", name="weather", args={"city": "Oslo"})]),
            assistant("It is 4°C with light rain in Oslo."),
        ]
    )
    agent = create_agent(
        provider,
        tools=[weather],
        middleware=[
            RetryMiddleware(attempts=3, backoff=0.05),
            ObservabilityMiddleware(),
            HouseStyle(),
        ],
    )
    async for event in agent.stream({"query": "What's the weather in Oslo?"}):
        if event.type in ("model_call", "tool_call", "retry"):
            print(f"{event.type:<11} {event.data}")
        elif event.type == "run_end":
            print(f"answer: {event.data['output']}")
    print(f"model requests sent: {len(provider.calls)}")


if __name__ == "__main__":
    asyncio.run(main())
