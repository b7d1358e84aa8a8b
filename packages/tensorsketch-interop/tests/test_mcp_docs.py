"""The documentation's MCP examples, as written.

docs/mcp.md runs its blocks in tests/test_docs_examples.py; the one it cannot run in-process —
``await serve_stdio(...)``, which serves over stdin — is run here verbatim as a server
subprocess and called by the SDK's own client.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters

DOCS = Path(__file__).resolve().parents[3] / "docs" / "mcp.md"

#: The documentation seed's server example ("Expose your tools (server)"), character for character.
SEED_SERVER = '''from tensorsketch import tool
from tensorsketch.interop.mcp import serve_stdio

@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

await serve_stdio([add], name="my-tools")   # runs over stdio until closed
'''

SEED_CLIENT = """from tensorsketch import create_agent
from tensorsketch.interop.mcp import mcp_tools, stdio_session

async with stdio_session("python", "weather_server.py") as session:
    tools = await mcp_tools(session)              # remote tools → TensorSketch tools
    agent = create_agent(provider, tools=tools)
    result = await agent.invoke({"query": "what's the weather in Paris?"})
"""


def python_blocks() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


def test_the_docs_carry_the_seed_examples_unchanged() -> None:
    blocks = python_blocks()
    assert SEED_SERVER in blocks
    assert SEED_CLIENT in blocks  # run by tests/test_docs_examples.py in page order


async def test_the_serve_stdio_example_serves_the_sdk_client(h: Any, tmp_path: Path) -> None:
    snippet = tmp_path / "serve_example.py"
    snippet.write_text(SEED_SERVER, encoding="utf-8")
    params = StdioServerParameters(
        command=h.python, args=[str(h.servers / "run_snippet.py"), str(snippet)]
    )
    async with Client(params) as client:
        assert client.server_info is not None and client.server_info.name == "my-tools"
        (listed,) = (await client.list_tools()).tools
        assert listed.name == "add" and listed.description == "Add two integers."
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert isinstance(result.content[0], types.TextContent) and result.content[0].text == "5"
