"""A compiled graph added to another as a node: shared fields flow in and back, private ones
stay inside, and an interrupt inside the child suspends the whole run.

Run: python examples/subgraphs.py
"""

import asyncio
import operator
from typing import Annotated

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    run_info,
)
from tensorsketch.interrupts import interrupt


class Research(Schema):
    question: str
    notes: Annotated[list[str], Reducer(operator.add)] = []
    draft: str = ""  # private to the research graph


class Search(Node):
    class In(Schema):
        question: str

    class Out(Schema):
        notes: list[str]
        draft: str

    async def run(self, ctx: Context, inp: In) -> Out:
        hit = await ctx.step("search", lambda: f"found: {inp.question}")
        return self.Out(notes=[hit], draft="working notes")


class Check(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        verdict = await interrupt(ctx, f"keep {inp.notes[-1]!r}?")
        return self.Out(notes=[f"checked ({verdict})"])


research = (
    Graph(Research, name="Research")
    .add(Search)
    .add(Check)
    .edge(START, "Search")
    .edge("Search", "Check")
    .edge("Check", END)
    .compile()
)


class Report(Schema):
    question: str
    notes: Annotated[list[str], Reducer(operator.add)] = []
    answer: str = ""


class Write(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer="; ".join(inp.notes))


report = Graph(Report).add(research).add(Write)
report.edge(START, "Research").edge("Research", "Write").edge("Write", END)
app = report.compile()


async def main() -> None:
    backend = InMemoryBackend()
    out = await app.invoke({"question": "tides"}, thread_id="t1", backend=backend)
    (pending,) = run_info(out).interrupts
    print(pending.id, pending.path)  # Research/1:Check:0:interrupt ('Research',)
    out = await app.invoke(thread_id="t1", backend=backend, resume={pending.id: "yes"})
    print(out.answer)  # found: tides; checked (yes)


if __name__ == "__main__":
    asyncio.run(main())
