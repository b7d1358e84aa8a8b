"""The order scenario the durability checks share: charge an order, ship its items with a
``Send`` fan-out, send a note.

It has every shape durability must get right — effects before and after a fan-out, an
idempotency key, a reducer folding the workers' writes in plan order — so the backend
conformance suite and the crash harness both run it, each counting the side effects its own
way (an in-process tally with injected failures; a SQLite ledger that outlives a killed
child process) through :class:`OrderEffects`.
"""

from __future__ import annotations

import asyncio
import operator
import weakref
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.schema import Schema
from tensorsketch.send import Send

__all__ = ["ORDER_INPUT", "OrderEffects", "OrderState", "order_graph"]

#: A run of the scenario: one charge, three shipments, one note.
ORDER_INPUT: dict[str, Any] = {"order": "A-17", "items": ["book", "lamp", "mug"]}


class OrderState(Schema):
    """An order is reserved and charged, each item shipped by its own worker, then noted."""

    order: str
    items: list[str] = []
    reserved: str = ""
    charged: str = ""
    receipts: Annotated[list[str], Reducer(operator.add)] = []
    note: str = ""
    #: Read by no node: a fork can change it without changing any effect's input.
    label: str = ""


class OrderEffects(Protocol):
    """How a check performs and counts the scenario's side effects."""

    def perform(self, ctx: Context, name: str) -> Callable[[], str]:
        """The side effect ``name`` (``reserve``, ``charge``, ``ship:<item>``, ``notify``),
        for ``ctx.step`` to run: it counts the call and returns a receipt."""
        ...

    def after(self, ctx: Context, where: str) -> None:
        """Called once an effect's result is back (``after-charge``, ``after-ship:<item>``):
        the place to inject a failure."""
        ...


#: Held weakly: a superstep's lock lives while its workers wait on it or hold it (the
#: release callback keeps it), so a long crash matrix does not keep one per superstep run.
_TURNS: weakref.WeakValueDictionary[tuple[str | None, int, str], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)


def _turns(ctx: Context) -> asyncio.Lock:
    """One lock per superstep of one run: the fan-out's workers take it in plan order
    (asyncio's lock is first come, first served, and tasks start in plan order). Two runs of
    one thread in one process (a paused stale runner and the one that took over) do not
    share it."""
    key = (ctx.thread_id, ctx.superstep, ctx.run_id)
    lock = _TURNS.get(key)
    if lock is None:
        lock = _TURNS[key] = asyncio.Lock()
    return lock


def order_graph(
    effects: OrderEffects, *, name: str = "order", take_turns: bool = False
) -> CompiledGraph[OrderState]:
    """The scenario, its side effects going through ``effects``.

    ``take_turns`` makes the fan-out's workers run one after another, each completely done
    (effect recorded, writes journaled) before the next starts, so that every point a crash
    harness kills the process at falls between two workers: an effect that completed but
    was not yet recorded when the process died is outside any journal's reach.
    """

    class Charge(Node):
        class In(Schema):
            order: str

        class Out(Schema):
            reserved: str
            charged: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            reserved = await ctx.step("reserve", effects.perform(ctx, "reserve"))
            charged = await ctx.step(
                "charge", effects.perform(ctx, "charge"), idempotency_key=f"charge-{inp.order}"
            )
            effects.after(ctx, "after-charge")
            return self.Out(reserved=reserved, charged=charged)

    class Ship(Node):
        class In(Schema):
            items: list[str]

        class Out(Schema):
            receipts: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            if take_turns:
                turns = _turns(ctx)
                await turns.acquire()
                this_task = asyncio.current_task()
                assert this_task is not None
                this_task.add_done_callback(lambda _: turns.release())
            item = inp.items[0]
            receipt = await ctx.step("ship", effects.perform(ctx, f"ship:{item}"))
            effects.after(ctx, f"after-ship:{item}")
            return self.Out(receipts=[receipt])

    class Note(Node):
        class In(Schema):
            receipts: list[str]
            note: str

        class Out(Schema):
            note: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            sent = await ctx.step("notify", effects.perform(ctx, "notify"))
            return self.Out(note=f"{inp.note}|{sent}:{len(inp.receipts)}")

    def ship_all(state: OrderState) -> list[Send]:
        return [Send("Ship", {"items": [item]}) for item in state.items]

    return (
        Graph(OrderState, name=name)
        .add(Charge)
        .add(Ship)
        .add(Note)
        .edge(START, "Charge")
        .router("Charge", ship_all)
        .edge("Ship", "Note")
        .edge("Note", END)
        .compile()
    )
