"""``deps=`` on the serving factories: a tool reading ``ctx.deps`` gets the object the app
was given, over the real protocol (AG-UI and A2A on a live uvicorn). The OpenAI and task APIs
are covered through ``tensorsketch serve --deps``, MCP's graph tool in tensorsketch-interop."""

from __future__ import annotations

from typing import Any

import agui_client as client
import httpx
from ag_ui.core import EventType

from tensorsketch import Context, FakeProvider, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.serve import agui_app
from tensorsketch.serve.a2a import a2a_app


class Shop:
    def __init__(self, price: int) -> None:
        self.prices = {"tea": price}


@tool
def price(ctx: Context[Shop], item: str) -> int:
    """The price of an item.

    Args:
        item: the item.
    """
    return ctx.deps.prices[item]


def _policy(messages: list[Message], tools: list[object]) -> Message:
    if messages[-1].role == "user":
        return assistant(tool_calls=[ToolCall(id="c1", name="price", args={"item": "tea"})])
    return assistant(f"tea costs {messages[-1].text}")


def _agent() -> Any:
    return create_agent(FakeProvider(policy=_policy), [price], name="shop", deps_type=Shop)


def test_agui_app_runs_with_its_deps(live: Any) -> None:
    server = live(agui_app(_agent(), deps=Shop(5)))
    said = {"id": "u1", "role": "user", "content": "tea?"}
    answer = client.run(server.url, {"threadId": "t", "runId": "r", "messages": [said]})
    results = answer.of(EventType.TOOL_CALL_RESULT)
    assert [r.content for r in results] == ["5"] and answer.text() == "tea costs 5"


def test_a2a_app_runs_with_its_deps(live: Any) -> None:
    server = live(a2a_app(_agent(), deps=Shop(6)))
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "tea?"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    reply = httpx.post(server.url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert "tea costs 6" in str(task)
