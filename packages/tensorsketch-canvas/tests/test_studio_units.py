"""Pieces of the Studio server without HTTP: the span tail, exports, file encodings, hosts."""

from __future__ import annotations

from pathlib import Path

from tensorsketch.canvas import extract
from tensorsketch.canvas.studio._files import atomic_write_bytes, read_source
from tensorsketch.canvas.studio.export import layers, to_mermaid, to_svg
from tensorsketch.canvas.studio.safety import host_name
from tensorsketch.canvas.studio.trace import TraceTail

ROUTED = """
from tensorsketch import END, START, Graph, Hole, Node

class A(Node):
    async def run(self, ctx, inp):
        raise Hole("decide")

app = (
    Graph(S).add(A).add(B).add(C)
    .edge(START, "A")
    .conditional("A", route, {"yes": "B", "no": "C"})
    .edge("B", END).edge("C", "A")
).compile()
"""


def test_trace_tail_is_bounded_oldest_first() -> None:
    tail = TraceTail(max_spans=5)
    for i in range(8):
        run = "old" if i < 4 else "new"
        tail.add([{"name": f"s{i}", "kind": "node", "trace_id": run, "span_id": str(i),
                   "parent_id": None, "started_at": float(i), "duration_ms": 1.0,
                   "status": "ok", "error": None,
                   "attributes": {"tensorsketch.node": f"N{i}"}}])  # fmt: skip
    assert len(tail) == 5
    runs = {r["run"]: r["spans"] for r in tail.runs()}
    assert runs == {"old": 1, "new": 4}
    assert [r["run"] for r in tail.runs()] == ["new", "old"]  # newest first
    folded = tail.run("old")
    assert folded is not None and list(folded["nodes"]) == ["N3"]
    assert folded["status"] == "running"  # no run span yet


def test_mermaid_dashes_conditional_edges_with_labels() -> None:
    text = to_mermaid(extract(ROUTED))
    assert text.splitlines()[0] == "flowchart TD"
    assert 'n0 -.->|"yes"| n1' in text and 'n0 -.->|"no"| n2' in text
    assert "start --> n0" in text and "n1 --> stop" in text
    assert "class n0 hole" in text


def test_svg_layers_ignore_back_edges() -> None:
    ir = extract(ROUTED)
    assert layers(ir)[0] == ["__start__"] and layers(ir)[1] == ["A"]
    svg = to_svg(ir)
    assert svg.startswith("<svg") and svg.count("<rect") == 5
    assert 'stroke-dasharray="6 4"' in svg and ">yes</text>" in svg


def test_files_keep_a_coding_cookie(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes("# -*- coding: latin-1 -*-\nx = 'café'\r\n".encode("latin-1"))
    source = read_source(path)
    assert source.encoding == "iso-8859-1" and not source.crlf  # mixed newlines: kept as-is
    atomic_write_bytes(path, source.encode(source.text + "y = 'é'\n"))
    assert path.read_bytes().endswith("y = 'é'\n".encode("latin-1"))


def test_host_names() -> None:
    assert host_name("127.0.0.1:8765") == "127.0.0.1"
    assert host_name("LOCALHOST") == "localhost"
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("evil:notaport") is None
    assert host_name("") is None and host_name(None) is None
