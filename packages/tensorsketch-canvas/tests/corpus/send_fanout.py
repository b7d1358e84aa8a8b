# ruff: noqa
# fmt: off
# "Dynamic fan-out with Send": the router's targets are decided at run time.
from operator import add
from typing import Annotated
from tensorsketch import Graph, Reducer, Schema, Send, START, END

class State(Schema):
    numbers: list[int] = []
    n: int = 0                                    # per-worker input slot
    squares: Annotated[list[int], Reducer(add)] = []   # workers merge here
    total: int = 0

g = Graph(State)
g.add(Split).add(Square).add(Total)
g.edge(START, "Split")
g.router("Split", lambda s: [Send("Square", {"n": x}) for x in s.numbers])
g.edge("Square", "Total")                         # every worker converges on one Total (deduped)
g.edge("Total", END)
