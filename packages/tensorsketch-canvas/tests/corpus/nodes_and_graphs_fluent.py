# ruff: noqa
# fmt: off
# "Nodes & graphs": the fluent builder with a routing function; names are left undefined.
from tensorsketch import Graph, START, END

app = (
    Graph(State)
    .add(Classify).add(Billing).add(Tech)
    .edge(START, "Classify")                # entry
    .conditional("Classify", route)         # dynamic routing out of Classify
    .edge("Billing", END).edge("Tech", END) # terminals
).compile()
