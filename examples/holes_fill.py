"""Holes to code: a typed hole filled by a model, verified before it lands.

A small project (strict mypy, like most typed projects) has a node whose body is still
``raise Hole(...)``. ``fill_hole`` asks a model for the body — here a scripted one, so the
example runs offline — and checks each candidate in subprocesses: mypy with the project's
settings, then contract tests generated from the node's ports (plus the example given). The
first candidate works but has an untyped helper, which strict mypy rejects; the model is shown
the error and its repair passes, so only then is the body spliced into the file. The fill is a
durable, traced run: its thread, its model calls and their cost are reported.

Run: python examples/holes_fill.py   (needs mypy, pytest and hypothesis: the `fill` extra)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from tensorsketch import FakeProvider, InMemoryTracer
from tensorsketch.canvas import find_holes
from tensorsketch.canvas.fill import Example, fill_hole

PROJECT = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp(prefix="ts-holes-"))

GRAPH = '''\
from tensorsketch import END, START, Context, Graph, Hole, Node, Schema


class Ticket(Schema):
    subject: str
    slug: str = ""


class Slugify(Node):
    """Turn a ticket's subject into a URL slug."""

    class In(Schema):
        subject: str

    class Out(Schema):
        slug: str

    async def run(self, ctx: Context, inp: In) -> Out:
        raise Hole("lower-case words of the subject joined by '-', punctuation dropped")


app = Graph(Ticket).add(Slugify).edge(START, "Slugify").edge("Slugify", END).compile()
'''

SIGNATURE = "async def run(self, ctx: Context, inp: In) -> Out:"
# What a model might answer first: right, but the helper has no annotations.
FIRST = f"""```python
{SIGNATURE}
    import re

    def words(text):
        return re.findall(r"[a-z0-9]+", text.lower())

    return self.Out(slug="-".join(words(inp.subject)))
```"""
# Its answer once shown mypy's complaint.
REPAIRED = f"""```python
{SIGNATURE}
    import re

    words: list[str] = re.findall(r"[a-z0-9]+", inp.subject.lower())
    return self.Out(slug="-".join(words))
```"""


async def main() -> None:
    (PROJECT / "pyproject.toml").write_text(
        '[project]\nname = "tickets"\nversion = "0"\n\n[tool.mypy]\nstrict = true\n',
        encoding="utf-8",
    )
    graph_file = PROJECT / "tickets.py"
    graph_file.write_text(GRAPH, encoding="utf-8")
    for hole in find_holes(PROJECT):
        print(f"hole: {hole.node} — {hole.spec}")

    model = FakeProvider([FIRST, REPAIRED])  # or create_provider("openai", model="gpt-4o")
    tracer = InMemoryTracer()
    result = await fill_hole(
        graph_file,
        "Slugify",
        model,
        examples=[Example({"subject": "Refund, please!"}, {"slug": "refund-please"})],
        max_examples=10,
        tracer=tracer,
    )
    print(f"outcome: {result.outcome} after {result.attempts} attempts (run {result.thread_id})")
    repair = model.calls[1].last.text
    print("the repair prompt showed mypy's complaint:", "no-untyped-def" in repair)
    print(f"passed: {', '.join(result.passed)}")
    print(result.diff)
    spans = [s for s in tracer.spans if s.kind == "model"]
    print(f"{len(spans)} model calls traced, {result.tokens} tokens")
    print(f"holes left: {len(find_holes(PROJECT))}")
    if not result.ok:
        raise SystemExit(f"the fill did not pass: {result.failures}")


if __name__ == "__main__":
    asyncio.run(main())
