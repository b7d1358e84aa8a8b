"""Every example in the repository and every documentation snippet extracts and round-trips.

``examples/*.py`` may not exist yet (or may grow); the test takes whatever is there. The docs
snippets live in ``tests/corpus/`` exactly as the documentation writes them — incomplete code
included — with ``# ruff: noqa`` / ``# fmt: off`` so linters leave them alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.canvas import edits, extract, extract_all, find_holes, reconstruct
from tensorsketch.canvas.ir import END, START, EdgeIR

HERE = Path(__file__).parent
REPO = HERE.parents[2]
CORPUS = sorted((HERE / "corpus").glob("*.py"))
EXAMPLES = sorted((REPO / "examples").glob("*.py"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("path", CORPUS + EXAMPLES, ids=_id)
def test_every_graph_round_trips(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    find_holes(path)  # never raises on a readable, valid file
    for ir in extract_all(source):
        assert reconstruct(source, ir) == source
        assert extract(reconstruct(source, ir), ir.name) == ir
        nodes = [n.name for n in ir.nodes]
        if nodes:  # a small edit round-trips too
            edited = edits.add_node(ir, "CanvasProbe")
            edited = edits.add_edge(edited, nodes[0], "CanvasProbe")
            new = reconstruct(source, edited)
            again = extract(new, ir.name)
            edited.added = []
            assert again == edited
            # and each kind of wiring drawn from the canvas (#41 item 9) round-trips too
            probe = edits.add_node(ir, "CanvasProbe")
            probe = edits.add_edge(probe, nodes[0], "CanvasProbe")
            for wired in (
                edits.add_route(
                    edits.add_route(probe, "CanvasProbe", END, "done", "probe_route"),
                    "CanvasProbe",
                    nodes[0],
                    "again",
                ),
                edits.add_loop(probe, "CanvasProbe", "probe_until"),
                edits.add_fanout(probe, "CanvasProbe", "probe_fanout"),
            ):
                again = extract(reconstruct(source, wired), ir.name)
                wired.added = []
                assert again == wired


def test_the_corpus_is_not_empty() -> None:
    assert len(CORPUS) >= 9


def test_docs_snippets_read_as_the_docs_describe() -> None:
    def load(name: str) -> str:
        return (HERE / "corpus" / name).read_text(encoding="utf-8")

    joined = extract(load("joins_research.py"))
    assert EdgeIR(None, "Answer", "join", sources=["Fetch", "Rank"]) in joined.edges
    assert [n.name for n in joined.nodes] == ["Fetch", "Search", "Rank", "Answer"]

    hello = extract(load("hello_graph.py"))
    assert hello.edges == [EdgeIR(START, "Shout"), EdgeIR("Shout", END)]
    assert hello.nodes[0].outputs[0].name == "shout"

    started = extract(load("support_router_getting_started.py"))
    assert [n.name for n in started.nodes] == ["Classify", "Billing", "Tech", "Fallback"]
    assert [n.name for n in started.holes] == ["Billing"]
    assert EdgeIR("Classify", None, "dynamic", path="route") in started.edges  # route → ?

    fanout = extract(load("send_fanout.py"))
    assert fanout.edges[1].kind == "dynamic" and fanout.edges[1].branch == "router"

    loop = extract(load("refine_loop.py"))
    assert [(e.source, e.target, e.label) for e in loop.edges] == [
        (START, "Refine", None),
        ("Refine", "Refine", "repeat"),
        ("Refine", END, "exit"),
    ]

    statement = extract(load("statement_style.py"))
    assert [(n.name, n.cls) for n in statement.nodes][:2] == [
        ("Classify", "Classify"),
        ("Triage", "Classify"),
    ]
    assert [h.node for h in find_holes(HERE / "corpus" / "billing_agent_hole.py")] == [
        "BillingAgent"
    ]


def test_retry_and_timeout_show_on_the_node_read_only() -> None:
    source = (HERE / "corpus" / "retry_timeout.py").read_text(encoding="utf-8")
    ir = extract(source)
    fetch, say = ir.nodes
    assert fetch.retry == "RetryPolicy(max_attempts=4, initial_interval=0.5)"
    assert fetch.timeout == "5"
    assert (say.name, say.retry, say.timeout) == ("Say", None, None)
    assert ir.edges == [EdgeIR(START, "Fetch"), EdgeIR("Fetch", "Say"), EdgeIR("Say", END)]
    # the options travel with the IR (to the Studio) and survive an edit of the graph
    assert fetch.to_dict()["retry"] == fetch.retry
    assert type(fetch).from_dict(fetch.to_dict()).timeout == "5"
    edited = reconstruct(source, edits.add_edge(ir, "Fetch", END))
    assert "retry=RetryPolicy(max_attempts=4, initial_interval=0.5), timeout=5" in edited
    assert extract(edited).nodes[0].retry == fetch.retry
