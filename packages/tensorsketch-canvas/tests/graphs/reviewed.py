"""A parent whose subgraph node Review polishes a draft, then asks for a verdict: the graph
the Studio's subgraph debugger tests open (read as text, written into each test's project)."""

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.interrupts import interrupt


class Review(Schema):
    draft: str = ""
    notes: str = ""  # only the child has it


class Polish(Node):
    class In(Schema):
        draft: str

    class Out(Schema):
        draft: str
        notes: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(draft=inp.draft + "!", notes="polished")


class Ask(Node):
    class In(Schema):
        draft: str

    class Out(Schema):
        draft: str

    async def run(self, ctx: Context, inp: In) -> Out:
        verdict = await interrupt(ctx, f"approve {inp.draft}?")
        return self.Out(draft=f"{inp.draft} ({verdict})")


review = (
    Graph(Review, name="Review")
    .add(Polish)
    .add(Ask)
    .edge(START, "Polish")
    .edge("Polish", "Ask")
    .edge("Ask", END)
    .compile()
)


class Doc(Schema):
    draft: str = ""
    published: bool = False


class Publish(Node):
    class In(Schema):
        draft: str

    class Out(Schema):
        published: bool

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(published=True)


app = (
    Graph(Doc)
    .add(review)
    .add(Publish)
    .edge(START, "Review")
    .edge("Review", "Publish")
    .edge("Publish", END)
    .compile()
)
