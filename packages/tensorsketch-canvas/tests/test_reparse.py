"""Chunked parsing: the module joined from per-statement parses is the module libcst builds.

The engine relies on the parse being libcst's own (comment ownership, indentation, newline
style), and on every statement object being unique in one module; a reused chunk must never
change either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsketch.canvas import _reparse, edits, extract, reconstruct
from tensorsketch.canvas._source import deep_recursion, parse_source

ROOT = Path(__file__).resolve().parents[3]
FILLER = "".join(f"v{i} = {i}\n" for i in range(_reparse.MIN_CHUNKS))


def assert_same_as_whole(text: str) -> cst.Module:
    with deep_recursion():
        whole = cst.parse_module(text)
        chunked = _reparse.parse_module(text, ast.parse(text))
    # libcst drops a blank line before a trailing indented comment at the end of a file (and
    # a space before a colon here and there): the chunks must match libcst, lossy or not.
    assert chunked.code == text or chunked.code == whole.code
    assert chunked.deep_equals(whole)
    for attr in ("default_indent", "default_newline", "has_trailing_newline", "encoding"):
        assert getattr(chunked, attr) == getattr(whole, attr), attr
    for part in ("header", "footer"):
        mine, libcsts = getattr(chunked, part), getattr(whole, part)
        assert len(mine) == len(libcsts), part
        assert all(a.deep_equals(b) for a, b in zip(mine, libcsts, strict=True)), part
    return chunked


def corpus() -> list[Path]:
    files = sorted((ROOT / "examples").glob("*.py"))
    files += sorted((ROOT / "packages" / "tensorsketch-canvas" / "src").rglob("*.py"))
    files += sorted((ROOT / "packages" / "tensorsketch-core" / "src").rglob("*.py"))
    return files


@pytest.mark.parametrize("path", corpus(), ids=lambda p: str(p.relative_to(ROOT)))
def test_real_files_parse_the_same_cold_and_warm(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    _reparse.clear()
    assert_same_as_whole(text)
    assert_same_as_whole(text)  # the second parse reuses the first one's chunks


TRICKY = {
    "indented comment after a class": "class A:\n    x = 1\n    # owned by A's block\ny = 2\n",
    "indented comment and blank lines": "class A:\n    x = 1\n\n    # A\n\nz = 3\n",
    "column-0 comment after a class": "class A:\n    x = 1\n# owned by y\n\ny = 2\n",
    "decorators and comments": "# c\n@dec\n# between\n@other(1)\nclass B:\n    pass\n",
    "semicolons": "a = 1; b = 2\nc = 3;\n",
    "whitespace-only lines": "def f():\n    return 1\n    \n  \ng = 2\n",
    "two-space class after four-space": "class A:\n    x = 1\nclass B:\n  y = 2\n",
    "tab indentation": "class A:\n\tx = 1\nclass B:\n\ty = 2\n",
    "crlf": "class A:\r\n    x = 1\r\n\r\n# c\r\ny = 2\r\n",
    "mixed newlines": "x = 1\r\ny = 2\nclass C:\r\n    z = 3\n",
    "no trailing newline": "x = 1\ny = 2",
    "trailing comments at the end": "x = 1\n\n# the end\n\n",
    "continuation lines": "x = \\\n    1\ny = (\n 2\n)\n",
    "multi-line strings": 's = """\n# not a comment\n\n"""\nt = 1\n',
    "if/else and try": "if a:\n    pass\nelse:\n    pass\ntry:\n    x\nexcept E:\n    y\n",
}


@pytest.mark.parametrize("body", TRICKY.values(), ids=list(TRICKY))
@pytest.mark.parametrize("where", ["start", "end"])
def test_tricky_layouts_parse_like_libcst(body: str, where: str) -> None:
    text = body.rstrip("\n") + "\n" + FILLER if where == "start" else FILLER + body
    _reparse.clear()
    assert_same_as_whole(text)
    assert_same_as_whole(text)


def test_unchanged_statements_are_shared_and_no_statement_appears_twice() -> None:
    klass = "\n\nclass Same:\n    x: int\n"
    text = FILLER + klass + klass + "y = 1\n"
    _reparse.clear()
    first = assert_same_as_whole(text)
    second = assert_same_as_whole(text.replace("y = 1", "y = 2"))
    ids = [id(stmt) for stmt in second.body]
    assert len(set(ids)) == len(ids)  # the two identical classes are two objects
    # (a statement with lines above it is a fresh copy, sharing everything but those lines)
    shared = sum(a is b or a.body is b.body for a, b in zip(first.body, second.body, strict=True))
    assert shared == len(second.body) - 3  # not: the first line, the second class, `y = 2`


def test_edits_of_a_big_file_read_and_write_like_before() -> None:
    nodes = 12
    classes = "".join(
        f"\n\nclass N{i}(Node):\n    class In(Schema):\n        text: str\n\n"
        f"    class Out(Schema):\n        text: str\n\n    def run(self, inp):\n"
        f"        return self.Out(text=inp.text)\n"
        for i in range(nodes)
    )
    chain = "".join(f"\n    .add(N{i})" for i in range(nodes))
    chain += '\n    .edge(START, "N0")' + "".join(
        f'\n    .edge("N{i}", "N{i + 1}")' for i in range(nodes - 1)
    )
    text = (
        "from tensorsketch import START, Graph, Node, Schema\n\n\nclass State(Schema):\n"
        f"    text: str = ''\n{classes}\n\napp = (\n    Graph(State){chain}\n).compile()\n"
    )
    _reparse.clear()
    ir = extract(text)
    new = reconstruct(text, edits.rename_node(ir, "N3", "Third"))
    back = reconstruct(new, edits.rename_node(extract(new), "Third", "N3"))
    assert back == text
    parsed = parse_source(new)
    assert parsed.unmask(parsed.module.code) == new


SNIPPETS = [
    "x = 1\n",
    "\n",
    "# note\n",
    "    # indented note\n",
    "  \n",
    "class A:\n    a = 1\n",
    "class B:\n  b = 2\n",
    "def f():\n\treturn 1\n",
    "@d\nclass C:\n    pass\n",
    "a = 1; b = 2\n",
    "s = '''\n# in a string\n'''\n",
    "if x:\n    y = 1\nelse:\n    y = 2\n",
    "z = (\n    1,\n)\n",
]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=30), st.booleans())
def test_random_layouts_parse_like_libcst(parts: list[str], crlf: bool) -> None:
    text = FILLER + "".join(parts)
    if crlf:
        text = text.replace("\n", "\r\n")
    try:
        ast.parse(text)
    except SyntaxError:
        return  # an indented comment at the very start of a block, etc.
    assert_same_as_whole(text)
    assert_same_as_whole(text)
