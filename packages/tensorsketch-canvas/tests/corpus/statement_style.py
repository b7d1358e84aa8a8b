# ruff: noqa
# fmt: off
# Statement style, annotated builder, node renames and a mapped conditional.
from tensorsketch import Graph, START, END

g: Graph[State] = Graph(State)
g.add(Classify)                 # name = "Classify"
g.add(Classify, name="Triage")  # name = "Triage"
g.add(Billing)
g.add(Tech)
g.edge(START, "Triage")
g.conditional("Triage", lambda s: s.intent, {"billing": "Billing", "tech": "Tech"})
g.edge("Billing", END)
g.edge("Tech", END)
