"""The order scenario's turn-taking (tensorsketch.testing.order): workers of a fan-out run one
after another, and nothing of a finished run stays behind."""

from __future__ import annotations

import gc
from collections.abc import Callable

from tensorsketch.context import Context
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing import order
from tensorsketch.testing.order import ORDER_INPUT, order_graph


class _Tally:
    def __init__(self) -> None:
        self.log: list[str] = []

    def perform(self, ctx: Context, name: str) -> Callable[[], str]:
        def effect() -> str:
            self.log.append(name)
            return f"receipt:{name}"

        return effect

    def after(self, ctx: Context, where: str) -> None:
        self.log.append(where)


async def test_workers_take_turns_and_leave_no_lock_behind() -> None:
    tally = _Tally()
    graph, backend = order_graph(tally, take_turns=True), InMemoryBackend()
    for n in range(3):
        out = await graph.invoke(dict(ORDER_INPUT), thread_id=f"order-{n}", backend=backend)
        assert len(out.receipts) == 3
    # Each worker's effect and its after-hook come together: one worker at a time.
    shipped = [e for e in tally.log if "ship:" in e]
    assert shipped[:6] == [
        "ship:book",
        "after-ship:book",
        "ship:lamp",
        "after-ship:lamp",
        "ship:mug",
        "after-ship:mug",
    ]
    gc.collect()
    assert len(order._TURNS) == 0  # a lock per superstep run used to stay for good
