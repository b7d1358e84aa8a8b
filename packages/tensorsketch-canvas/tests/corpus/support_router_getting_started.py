# ruff: noqa
# fmt: off
# The support router of "Getting started": typed state, a hole, a dynamic conditional.
from typing import Literal
from tensorsketch import Schema
from tensorsketch import Node, Context
from tensorsketch import Hole
from tensorsketch import Graph, START, END

Intent = Literal["billing", "tech", "other"]

class Support(Schema):
    query: str
    intent: Intent = "other"
    answer: str = ""

class Classify(Node):
    class In(Schema):
        query: str
    class Out(Schema):
        intent: Intent

    async def run(self, ctx: Context, inp: In) -> Out:
        q = inp.query.lower()
        if any(w in q for w in ("refund", "charge", "invoice")):
            return self.Out(intent="billing")
        if any(w in q for w in ("error", "crash", "bug")):
            return self.Out(intent="tech")
        return self.Out(intent="other")

class Billing(Node):
    class In(Schema):
        query: str
    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        raise Hole("Answer billing questions using the KB tool")

def route(state: Support) -> str:
    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")

app = (
    Graph(Support)
    .add(Classify).add(Billing).add(Tech).add(Fallback)
    .edge(START, "Classify")
    .conditional("Classify", route)
    .edge("Billing", END).edge("Tech", END).edge("Fallback", END)
).compile()
