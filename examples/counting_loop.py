"""A loop as a cycle: one node repeats until a predicate holds.

Run: python examples/counting_loop.py
"""

import asyncio
from operator import add
from typing import Annotated

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


class Counter(Schema):
    count: int = 0
    limit: int = 3
    log: Annotated[list[str], Reducer(add)] = []


class Increment(Node):
    class In(Schema):
        count: int

    class Out(Schema):
        count: int
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        n = inp.count + 1
        return self.Out(count=n, log=[f"superstep {ctx.superstep}: count -> {n}"])


def keep_going(state: Counter) -> str:
    return END if state.count >= state.limit else "Increment"


app = (
    Graph(Counter).add(Increment).edge(START, "Increment").conditional("Increment", keep_going)
).compile()

if __name__ == "__main__":
    out = asyncio.run(app.invoke({"limit": 3}))
    print(out.count)
    print("\n".join(out.log))
