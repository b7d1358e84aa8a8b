# ruff: noqa
# fmt: off
# "Holes": a typed interface with a deferred body, one-line port classes.
from tensorsketch import Context, Hole, Node, Schema


class BillingAgent(Node):
    class In(Schema):  query: str
    class Out(Schema): answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        raise Hole("Answer billing questions using the KB tool")
