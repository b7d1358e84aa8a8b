# ruff: noqa
# fmt: off
# "Hello, graph" from the documentation: a two-step pipeline, fluent style.
import asyncio
from tensorsketch import Schema, Node, Graph, Context, START, END


class State(Schema):        # the shared, typed state — each field is a channel
    text: str
    shout: str = ""


class Shout(Node):
    class In(Schema):       # this node reads state.text ...
        text: str
    class Out(Schema):      # ... and writes state.shout
        shout: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(shout=inp.text.upper() + "!")


app = (
    Graph(State)
    .add(Shout)
    .edge(START, "Shout")
    .edge("Shout", END)
).compile()

if __name__ == "__main__":
    out = asyncio.run(app.invoke({"text": "hello"}))
    print(out.shout)   # HELLO!
