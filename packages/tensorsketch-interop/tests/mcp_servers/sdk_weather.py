"""A third-party MCP server built with the SDK's own ``MCPServer`` (not TensorSketch's).

Every tool call appends its name to the file named by ``CALL_LOG`` (when set), so a test can
count what reached the server across restarts. Run as ``python sdk_weather.py``.
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("weather", instructions="Weather for a few cities.")


def _log(name: str) -> None:
    path = os.environ.get("CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {os.getpid()}\n")


class Forecast(BaseModel):
    city: str
    days: int
    high_c: list[int]


@server.tool()
def get_weather(city: str) -> str:
    """Current weather for a city."""
    _log("get_weather")
    return {"Paris": "sunny, 21°C", "Oslo": "snow, -3°C"}.get(city, f"no data for {city}")


@server.tool()
def forecast(city: str, days: int = 3) -> Forecast:
    """A multi-day forecast (structured)."""
    _log("forecast")
    return Forecast(city=city, days=days, high_c=[20 + i for i in range(days)])


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    _log("divide")
    return a / b


@server.tool()
def slow(seconds: float = 3600) -> str:
    """Take a long time to answer."""
    _log("slow")
    time.sleep(seconds)
    return "done"


@server.tool()
def big(chars: int) -> str:
    """Return a very long text."""
    _log("big")
    return "x" * chars


@server.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    _log("crash")
    os._exit(3)


@server.resource("weather://cities", mime_type="text/plain")
def cities() -> str:
    """The cities this server knows."""
    return "Paris\nOslo"


@server.prompt()
def weather_report(city: str) -> str:
    """Ask for a weather report."""
    return f"Write a short weather report for {city}."


if __name__ == "__main__":
    with open(os.environ.get("PID_FILE", os.devnull), "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    server.run()
