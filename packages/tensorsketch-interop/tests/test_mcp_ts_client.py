"""The official MCP TypeScript SDK client (``@modelcontextprotocol/sdk``, pinned in tests/js)
against our notes server (mcp_servers/notes_server.py) over stdio and over streamable HTTP on
uvicorn: tools with progress and logs, resources, templates, subscriptions, prompts and
completions (tests/js/ts_client.mjs does the calls and prints what it saw)."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.interop.mcp import mcp_app

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "js" / "ts_client.mjs"
NOTES = HERE / "mcp_servers" / "notes_server.py"


async def run_ts_client(*args: str) -> dict[str, Any]:
    client = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(client.communicate(), 120)
    assert client.returncode == 0, err.decode(errors="replace")
    seen: dict[str, Any] = json.loads(out)
    return seen


def check(seen: dict[str, Any], logo: bytes) -> None:
    assert seen["server"] == {"name": "notes", "version": "1.2.3"}
    caps = seen["capabilities"]
    assert caps["resources"]["subscribe"] is True
    assert {"logging", "completions", "prompts", "tools"} <= set(caps)
    assert seen["tools"] == ["write_note"]
    assert seen["resources"] == [
        ["notes://index", "text/markdown"],
        ["notes://logo.png", "image/png"],
    ]
    assert seen["templates"] == ["notes://topics/{topic}"]
    assert seen["index"][0]["text"] == "- paris\n- parsley\n- python"
    assert base64.b64decode(seen["logo"][0]["blob"]) == logo
    assert seen["paris"] == [
        {"uri": "notes://topics/paris", "mimeType": "text/plain", "text": "Capital of France."}
    ]
    assert seen["missing"]["code"] == -32002
    assert "no note about 'rome'" in seen["missing"]["message"]
    assert seen["prompts"][0]["arguments"] == [
        {"name": "topic", "required": True},
        {"name": "style", "required": False},
    ]
    assert [m["content"]["text"] for m in seen["prompt"]] == [
        "Summarize the note about parsley (short): A herb.",
        "Here is the summary:",
    ]
    assert seen["completePrompt"] == {"values": ["paris", "parsley"], "total": 2, "hasMore": False}
    assert seen["completeTemplate"]["values"] == ["python"]
    assert seen["written"] == [{"type": "text", "text": "saved python"}]
    assert seen["progress"] == [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]]
    assert seen["updates"] == ["notes://topics/python"]
    assert seen["logs"] == [
        ["debug", None, "writing python"],
        ["warning", "notes", "python overwritten"],
    ]
    assert seen["after"] == "A snake."


def load_notes() -> Any:
    spec = importlib.util.spec_from_file_location("notes_ts", NOTES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
async def test_the_ts_sdk_client_over_stdio(js_modules: Path) -> None:
    check(await run_ts_client("stdio", sys.executable, str(NOTES)), load_notes().LOGO)


@pytest.mark.slow
async def test_the_ts_sdk_client_over_streamable_http(js_modules: Path, h: Any) -> None:
    notes = load_notes()
    app = mcp_app(
        [notes.write_note],
        "notes",
        resources=[notes.index, notes.logo, notes.note],
        prompts=[notes.summarize],
        version="1.2.3",
    )
    async with h.serving(app) as base:
        seen = await run_ts_client("http", f"{base}/mcp")
    check(seen, notes.LOGO)
