"""An MCP server with resources, a template, a prompt, completions and a tool that reports
progress and logs, written as plain Python; read back with TensorSketch's client helpers
over stdio (no API key, no network).

1. This file re-launches itself with ``--serve`` as an MCP server subprocess
   (``serve_stdio``): ``@resource`` and ``@prompt`` functions beside one ``@tool``.
2. ``stdio_session`` connects; the helpers list and read the resources, complete a prompt
   argument, render the prompt into messages, and watch a note while the tool rewrites it.
3. The tool's progress arrives as ``"progress"`` events of the calling graph's stream.

Run: python examples/mcp_resources_prompts.py
"""

from __future__ import annotations

import asyncio
import sys

from tensorsketch import END, START, Context, Graph, Node, Schema, tool
from tensorsketch.interop.mcp import (
    complete,
    get_prompt,
    list_resource_templates,
    list_resources,
    log,
    mcp_tools,
    notify_resource_updated,
    prompt,
    read_resource,
    resource,
    serve_stdio,
    stdio_session,
    watch_resource,
)

NOTES = {"paris": "Capital of France.", "parsley": "A herb.", "python": "A language."}


def topics(typed: str) -> list[str]:
    """Topics starting with what the user typed (a completion function)."""
    return sorted(t for t in NOTES if t.startswith(typed))


@resource("notes://index", mime_type="text/markdown")
def index() -> str:
    """Every topic, one a line."""
    return "\n".join(f"- {t}" for t in sorted(NOTES))


@resource("notes://topics/{topic}", complete={"topic": topics})
def note(topic: str) -> str:
    """One note."""
    if topic not in NOTES:
        msg = f"no note about {topic!r}"
        raise LookupError(msg)
    return NOTES[topic]


@prompt(complete={"topic": topics})
def summarize(topic: str) -> str:
    """Ask for a summary of one note."""
    return f"Summarize: {NOTES.get(topic, '(no note)')}"


@tool
async def rewrite(topic: str, text: str, ctx: Context) -> str:
    """Rewrite a note in three steps."""
    await log("info", f"rewriting {topic}")
    for step in (1, 2, 3):
        await ctx.emit("progress", {"progress": step, "total": 3, "message": f"step {step}"})
    NOTES[topic] = text
    await notify_resource_updated(f"notes://topics/{topic}")
    return f"rewrote {topic}"


class Result(Schema):
    """What the remote tool said."""

    said: str = ""


class CallRemote(Node):
    """Call the server's tool from inside a run; its progress joins this run's stream."""

    class In(Schema):
        said: str

    class Out(Schema):
        said: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(said=await ctx.deps.run({"topic": "python", "text": "A snake."}, ctx))


async def main() -> None:
    async with stdio_session(sys.executable, __file__, "--serve") as session:
        print([r.uri for r in await list_resources(session)])
        print([t.uri_template for t in await list_resource_templates(session)])
        print(await read_resource(session, "notes://index"))
        print("complete 'pa':", await complete(session, "topic", "pa", prompt="summarize"))
        (message,) = await get_prompt(session, "summarize", {"topic": "parsley"})
        print(f"{message.role}: {message.text}")

        watching = watch_resource(session, "notes://topics/python")
        print("python:", await anext(watching))
        (remote,) = await mcp_tools(session)
        graph = Graph(Result, name="caller").add(CallRemote)
        graph = graph.edge(START, "CallRemote").edge("CallRemote", END)
        async for event in graph.compile().stream({}, deps=remote):
            if event.type == "progress":
                print("progress:", event.data["message"])
        print("python now:", await asyncio.wait_for(anext(watching), 10))
        await watching.aclose()


if __name__ == "__main__":
    if "--serve" in sys.argv:
        asyncio.run(serve_stdio([rewrite], "notes", resources=[index, note], prompts=[summarize]))
    else:
        asyncio.run(main())
