"""The parsing layer: chain masking keeps libcst linear, and text always comes back intact."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest

from tensorsketch.canvas import SourceParseError, edits, extract, reconstruct
from tensorsketch.canvas._source import parse_source


def test_masked_chains_restore_the_exact_text() -> None:
    source = (
        'x = 1\napp = (\n    Graph(S)  # c\n    .add(A)\n).compile()\ny = f"{Graph(S).add(B)}"\n'
    )
    parsed = parse_source(source)
    assert len(parsed.chains) == 1  # the f-string is left alone
    assert parsed.unmask(parsed.module.code) == source
    (chain,) = parsed.chains.values()
    assert chain.root_text == "Graph(S)"
    assert [(link.method, link.trivia, link.body) for link in chain.links] == [
        ("add", "  # c\n    ", ".add(A)"),
        ("compile", "\n)", ".compile()"),
    ]


def test_non_ascii_and_crlf_sources() -> None:
    source = '# café ☕\r\nname = "é"\r\napp = Graph(S).add(Ünïcode).edge(START, "Ünïcode")\r\n'
    parsed = parse_source(source)
    assert parsed.unmask(parsed.module.code) == source
    assert extract(source).nodes[0].name == "Ünïcode"


def test_long_chains_parse_in_linear_time() -> None:
    links = "".join(f'\n    .edge("N{i}", "N{i + 1}")' for i in range(800))
    source = f"app = (\n    Graph(S){links}\n).compile()\n"
    start = time.perf_counter()
    ir = extract(source)
    elapsed = time.perf_counter() - start
    assert len(ir.edges) == 800
    assert elapsed < 5  # a whole-chain libcst parse takes well over this at 800 links
    edited = reconstruct(source, edits.remove_edge(ir, 0))
    assert edited.count(".edge(") == 799


def test_long_non_graph_chains_are_masked_and_kept() -> None:
    calls = "".join(f".m{i}()" for i in range(30))
    source = f"query = db{calls}\ng = Graph(S)\ng.add(A)\n"
    parsed = parse_source(source)
    assert len(parsed.chains) == 2
    new = reconstruct(source, edits.add_edge(extract(source), "A", "__end__"))
    assert f"\nquery = db{calls}\ng = Graph(S)\n" in new


def test_syntax_errors_name_the_line() -> None:
    with pytest.raises(SourceParseError, match=r"line 2: .*fix the syntax error first"):
        parse_source("x = 1\ny = (\n", filename="demo.py")
    with pytest.raises(SourceParseError, match="null bytes"):
        parse_source("x = 1\0\n")


RENDER_CASES = [
    "import os\n\n# comment\nx = 1; y = 2\n\n\n@decorator\n# between\n@other\nclass A:\n    pass\n    # block footer\n# dedented\nz = 3  # trailing\n\n# footer\n",
    "x = 1\ny = 2",  # no trailing newline
    "# only a header comment\n\nx = (\n    1,\n)\nif x:\n    y = 2\nelse:\n    y = 3\n",
    "\r\nx = 1\r\n\r\ny = 2\r\n",
]


@pytest.mark.parametrize("source", RENDER_CASES)
def test_render_reuses_original_text_exactly(source: str) -> None:
    import libcst as cst

    parsed = parse_source(source)
    assert parsed._spans() is not None  # the fast path is taken
    module = parsed.module
    assert parsed.render(module) == module.code == source
    body = list(module.body)
    for index in range(len(body) + 1):  # insert a statement at every position
        changed = module.with_changes(
            body=[*body[:index], cst.parse_statement("inserted = True\n"), *body[index:]]
        )
        assert parsed.render(changed) == changed.code
    for index in range(len(body)):  # replace and remove every statement
        replaced = module.with_changes(
            body=[*body[:index], cst.parse_statement("new = 1\n"), *body[index + 1 :]]
        )
        assert parsed.render(replaced) == replaced.code
        removed = module.with_changes(body=[*body[:index], *body[index + 1 :]])
        assert parsed.render(removed) == removed.code


class _Finalized:
    """Garbage whose finalizer runs Python code, so the collector can switch threads."""

    def __del__(self) -> None:
        sum(range(50))


def test_sources_parse_in_many_threads_at_once() -> None:
    """CPython 3.11 shares the AST converter's recursion depth between threads: two parses
    interleaved by a finalizer raise ``SystemError: AST constructor recursion depth
    mismatch`` (the Studio parses in worker threads beside the app). Here finalizers run
    mid-parse on purpose; without the canvas's parse lock this fails most runs."""
    source = "\n".join(
        f"def step_{i}(state):\n    return [[y for y in ((state + 1) * (state - 2)) if y]"
        f" for _ in range({i})]\n"
        for i in range(100)
    )
    failures: list[BaseException] = []

    def parse_repeatedly() -> None:
        for _ in range(30):
            a, b = _Finalized(), _Finalized()
            a.other, b.other = b, a  # type: ignore[attr-defined]
            del a, b
            try:
                parse_source(source)
            except BaseException as exc:
                failures.append(exc)

    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=parse_repeatedly) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)
    assert failures == []
