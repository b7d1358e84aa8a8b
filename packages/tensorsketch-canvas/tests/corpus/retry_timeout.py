# ruff: noqa
# fmt: off
# "Retry and timeout on any node" from the documentation: a flaky call, retried, bounded.
import asyncio
from tensorsketch import Schema, Node, Graph, Context, RetryPolicy, START, END


class State(Schema):
    city: str
    forecast: str = ""


class Fetch(Node):
    class In(Schema):
        city: str
    class Out(Schema):
        forecast: str

    async def run(self, ctx: Context, inp: In) -> Out:
        report = await ctx.step("weather", lambda: f"sunny in {inp.city}")
        return self.Out(forecast=report)


class Announce(Node):
    class In(Schema):
        forecast: str
    class Out(Schema):
        forecast: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(forecast=inp.forecast.upper())


app = (
    Graph(State, node_timeout=30)
    .add(Fetch, retry=RetryPolicy(max_attempts=4, initial_interval=0.5), timeout=5)
    .add(Announce, name="Say")
    .edge(START, "Fetch")
    .edge("Fetch", "Say")
    .edge("Say", END)
).compile(max_concurrency=8)

if __name__ == "__main__":
    print(asyncio.run(app.invoke({"city": "Oslo"})).forecast)
