"""The research graph, defined in its own module: ``subgraph_imported.py`` adds it as a node.

The canvas reads it from here when it opens the parent (never importing it), and an edit
made inside the opened subgraph in the Studio is written to this file.
"""

import operator
from typing import Annotated

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


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
        return self.Out(notes=[f"checked {len(inp.notes)} note(s)"])


research = Graph(Research, name="Research")
research.add(Search)
research.add(Check)
research.edge(START, "Search")
research.edge("Search", "Check")
research.edge("Check", END)
research_app = research.compile()
