"""Benchmark the Studio debugger in a browser: opening a thread with thousands of checkpoints.

Run with ``python benchmarks/bench_studio_debug_browser.py [--checkpoints 2000] [--repeat 5]``.
A counting loop (one node, one superstep per count) records a thread of ``--checkpoints``
checkpoints in a SQLite file; the real server (``StudioServer --backend sqlite:///...``)
serves it and Debian's Chromium (``/usr/bin/chromium``, headless, through Playwright)
measures, best and median of ``--repeat`` runs:

- **open thread**: a click on the thread in the threads panel → its timeline drawn and its
  newest checkpoint's state on screen (the thread and checkpoint round trips, the tree
  layout, the virtualised rows, the canvas marks; the frame after that, in the page's own
  ``performance.now()``);
- **thread request**: the ``GET /api/debug/threads/{id}`` part of it, as the page saw it;
- **scroll to the oldest**: a jump from the top of the timeline to its bottom → the rows
  there drawn.

It also prints how many timeline rows were in the DOM (the timeline draws only those in
view). Skipped (exit 0, with the reason) without ``/usr/bin/chromium`` or Playwright.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

COUNTER = """\
from tensorsketch import END, START, Context, Graph, Node, Schema


class Count(Schema):
    n: int = 0
    limit: int = 10


class Tick(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(n=inp.n + 1)


def more(state: Count) -> str:
    return "Tick" if state.n < state.limit else END


app = Graph(Count).add(Tick).edge(START, "Tick").conditional("Tick", more).compile()
"""

OPEN = """async (id) => {
    const t0 = performance.now();
    document.querySelector(`.dbg-thread-row[data-thread="${id}"]`).click();
    await new Promise((done) => {
        const d = window.__studio.debug;
        const ready = () => d.thread && d.thread.thread_id === id && d.checkpoint
            && d.checkpoint.id === d.thread.head && document.querySelector('.tl-row.selected');
        const poll = () => (ready() ? done() : requestAnimationFrame(poll));
        poll();
    });
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done)));
    return [performance.now() - t0, window.__studio.debug.timings.thread,
            document.querySelectorAll('.tl-row').length];
}"""

SCROLL = """async () => {
    const tl = document.querySelector('.tl');
    tl.scrollTop = 0;
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done)));
    const t0 = performance.now();
    tl.scrollTop = tl.scrollHeight;
    await new Promise((done) => {
        const poll = () => [...document.querySelectorAll('.tl-row .tl-ran')]
            .some((e) => e.textContent === 'input') ? done() : requestAnimationFrame(poll);
        poll();
    });
    return performance.now() - t0;
}"""


def record(path: Path, db: Path, checkpoints: int) -> str:
    """One thread of ``checkpoints`` checkpoints (input, one per tick, the last)."""
    from tensorsketch.registry import create_backend

    spec = importlib.util.spec_from_file_location("bench_counter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ticks = checkpoints - 1

    async def go() -> None:
        backend = create_backend("sqlite", dsn=f"sqlite:///{db}", synchronous="OFF")
        try:
            await module.app.invoke(
                {"limit": ticks}, thread_id="counter", backend=backend, max_steps=ticks + 5
            )
        finally:
            await backend.aclose()

    asyncio.run(go())
    return "counter"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None:
        print("skipped: needs /usr/bin/chromium and Playwright for Python")
        return 0
    from playwright.sync_api import sync_playwright

    from tensorsketch.canvas.studio.server import StudioServer

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "counter.py"
        path.write_text(COUNTER, encoding="utf-8")
        db = Path(tmp) / "runs.db"
        t0 = time.perf_counter()
        thread = record(path, db, args.checkpoints)
        print(f"recorded {args.checkpoints} checkpoints in {time.perf_counter() - t0:.1f} s")
        server = StudioServer(path, port=0, project=Path(tmp), backend=f"sqlite:///{db}")
        server.start()
        rows: dict[str, list[float]] = {"open thread": [], "thread request": [], "scroll": []}
        in_dom = 0
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                page = browser.new_page(viewport={"width": 1500, "height": 860})
                page.goto(server.url)
                page.wait_for_selector(f'.dbg-thread-row[data-thread="{thread}"]')
                for _ in range(args.repeat):
                    total, request, in_dom = page.evaluate(OPEN, thread)
                    rows["open thread"].append(total)
                    rows["thread request"].append(request)
                    rows["scroll"].append(page.evaluate(SCROLL))
                    shown = page.evaluate("window.__studio.debug.thread.checkpoints.length")
                    assert shown == args.checkpoints, shown
                browser.close()
        finally:
            server.stop()
    print(f"{'what':<24}{'best ms':>10}{'median ms':>12}")
    for name, values in rows.items():
        label = "scroll to the oldest" if name == "scroll" else name
        print(f"{label:<24}{min(values):>10.1f}{statistics.median(values):>12.1f}")
    print(f"timeline rows in the DOM: {in_dom} of {args.checkpoints}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
