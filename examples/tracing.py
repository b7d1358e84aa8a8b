"""Tracing, offline: an agent's span tree, its headline numbers, a trace file and its report.

Run: python examples/tracing.py

A scripted FakeProvider stands in for the model, so this needs no API key or network. The run
is traced by a MultiTracer that keeps the spans in memory *and* streams them to a JSON Lines
file; the file is then read back as a run report (what ``tensorsketch trace report`` prints).
A plain graph shows ``ctx.span`` marking sub-steps of your own code.
"""

import asyncio
import tempfile
from pathlib import Path

from tensorsketch import (
    END,
    START,
    Completion,
    Context,
    FakeProvider,
    FileTracer,
    Graph,
    InMemoryTracer,
    MultiTracer,
    Node,
    Schema,
    Usage,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.observability.report import run_report


@tool
async def search(query: str) -> str:
    """Search the TensorSketch documentation."""
    return "TensorSketch: typed agent graphs on a durable BSP runtime."


# The model asks for one search, then answers. Usage and model id drive the cost estimate.
model = FakeProvider(
    [
        Completion(
            message=assistant(
                tool_calls=[ToolCall(id="c1", name="search", args={"query": "tensorsketch"})]
            ),
            usage=Usage(input_tokens=1000, output_tokens=120),
            model="claude-sonnet-4-6",
        ),
        Completion(
            message=assistant("TensorSketch builds typed agent graphs on a durable runtime."),
            usage=Usage(input_tokens=1200, output_tokens=120),
            model="claude-sonnet-4-6",
        ),
    ],
    model="claude-sonnet-4-6",
)
agent = create_agent(model, [search])


class Doc(Schema):
    document: str
    score: float = 0.0


class Score(Node):
    """Your own code traced with ctx.span: each block is a span under this node."""

    class In(Schema):
        document: str

    class Out(Schema):
        score: float

    async def run(self, ctx: Context, inp: In) -> Out:
        with ctx.span("parse-invoice"):
            words = inp.document.split()
        with ctx.span("score", model="scorer-v2") as span:
            span.set_attribute("words", len(words))
            return self.Out(score=min(1.0, len(words) / 10))


scorer = Graph(Doc).add(Score).edge(START, "Score").edge("Score", END).compile()


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.jsonl"
        collector = InMemoryTracer()
        with FileTracer(path) as file_tracer:
            tracer = MultiTracer(collector, file_tracer)
            out = await agent.invoke({"query": "what is tensorsketch?"}, tracer=tracer)

        print(out.output, end="\n\n")
        print(collector.trace.render())
        print(collector.trace.summary(), end="\n\n")
        print(f"{path.name}: {len(path.read_text().splitlines())} spans, one JSON object per line")
        print(run_report(path).render(), end="\n\n")

    own = InMemoryTracer()
    await scorer.invoke({"document": "invoice 42: two widgets, one gadget"}, tracer=own)
    print(own.trace.render())


if __name__ == "__main__":
    asyncio.run(main())
