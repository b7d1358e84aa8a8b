# ruff: noqa
# fmt: off
# "Loops": a node repeated until a predicate holds, then END.
from tensorsketch import Graph, START

g = Graph(State).add(Refine)
g.edge(START, "Refine").loop("Refine", until=lambda s: s.score >= 0.9)
