"""Graph-level map/reduce with Send: one Square worker per number, merged by a reducer.

Run: python examples/map_reduce.py
"""

import asyncio
from operator import add
from typing import Annotated

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send


class State(Schema):
    numbers: list[int] = []
    n: int = 0  # per-worker input slot
    squares: Annotated[list[int], Reducer(add)] = []  # workers merge here
    total: int = 0


class Split(Node):
    class In(Schema):
        numbers: list[int]

    class Out(Schema):
        pass

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out()


class Square(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        squares: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(squares=[inp.n * inp.n])


class Total(Node):
    class In(Schema):
        squares: list[int]

    class Out(Schema):
        total: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(total=sum(inp.squares))


g = Graph(State)
g.add(Split).add(Square).add(Total)
g.edge(START, "Split")
g.router("Split", lambda s: [Send("Square", {"n": x}) for x in s.numbers])
g.edge("Square", "Total")  # every worker converges on one Total (deduped)
g.edge("Total", END)
app = g.compile()

if __name__ == "__main__":
    out = asyncio.run(app.invoke({"numbers": [1, 2, 3, 4, 5]}))
    print(out.squares, out.total)  # [1, 4, 9, 16, 25] 55
