"""The 10-node chain both ``bench_core.py`` and ``bench_durability.py`` time, built once so
the two scripts measure exactly the same graph.

Imported by the scripts (their folder is first on ``sys.path`` when run as a file); not a
benchmark itself (``bench.py`` runs only ``bench_*.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

CHAIN_LEN = 10


def ts_chain() -> Any:
    """A compiled TensorSketch chain ``N0 -> ... -> N9`` of typed nodes adding one to ``x``."""
    from tensorsketch import END, START, Context, Graph, Node, Schema

    class ChainState(Schema):
        x: int = 0

    class Inc(Node):
        class In(Schema):
            x: int

        class Out(Schema):
            x: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(x=inp.x + 1)

    graph = Graph(ChainState)
    for i in range(CHAIN_LEN):
        graph.add(Inc(), name=f"N{i}")
    graph.edge(START, "N0")
    for i in range(CHAIN_LEN - 1):
        graph.edge(f"N{i}", f"N{i + 1}")
    graph.edge(f"N{CHAIN_LEN - 1}", END)
    return graph.compile()


class ChainState(TypedDict):
    x: int


def inc(s: ChainState) -> dict[str, Any]:
    return {"x": s["x"] + 1}


async def ainc(s: ChainState) -> dict[str, Any]:
    return {"x": s["x"] + 1}


def lg_chain(node: Callable[[ChainState], Any]) -> Any:
    """The same chain as an uncompiled LangGraph ``StateGraph`` (``n0 -> ... -> n9``) over a
    ``TypedDict``, every node ``node`` (``inc`` for ``invoke``, ``ainc`` for ``ainvoke``)."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(ChainState)
    for i in range(CHAIN_LEN):
        graph.add_node(f"n{i}", node)
    graph.add_edge(START, "n0")
    for i in range(CHAIN_LEN - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{CHAIN_LEN - 1}", END)
    return graph
