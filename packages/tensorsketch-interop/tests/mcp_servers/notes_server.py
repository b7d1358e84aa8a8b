"""A notes server serving resources, prompts, completions, progress and logs, written with
TensorSketch's serving API: the official Python and TypeScript SDK clients use it in
test_mcp_resources_prompts.py. ``python notes_server.py`` serves it over stdio."""

from __future__ import annotations

import asyncio
import base64

from tensorsketch import Context, tool
from tensorsketch.interop.mcp import (
    build_mcp_server,
    log,
    notify_resource_updated,
    prompt,
    resource,
    serve_stdio,
)
from tensorsketch.messages import Message

NOTES = {"paris": "Capital of France.", "parsley": "A herb.", "python": "A language."}
LOGO = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def topics(typed: str) -> list[str]:
    """The note topics starting with what the user typed."""
    return sorted(t for t in NOTES if t.startswith(typed))


@resource("notes://index", mime_type="text/markdown")
def index() -> str:
    """Every note topic, one a line."""
    return "\n".join(f"- {t}" for t in sorted(NOTES))


@resource("notes://logo.png", mime_type="image/png")
def logo() -> bytes:
    """The notes logo."""
    return LOGO


@resource("notes://topics/{topic}", complete={"topic": topics})
async def note(topic: str) -> str:
    """One note, by topic."""
    if topic not in NOTES:
        msg = f"no note about {topic!r}"
        raise LookupError(msg)
    return NOTES[topic]


@prompt(complete={"topic": topics, "style": ["short", "detailed"]})
def summarize(topic: str, style: str = "short") -> list[Message | str]:
    """Ask for a summary of one note."""
    return [
        f"Summarize the note about {topic} ({style}): {NOTES.get(topic, '(none)')}",
        Message(role="assistant", content="Here is the summary:"),
    ]


@tool
async def write_note(topic: str, text: str, ctx: Context) -> str:
    """Write a note in three steps, reporting progress and logging as it goes."""
    await log("debug", f"writing {topic}")
    for step in (1, 2, 3):
        await ctx.emit("progress", {"progress": step, "total": 3, "message": f"step {step}"})
        await asyncio.sleep(0.01)
    await ctx.emit("log", {"level": "warning", "data": f"{topic} overwritten", "logger": "notes"})
    NOTES[topic] = text
    await notify_resource_updated(f"notes://topics/{topic}")
    return f"saved {topic}"


def build() -> object:
    return build_mcp_server(
        [write_note],
        "notes",
        resources=[index, logo, note],
        prompts=[summarize],
        version="1.2.3",
    )


if __name__ == "__main__":
    asyncio.run(
        serve_stdio(
            [write_note],
            "notes",
            resources=[index, logo, note],
            prompts=[summarize],
            version="1.2.3",
        )
    )
