# ruff: noqa
# fmt: off
# "The >> wiring surface": handles from g.nodes(...) and a Router.
from tensorsketch import Graph, Router, START, END

g = Graph(Support)
classify, billing, tech = g.nodes(Classify, Billing, Tech)

START >> classify                                       # entry
classify >> Router(route, billing=billing, tech=tech)   # conditional fan-out
billing >> END                                          # terminate a branch
tech >> END

app = g.compile()
