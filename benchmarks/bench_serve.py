"""Serving overhead: ``openai_app`` over an agent on the fake model, beside the floor.

Two uvicorn servers, each in its own process with one worker:

- **tensorsketch** — ``openai_app(create_agent(FakeProvider(...)), model="bench")``: the
  request is parsed and checked, the agent runs (one model call, streamed word by word) on a
  fresh durable thread of the app's in-memory backend, and the reply is encoded.
- **floor** — a plain Starlette app whose two routes return the very bytes the first server
  returned (the same JSON body; the same SSE chunks, one send each): HTTP, routing and the
  ASGI server, and nothing else.

A load generator in this process (``httpx.AsyncClient``, a fixed number of requests in
flight) sends ``POST /v1/chat/completions`` non-streaming and streaming. Latency is to the last
byte. Each (server, mode) runs in three alternating rounds; the best round counts. Every
response is checked (status, the reply text, ``[DONE]``), so nothing is timed doing nothing.

On a shared machine the client can be the bottleneck, which hides the server's own cost; so the
server process's CPU time (``/proc/<pid>/stat``) over each run is also reported per request.
Its inverse is what one server core can sustain — the ratio that survives contention.

    python benchmarks/bench_serve.py          # TS_BENCH_QUICK=1 for a smoke run
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
REQUESTS = 200 if QUICK else 600
CONCURRENCY = 32
ROUNDS = 1 if QUICK else 3
REPLY = "The quick brown fox jumps over the lazy dog, twice, for good measure."
BODY = {"model": "bench", "messages": [{"role": "user", "content": "Tell me about the fox."}]}


# -- the two servers ----------------------------------------------------------------------------


def ours() -> Any:
    from tensorsketch import FakeProvider, create_agent
    from tensorsketch.serve import openai_app

    agent = create_agent(FakeProvider(policy=lambda messages, tools: REPLY))
    return openai_app(agent, model="bench")


def floor(fixtures: Path) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    saved = json.loads(fixtures.read_text())
    plain = saved["plain"].encode()
    chunks = [c.encode() for c in saved["chunks"]]

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())  # read the request, as any handler must
        if body.get("stream"):

            async def send() -> Any:
                for chunk in chunks:
                    yield chunk

            return StreamingResponse(send(), media_type="text/event-stream")
        return Response(plain, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def serve_main(which: str, port: int, fixtures: str) -> None:
    import uvicorn

    app = ours() if which == "tensorsketch" else floor(Path(fixtures))
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=120,  # a loaded 2-core machine can leave a pooled connection idle
    )


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    def __init__(self, which: str, fixtures: Path) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, __file__, "--serve", which, str(self.port), str(fixtures)]
        self.proc = subprocess.Popen(args)
        for _ in range(600):
            try:
                httpx.post(f"{self.url}/v1/chat/completions", json={})
                return
            except httpx.TransportError:
                time.sleep(0.05)
        msg = f"{which} server did not start"
        raise RuntimeError(msg)

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


# -- the load -----------------------------------------------------------------------------------


async def _one(client: httpx.AsyncClient, url: str, stream: bool) -> float:
    started = time.perf_counter()
    if stream:
        async with client.stream("POST", url, json={**BODY, "stream": True}) as response:
            data = b"".join([part async for part in response.aiter_bytes()])
        assert response.status_code == 200 and data.endswith(b"data: [DONE]\n\n"), data[-200:]
    else:
        response = await client.post(url, json=BODY)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == REPLY
    return time.perf_counter() - started


async def _load(base: str, stream: bool, requests: int) -> tuple[float, list[float]]:
    url = f"{base}/v1/chat/completions"
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(_one(client, url, stream) for _ in range(CONCURRENCY)))  # warm up
        queue = iter(range(requests))
        latencies: list[float] = []

        async def worker() -> None:
            for _ in queue:
                latencies.append(await _one(client, url, stream))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    return requests / elapsed, latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _fixtures(path: Path) -> None:
    """Capture what our server answers, for the floor to return byte for byte."""
    server = Server("tensorsketch", path)
    try:
        plain = httpx.post(f"{server.url}/v1/chat/completions", json=BODY).text
        with httpx.stream(
            "POST", f"{server.url}/v1/chat/completions", json={**BODY, "stream": True}
        ) as response:
            text = response.read().decode()
    finally:
        server.stop()
    chunks = [frame + "\n\n" for frame in text.split("\n\n") if frame]
    path.write_text(json.dumps({"plain": plain, "chunks": chunks}))


def main() -> None:
    fixtures = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_serve_{os.getpid()}.json"
    _fixtures(fixtures)
    results: dict[tuple[str, str], tuple[float, list[float]]] = {}
    cpu: dict[tuple[str, str], float] = {}  # server CPU ms per request, best round
    try:
        for _ in range(ROUNDS):
            for which in ("tensorsketch", "floor"):
                server = Server(which, fixtures)
                try:
                    for mode in ("non-stream", "stream"):
                        spent = server.cpu_seconds()
                        rate, latencies = asyncio.run(_load(server.url, mode == "stream", REQUESTS))
                        per = (server.cpu_seconds() - spent) * 1000 / (REQUESTS + CONCURRENCY)
                        cpu[(which, mode)] = min(per, cpu.get((which, mode), per))
                        best = results.get((which, mode))
                        if best is None or rate > best[0]:
                            results[(which, mode)] = (rate, latencies)
                finally:
                    server.stop()
    finally:
        fixtures.unlink(missing_ok=True)
    print(f"\n{REQUESTS} requests, {CONCURRENCY} in flight, best of {ROUNDS} rounds\n")
    print(
        "| mode | server | req/s | p50 ms | p99 ms | vs floor | server CPU ms/req "
        "| req/s per core | vs floor |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode in ("non-stream", "stream"):
        floor_rate = results[("floor", mode)][0]
        for which in ("tensorsketch", "floor"):
            rate, latencies = results[(which, mode)]
            ms = cpu[(which, mode)]
            print(
                f"| {mode} | {which} | {rate:,.0f} | {_pct(latencies, 0.5):.1f} | "
                f"{_pct(latencies, 0.99):.1f} | {rate / floor_rate:.2f}x | {ms:.2f} | "
                f"{1000 / ms:,.0f} | {cpu[('floor', mode)] / ms:.2f}x |"
            )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
