"""The main demo, on embedded defaults: SQLite, a scripted fake model, no API key, no network.

Part 1 — a durable workflow: a refund request is classified, the refund is issued through a
journaled side effect, and the process "crashes" right after the payment call. Resuming the
same thread finishes the run without calling the payment API again.

Part 2 — an agent with tools and human approval: the model looks the order up, asks to refund
it, and the run suspends until a person approves; the approved refund then runs exactly once.

Run: python examples/demo.py
"""

from __future__ import annotations

import asyncio
import tempfile
from operator import add
from pathlib import Path
from typing import Annotated, Literal

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    Node,
    Reducer,
    Schema,
    create_agent,
    tool,
)
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runtime.backends import SqliteBackend

PAYMENTS: list[str] = []  # the "payment API": every call is recorded here


class Ticket(Schema):
    query: str
    intent: Literal["refund", "question"] = "question"
    refund_id: str = ""
    reply: str = ""
    log: Annotated[list[str], Reducer(add)] = []


class Classify(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        intent: Literal["refund", "question"]
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        intent = "refund" if "refund" in inp.query.lower() else "question"
        return self.Out(intent=intent, log=[f"classified as {intent}"])


class Refund(Node):
    crash_after_payment = True

    class In(Schema):
        query: str

    class Out(Schema):
        refund_id: str
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        async def pay() -> str:
            PAYMENTS.append(inp.query)
            return f"rf_{len(PAYMENTS):04d}"

        refund_id = await ctx.step("issue_refund", pay)  # journaled: runs once per thread
        if Refund.crash_after_payment:
            Refund.crash_after_payment = False
            raise ConnectionResetError("process died right after the payment call")
        return self.Out(refund_id=refund_id, log=[f"refund {refund_id} issued"])


class Reply(Node):
    class In(Schema):
        intent: str
        refund_id: str = ""

    class Out(Schema):
        reply: str
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        text = f"Your refund {inp.refund_id} is on its way." if inp.refund_id else "Thanks!"
        return self.Out(reply=text, log=["replied"])


def route(state: Ticket) -> str:
    return "Refund" if state.intent == "refund" else "Reply"


app = (
    Graph(Ticket)
    .add(Classify)
    .add(Refund)
    .add(Reply)
    .edge(START, "Classify")
    .conditional("Classify", route)
    .edge("Refund", "Reply")
    .edge("Reply", END)
).compile()


@tool
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order.

    Args:
        order_id: the order number, e.g. "A-17".
    """
    return {"order": order_id, "amount": 40, "status": "delivered"}


@tool(requires_approval=True)
def issue_refund(order_id: str, amount: int) -> str:
    """Refund an order; a human approves every call.

    Args:
        order_id: the order to refund.
        amount: dollars to give back.
    """
    PAYMENTS.append(order_id)
    return f"refund of ${amount} for {order_id} issued"


def scripted_model(messages: list[Message], tools: list[object]) -> Message:
    """Stands in for a real model: decides the next step from the conversation so far."""
    last = messages[-1]
    if last.role == "user":
        call = ToolCall(id="call_lookup", name="lookup_order", args={"order_id": "A-17"})
        return assistant("Let me check that order.", tool_calls=[call])
    if last.name == "lookup_order":
        args = {"order_id": "A-17", "amount": 40}
        call = ToolCall(id="call_refund", name="issue_refund", args=args)
        return assistant("The order qualifies; refunding it.", tool_calls=[call])
    return assistant(f"Done — {last.text}.")


async def agent_part(backend: SqliteBackend) -> None:
    agent = create_agent(
        FakeProvider(policy=scripted_model),
        tools=[lookup_order, issue_refund],
        system="You are a support agent. Refunds need approval.",
    )
    before = len(PAYMENTS)
    out = await agent.invoke({"query": "Please refund A-17."}, thread_id="chat-17", backend=backend)
    print(f"agent status: {out.status}")
    for pending in out.pending:
        print(f"  awaiting approval: {pending.value['tool']} {pending.value['args']}")
    out = await agent.invoke(thread_id="chat-17", backend=backend, resume={"call_refund": True})
    print(f"agent status: {out.status}")
    print(f"agent answer: {out.output}")
    print(f"refunds issued by the agent: {len(PAYMENTS) - before}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        backend = SqliteBackend(str(Path(tmp) / "runs.db"))
        thread = "ticket-42"
        try:
            await app.invoke({"query": "Please refund order #7"}, thread_id=thread, backend=backend)
        except ConnectionResetError as exc:
            print(f"first attempt failed: {exc}")
        print("resuming the same thread ...")
        async for event in app.stream(thread_id=thread, backend=backend):
            if event.type in ("node_start", "run_end"):
                print(f"  [{event.seq:>2}] {event.type:<10} {event.node or ''}")
        state = await app.aget_state(thread, backend)
        assert state is not None
        print(f"reply: {state.reply}")
        print(f"log:   {state.log}")
        print(f"payment API calls: {len(PAYMENTS)}  (exactly once, despite the crash)")
        history = await app.aget_history(thread, backend)
        print(f"checkpoints: {len(history)}")
        print()
        await agent_part(backend)
        await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
