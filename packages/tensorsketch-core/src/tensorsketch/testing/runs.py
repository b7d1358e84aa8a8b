"""Small graphs for testing code built on ``AsyncRunner``: each one exercises one way a run
stops — it hangs (cancel, timeouts), waits for an event (signals), needs an approval (an
agent on the fake model whose tool requires one), or stops at static breakpoints. Offline and
deterministic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tensorsketch.agents import create_agent
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.fake import FakeProvider
from tensorsketch.graph import Graph
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs import wait_for_event
from tensorsketch.schema import Schema
from tensorsketch.tools import tool

__all__ = [
    "REFUNDS",
    "Io",
    "breakpoint_graph",
    "hang_graph",
    "listen_graph",
    "one_node_graph",
    "refund_agent",
]

#: Orders the refund agent's tool refunded, in order (clear it in a test's setup).
REFUNDS: list[str] = []


class Io(Schema):
    """The state of the one-node graphs: ``n`` in, ``out`` / ``event`` out."""

    n: int = 0
    out: str = ""
    event: dict[str, Any] = {}


def one_node_graph(node: type[Node], name: str) -> CompiledGraph[Io]:
    """``START -> node -> END`` over :class:`Io`."""
    g = Graph(Io, name=name)
    g.add(node)
    g.edge(START, node.__name__)
    g.edge(node.__name__, END)
    return g.compile()


class Hang(Node):
    """Sleeps ``n`` seconds (not durably): a run to cancel or time out."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await asyncio.sleep(inp.n)
        return self.Out(out="late")


class Listen(Node):
    """Suspends until an event is signalled, and returns it."""

    class In(Schema):
        n: int

    class Out(Schema):
        event: dict[str, Any]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(event=await wait_for_event(ctx))


def hang_graph() -> CompiledGraph[Io]:
    return one_node_graph(Hang, "hang")


def listen_graph() -> CompiledGraph[Io]:
    return one_node_graph(Listen, "listen")


class Draft(Node):
    """Writes ``out = "draft <n>"``."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(out=f"draft {inp.n}")


def _appending(name: str, word: str) -> type[Node]:
    class Append(Node):
        class In(Schema):
            out: str

        class Out(Schema):
            out: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(out=f"{inp.out} {word}")

    Append.__name__ = Append.__qualname__ = name
    Append.__doc__ = f"Appends {word!r} to ``out``."
    return Append


def breakpoint_graph() -> CompiledGraph[Io]:
    """``Draft -> Review -> Publish`` stopping after ``Draft`` (``out == "draft <n>"``) and
    before ``Publish`` (``"draft <n> reviewed"``); it ends with ``"draft <n> reviewed
    published"``."""
    g = Graph(Io, name="publish")
    g.add(Draft).add(_appending("Review", "reviewed")).add(_appending("Publish", "published"))
    g.edge(START, "Draft").edge("Draft", "Review").edge("Review", "Publish")
    g.edge("Publish", END)
    return g.compile(interrupt_after=["Draft"], interrupt_before=["Publish"])


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    REFUNDS.append(order)
    return f"refunded {order}"


def _refund_policy(messages: list[Message], tools: Any) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"done: {last.text}")
    if last.role == "user" and last.text.startswith("[event"):
        return assistant(f"noted {last.text}")
    return assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": last.text})])


def refund_agent() -> CompiledGraph[Any]:
    """An agent that asks to refund the order in its query (call id ``call_1``, which needs
    an approval), then reports the tool's answer: ``"done: refunded <order>"``."""
    return create_agent(FakeProvider(policy=_refund_policy), [refund], name="refunds")
