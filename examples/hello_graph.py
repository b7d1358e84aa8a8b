"""Hello, graph: one typed node over a typed state. Run: python examples/hello_graph.py"""

import asyncio

from tensorsketch import END, START, Context, Graph, Node, Schema


class State(Schema):  # the shared, typed state — each field is a channel
    text: str
    shout: str = ""


class Shout(Node):
    class In(Schema):  # reads state.text
        text: str

    class Out(Schema):  # writes state.shout
        shout: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(shout=inp.text.upper() + "!")


app = Graph(State).add(Shout).edge(START, "Shout").edge("Shout", END).compile()

if __name__ == "__main__":
    out = asyncio.run(app.invoke({"text": "hello"}))
    print(out.shout)  # HELLO!
