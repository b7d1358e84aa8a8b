# ruff: noqa
# fmt: off
# "Joins: wait for all" (docs/nodes-and-graphs.md): the long branch ends a superstep later.
import operator
from typing import Annotated, Any

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


class Research(Schema):
    notes: Annotated[list[str], Reducer(operator.add)] = []


class Note(Node):
    """Writes its label: stands in for real work."""

    class Out(Schema):
        notes: list[str]

    def __init__(self, label: str) -> None:
        self.label = label

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(notes=[self.label])


app = (
    Graph(Research)
    .add(Note("Fetch"), name="Fetch")
    .add(Note("Search"), name="Search")
    .add(Note("Rank"), name="Rank")
    .add(Note("Answer"), name="Answer")
    .edge(START, "Fetch")
    .edge(START, "Search")
    .edge("Search", "Rank")
    .edge(["Fetch", "Rank"], "Answer")  # with handles: [fetch, rank] >> answer
    .edge("Answer", END)
    .compile()
)
