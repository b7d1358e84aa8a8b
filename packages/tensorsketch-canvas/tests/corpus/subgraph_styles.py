# ruff: noqa
# fmt: off
# Subgraph nodes (`add(compiled_graph)`) in the statement and >> styles, one renamed.
from tensorsketch import Graph, Schema, START, END


class Inner(Schema):
    topic: str
    notes: list[str] = []
    scratch: str = ""


class Outer(Schema):
    topic: str
    notes: list[str] = []
    answer: str = ""


inner = Graph(Inner, name="Dig")
inner.add(Search)
inner.edge(START, "Search")
inner.edge("Search", END)
dig = inner.compile()

stmt = Graph(Outer)
stmt.add(dig)
stmt.add(dig, name="Deep")
stmt.add(Write)
stmt.edge(START, "Dig")
stmt.edge("Dig", "Deep")
stmt.edge("Deep", "Write")
stmt.edge("Write", END)

ops = Graph(Outer)
digging, writing = ops.nodes(dig, Write)
START >> digging >> writing >> END
