"""The support router from "Getting started": classify a query, route it to a specialist.

Run: python examples/support_router.py
"""

import asyncio
from typing import Literal

from tensorsketch import END, START, Context, Graph, Node, Schema

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
        return self.Out(answer=f"[Billing] Looking into your billing question: {inp.query}")


class Tech(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=f"[Tech] Let's debug that: {inp.query}")


class Fallback(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=f"[General] Thanks for reaching out: {inp.query}")


def route(state: Support) -> str:
    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")


app = (
    Graph(Support)
    .add(Classify)
    .add(Billing)
    .add(Tech)
    .add(Fallback)
    .edge(START, "Classify")
    .conditional("Classify", route)
    .edge("Billing", END)
    .edge("Tech", END)
    .edge("Fallback", END)
).compile()

if __name__ == "__main__":
    for query in ("I'd like a refund on my invoice", "The app shows an error", "Hello!"):
        out = asyncio.run(app.invoke({"query": query}))
        print(f"{out.intent:<8} {out.answer}")
