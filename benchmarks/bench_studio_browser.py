"""Benchmark the Studio in a browser: what the user waits for.

Run with ``python benchmarks/bench_studio_browser.py [--nodes 300] [--repeat 5]``. The real
server (``StudioServer`` on 127.0.0.1) serves a copy of ``examples/support_router.py`` and the
generated ``--nodes``-node file of ``bench_studio.py``; Debian's Chromium (``/usr/bin/chromium``,
driven by Playwright, headless) measures two things, best and median of ``--repeat`` runs:

- **load → painted**: from navigation start to the first graph on screen (the page's own
  ``performance.now()`` when the frame after the first paint ran: HTML, bundle, font, the
  ``/api/graph`` round trip, dagre layout and the rough.js drawing);
- **edit → repainted**: one gesture (rename a node in the inspector, Enter) to the repainted
  canvas: the ``/api/edit`` round trip (the server rewrites and re-extracts the file), then
  layout and drawing of the re-extracted graph. Renames alternate, so the file keeps its size.
  Two rows split it: the ``/api/edit`` round trip as the page saw it, and the page's own
  dagre layout + rough.js drawing.

Skipped (exit 0, with the reason) without ``/usr/bin/chromium`` or Playwright.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def generated(nodes: int) -> str:
    spec = importlib.util.spec_from_file_location(
        "bench_studio", ROOT / "benchmarks" / "bench_studio.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.generated(nodes))


def bench(
    browser: Any, label: str, path: Path, node: str, repeat: int
) -> list[tuple[str, str, float, float]]:
    from tensorsketch.canvas.studio.server import StudioServer

    rows = []
    with StudioServer(path, port=0, project=path.parent) as server:
        loads = []
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 800})
            page.goto(server.url)
            page.wait_for_function(
                "window.__studio && window.__studio.state.framed > 0", timeout=60_000
            )
            loads.append(page.evaluate("window.__studio.state.framed"))
            page.close()
        rows.append((label, "load → painted", min(loads), statistics.median(loads)))

        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(server.url)
        page.wait_for_function(
            "window.__studio && window.__studio.state.framed > 0", timeout=60_000
        )
        edits: list[float] = []
        server: list[float] = []
        client: list[float] = []
        names = [node, node + "X"]
        for i in range(repeat):
            old, new = names[i % 2], names[(i + 1) % 2]
            box = page.locator(f'#boxes g.box[data-id="{old}"]')
            box.dispatch_event("pointerdown", {"button": 0})  # a click: selects the node
            box.dispatch_event("pointerup", {"button": 0})
            page.wait_for_selector("#rename-input")
            page.fill("#rename-input", new)
            before = page.evaluate("window.__studio.paints")
            t0 = page.evaluate("performance.now()")
            page.press("#rename-input", "Enter")
            page.wait_for_function(
                f"window.__studio.paints > {before} && window.__studio.state.framed > {t0} "
                f"&& !!document.querySelector('#boxes g.box[data-id=\"{new}\"]')",
                timeout=60_000,
            )
            edits.append(page.evaluate("window.__studio.state.framed") - t0)
            t = page.evaluate("window.__studio.state.timings")
            server.append(t["edit"])
            client.append(t["layout"] + t["draw"])
        page.close()
        rows.append((label, "edit → repainted", min(edits), statistics.median(edits)))
        rows.append((label, "  /api/edit trip", min(server), statistics.median(server)))
        rows.append((label, "  layout + draw", min(client), statistics.median(client)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if os.environ.get("TS_BENCH_QUICK"):
        args.repeat = min(args.repeat, 2)
        args.nodes = min(args.nodes, 60)
    if not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None:
        print("bench_studio_browser: skipped (needs /usr/bin/chromium and Playwright for Python)")
        return 0
    from playwright.sync_api import sync_playwright

    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        small = Path(tmp) / "support_router.py"
        shutil.copyfile(ROOT / "examples" / "support_router.py", small)
        rows += bench(browser, "support_router", small, "Tech", args.repeat)
        big = Path(tmp) / "generated.py"
        big.write_text(generated(args.nodes), encoding="utf-8")
        rows += bench(browser, f"{args.nodes} nodes", big, f"N{args.nodes // 2}", args.repeat)
        browser.close()
    print(f"{'file':<16} {'browser':<18} {'best ms':>9} {'median ms':>10}")
    for label, what, best, median in rows:
        print(f"{label:<16} {what:<18} {best:>9.1f} {median:>10.1f}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
