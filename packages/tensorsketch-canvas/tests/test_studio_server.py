"""The Studio on a real uvicorn server on 127.0.0.1: launch, the event stream, the trace bridge
fed by a real run through ``http_span_sink``, and the command line."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tensorsketch.canvas import extract
from tensorsketch.canvas.studio.server import StudioServer
from tensorsketch.testing.ports import free_port

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support_router.py"
LINE = re.compile(
    r"^TensorSketch Studio → (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))   "
    r"\(editing (.+)\)$"
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    target = tmp_path / "support_router.py"
    shutil.copyfile(EXAMPLE, target)
    return target


@pytest.fixture
def server(graph_file: Path) -> Iterator[StudioServer]:
    studio = StudioServer(graph_file, port=0, project=graph_file.parent)
    studio.hub.ping = 0.5
    with studio:
        yield studio


class Events:
    """Reads an SSE stream on a thread; ``wait(event)`` returns the next such event's data."""

    def __init__(self, url: str) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the event stream did not open"

    def _run(self, url: str) -> None:
        try:
            with httpx.stream("GET", url, timeout=httpx.Timeout(30.0)) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                for line in response.iter_lines():
                    with self.cond:
                        self.lines.append(line)
                        self.cond.notify_all()
                    if line == ": connected":
                        self.ready.set()
        except httpx.HTTPError:
            pass

    def wait(self, event: str, timeout: float = 10.0) -> dict[str, object]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i, line in enumerate(self.lines):
                    if line == f"event: {event}" and i + 1 < len(self.lines):
                        data = self.lines[i + 1]
                        del self.lines[: i + 2]
                        assert data.startswith("data: ")
                        return dict(json.loads(data[6:]))
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no {event!r} event; got {self.lines!r}"
                self.cond.wait(remaining)

    def saw(self, line: str, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while line not in self.lines:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True


def test_launch_serves_page_and_api(server: StudioServer, graph_file: Path) -> None:
    assert server.bound_port != 0 and server.base_url.startswith("http://127.0.0.1:")
    assert LINE.match(server.line()), server.line()
    page = httpx.get(server.url)
    assert page.status_code == 200 and "<html" in page.text.lower()
    graph = httpx.get(f"{server.base_url}/api/graph", headers={"X-Studio-Token": server.token})
    assert graph.json()["graph"] == extract(graph_file.read_text()).to_dict()
    assert httpx.get(f"{server.base_url}/api/graph").status_code == 403
    # only 127.0.0.1 is bound
    with pytest.raises(OSError), socket.create_connection(("::1", server.bound_port), 1):
        pass


def test_events_on_disk_change_own_write_and_ping(server: StudioServer, graph_file: Path) -> None:
    events = Events(f"{server.base_url}/api/events?token={server.token}")
    graph_file.write_text(graph_file.read_text() + "\n# touched\n", encoding="utf-8")
    data = events.wait("file")
    version = httpx.get(
        f"{server.base_url}/api/graph", headers={"X-Studio-Token": server.token}
    ).json()["version"]
    assert data == {"version": version}
    r = httpx.post(
        f"{server.base_url}/api/edit",
        headers={"X-Studio-Token": server.token},
        json={"version": version, "op": "remove_edge",
              "args": {"source": "Tech", "target": "__end__"}},
    )  # fmt: skip
    assert r.status_code == 200
    assert events.wait("file") == {"version": r.json()["version"]}
    assert events.saw(": ping", timeout=3)


def test_events_need_the_token(server: StudioServer) -> None:
    r = httpx.get(f"{server.base_url}/api/events", timeout=5)
    assert r.status_code == 403


async def test_trace_bridge_from_a_real_run(server: StudioServer, graph_file: Path) -> None:
    from tensorsketch.observability.export import http_span_sink
    from tensorsketch.observability.memory import InMemoryTracer
    from tensorsketch.observability.multi import MultiTracer

    spec = importlib.util.spec_from_file_location("studio_support_router", graph_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    events = await asyncio.to_thread(Events, f"{server.base_url}/api/events?token={server.token}")
    memory = InMemoryTracer()
    sink = http_span_sink(f"{server.base_url}/api/trace")
    out = await module.app.invoke(
        {"query": "I'd like a refund on my invoice"}, tracer=MultiTracer(memory, sink)
    )
    assert out.intent == "billing"
    assert await asyncio.to_thread(sink.flush, 10.0)
    sink.close()
    assert sink.sent > 0 and sink.failed == 0
    event = await asyncio.to_thread(events.wait, "trace")
    async with httpx.AsyncClient(
        base_url=server.base_url, headers={"X-Studio-Token": server.token}
    ) as client:
        runs = (await client.get("/api/trace")).json()["runs"]
        assert len(runs) == 1
        run = runs[0]
        assert run["run"] == event["run"] and run["status"] == "ok"
        assert run["spans"] == sink.sent
        folded = (await client.get("/api/trace", params={"run": run["run"]})).json()
    assert set(folded["nodes"]) == {"Classify", "Billing"}
    for node in folded["nodes"].values():
        assert node["status"] == "ok" and node["calls"] == 1
        assert node["latency_ms"] >= 0 and node["tokens"] == 0 and node["cost"] is None
    trace_ids = {span.trace_id for span in memory.spans}
    assert trace_ids == {run["run"]}


def run_cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tensorsketch.canvas", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(15)
    finally:
        if process.poll() is None:
            process.kill()


def test_cli_prints_the_line_and_serves(graph_file: Path) -> None:
    port = free_port()
    process = run_cli(graph_file.name, "--port", str(port), cwd=graph_file.parent)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().rstrip("\n")
        match = LINE.match(line)
        assert match, line
        assert int(match.group(2)) == port and match.group(4) == graph_file.name
        assert line == (
            f"TensorSketch Studio → http://127.0.0.1:{port}/?token={match.group(3)}   "
            f"(editing {graph_file.name})"
        )
        r = httpx.get(f"http://127.0.0.1:{port}/api/graph",
                      headers={"X-Studio-Token": match.group(3)})  # fmt: skip
        assert r.status_code == 200 and r.json()["file"] == str(graph_file)
    finally:
        assert stop(process) == 0


def test_cli_falls_back_to_a_free_port(graph_file: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        process = run_cli(str(graph_file), "--port", str(port), "--graph", "app",
                          cwd=graph_file.parent)  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline().rstrip("\n")
            assert line.endswith(f"(editing {graph_file}; port {port} was taken)"), line
            new_port = int(re.search(r"127\.0\.0\.1:(\d+)/", line).group(1))  # type: ignore[union-attr]
            assert new_port != port
            token = line.split("token=")[1].split()[0]
            r = httpx.get(f"http://127.0.0.1:{new_port}/api/graph?token={token}")
            assert r.json()["selected"] == "app"
        finally:
            assert stop(process) == 0


def test_cli_export_mermaid_and_svg(graph_file: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tensorsketch.canvas", str(graph_file), "--export", "mermaid"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("flowchart TD\n") and '["Classify"]' in result.stdout
    out = tmp_path / "graph.svg"
    result = subprocess.run(
        [sys.executable, "-m", "tensorsketch.canvas", str(graph_file), "--export", "svg",
         "-o", str(out)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("<svg")


def test_tensorsketch_studio_command(graph_file: Path) -> None:
    from tensorsketch.cli import main as tensorsketch_main
    from tensorsketch.plugins import reset_plugin_manager

    reset_plugin_manager()
    try:
        assert tensorsketch_main(["studio", str(graph_file), "--export", "mermaid"]) == 0
    finally:
        reset_plugin_manager()
