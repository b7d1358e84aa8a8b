"""``tensorsketch mcp``: how a server that never connects is named and reported, and the
arguments refused at parse time."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.cli import main
from tensorsketch.interop.mcp import MCPTimeoutError, stdio_session
from tensorsketch.interop.mcp._session import command_label

TENSORSKETCH = str(Path(sys.executable).with_name("tensorsketch"))
PYTHON = os.path.basename(sys.executable)
SLEEPER = ("-c", "import time; time.sleep(30)")


def test_the_cli_names_a_server_that_never_connects_by_its_command_and_says_timeout() -> None:
    out = subprocess.run(
        [TENSORSKETCH, "mcp", "tools", "--timeout", "1", "--", sys.executable, *SLEEPER],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr == (
        f"tensorsketch mcp tools: the MCP server `{PYTHON} -c 'import time; time.sleep(30)'` "
        "did not finish connecting within 1.0s; check that the command or URL starts an MCP "
        "server, or pass a larger --timeout.\n"
    ), "one line, and no 'Future exception was never retrieved' after it"


async def test_a_connect_timeout_leaves_no_failure_unretrieved() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))

    async def attempt() -> str:
        try:
            async with stdio_session(sys.executable, *SLEEPER, timeout=0.5):
                pytest.fail("connected to a process that speaks no MCP")
        except MCPTimeoutError as exc:
            return str(exc)
        return ""

    try:
        message = await attempt()
        gc.collect()  # an unretrieved exception is reported when its future is collected
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [c.get("message") for c in reported] == []
    assert f"the MCP server `{PYTHON} -c 'import time; time.sleep(30)'` did not" in message
    assert "pass a larger `timeout=`" in message, "the API's hint names the argument"


def test_a_stdio_servers_label_is_its_command_line_shortened(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text("")
    assert command_label("/usr/bin/python3", [str(script), "--db", "/no/such"]) == (
        "python3 server.py --db /no/such"
    ), "a script file goes by its name; other arguments stay as given"
    assert command_label("sleep", ["30"]) == "sleep 30"
    assert command_label("npx", ["-y", "a b"]) == "npx -y 'a b'"
    long = command_label("node", ["x" * 100])
    assert len(long) == 60 and long.startswith("node xxx") and long.endswith("...")


@pytest.mark.parametrize("bad", ["99999", "-1", "65536"])
def test_mcp_serve_refuses_a_port_out_of_range(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["mcp", "serve", "my_tools_mod:tools", "--http", "--port", bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument --port: must be 0-65535, got {bad}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--url", "not-a-url"], "argument --url: must be an http:// or https:// URL"),
        (["--url", "ftp://h/mcp"], "argument --url: must be an http:// or https:// URL"),
        (["--timeout", "-1", "--", "python", "x.py"], "must be more than 0 seconds, got -1"),
    ],
)
def test_mcp_tools_refuses_a_bad_url_or_timeout_by_name(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["mcp", "tools", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err


def test_tool_listing_names_model_arguments_by_their_schema_name() -> None:
    """`mcp tools` printed a pydantic-model argument (a `$ref`) as `any`."""
    from tensorsketch.interop.mcp._cli import _type_of

    assert _type_of({"$ref": "#/$defs/Point"}) == "Point"
    assert _type_of({"allOf": [{"$ref": "#/$defs/Point"}], "description": "where"}) == "Point"
    assert _type_of({"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]}) == "Point|null"
    assert _type_of({"type": "integer"}) == "integer" and _type_of({}) == "any"
