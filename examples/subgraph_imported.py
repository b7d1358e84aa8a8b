"""A subgraph defined in another module: ``research_app`` comes from research_desk/research.py.

At run time it is a subgraph node like any other. On the canvas (``tensorsketch studio
examples/subgraph_imported.py``) the Research box opens into the graph of
research_desk/research.py — read from that file, never imported — and an edit made in there
is written to that file, not to this one.

Run: python examples/subgraph_imported.py
"""

import asyncio
import operator
from pathlib import Path
from typing import Annotated

from research_desk.research import research_app

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


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


report = Graph(Report).add(research_app).add(Write)
report.edge(START, "Research").edge("Research", "Write").edge("Write", END)
app = report.compile()


async def main() -> None:
    out = await app.invoke({"question": "tides"})
    print(out.answer)  # found: tides; checked 1 note(s)


def on_the_canvas() -> None:
    """What the canvas reads: the Research node, with its graph from the other module."""
    from tensorsketch.canvas import extract

    here = Path(__file__)
    node = extract(here.read_text(), "app", path=here).node("Research")
    assert node.child is not None
    print(node.subgraph_file, [n.name for n in node.child.nodes])
    # research_desk/research.py ['Search', 'Check']


if __name__ == "__main__":
    asyncio.run(main())
    on_the_canvas()
