"""``holes fill``: a hole filled from its contract, checked in subprocesses before it lands.

Scripted models drive the whole loop for real: mypy (strict, as the project sets it) and the
generated contract tests run in subprocesses on every candidate.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import FakeProvider, InMemoryTracer, register_provider
from tensorsketch.canvas._cli import configure_holes, configure_studio, run_holes, run_studio
from tensorsketch.canvas.fill import Example, build_spec, fill_hole, read_drafts
from tensorsketch.canvas.fill.body import parse_reply, splice
from tensorsketch.canvas.holes import search_holes

HOLE = '''\
"""A graph with one hole."""

from tensorsketch import END, START, Context, Graph, Hole, Node, Schema


class State(Schema):
    query: str
    answer: str = ""


class Shout(Node):
    """Shout the query back.

    >>> Shout().default_name()
    'Shout'
    """

    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        raise Hole("Return the query in upper case, with an exclamation mark")


# a comment the fill must keep
graph = Graph(State).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
'''

USER_TEST = """\
import asyncio

from app import Shout, graph


def test_shout_ends_with_a_bang() -> None:
    assert Shout.__name__ == "Shout"
    assert asyncio.run(graph.invoke({"query": "hey"})).answer.endswith("!")
"""

SIGNATURE = "async def run(self, ctx: Context, inp: In) -> Out:"
GOOD = f'Here it is:\n```python\n{SIGNATURE}\n    return self.Out(answer=inp.query.upper() + "!")\n```\n'
# Right at runtime, but an untyped helper: strict mypy (the project's setting) rejects it.
UNTYPED = f"""```python
{SIGNATURE}
    def shout(text):
        return text.upper() + "!"

    return self.Out(answer=shout(inp.query))
```"""
# Type-correct, but it whispers: the example (and the user's test) fail.
WRONG = f"""```python
{SIGNATURE}
    import os
    from pathlib import Path

    Path(os.environ.get("TS_FILL_MARK", os.devnull)).write_text(str(os.getpid()))
    return self.Out(answer=inp.query.lower())
```"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module: only the first check pays for reading tensorsketch."""
    return tmp_path_factory.mktemp("mypy_cache")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with strict mypy, a hole in app.py and a test of its own that names it."""
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0"\n\n[tool.mypy]\nstrict = true\n'
        'plugins = ["pydantic.mypy"]\n',
        encoding="utf-8",
    )
    (tmp_path / "app.py").write_text(HOLE, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_app.py").write_text(USER_TEST, encoding="utf-8")
    return tmp_path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _fill(project: Path, provider: Any, mypy_cache: Path, **kw: Any) -> Any:
    kw.setdefault("max_examples", 5)
    kw.setdefault("timeout", 300)
    return await fill_hole(project / "app.py", "Shout", provider, mypy_cache=mypy_cache, **kw)


# -- the spec and the splice (no model, no subprocess) ------------------------------------------


def test_the_spec_holds_the_contract_the_state_and_the_imports(project: Path) -> None:
    spec = build_spec(project / "app.py", "Shout", [Example({"query": "a"}, {"answer": "A!"})])
    assert spec.hole == "Return the query in upper case, with an exclamation mark"
    assert spec.inputs == [("query", "str")] and spec.outputs == [("answer", "str")]
    assert spec.signature == SIGNATURE
    prompt = spec.prompt()
    for part in ("class State(Schema)", "from tensorsketch import", "Shout the query back"):
        assert part in prompt
    assert '- in {"query": "a"} -> out {"answer": "A!"}' in prompt


def test_a_reply_that_changes_the_signature_or_keeps_the_hole_is_refused(project: Path) -> None:
    spec = build_spec(project / "app.py", "Shout")
    changed = parse_reply(spec, "```python\nasync def run(self, ctx, inp):\n    return 1\n```")
    assert any("must keep its signature" in p for p in changed.problems)
    hole = parse_reply(spec, f"```python\n{SIGNATURE}\n    raise Hole('x')\n```")
    assert any("still raises Hole" in p for p in hole.problems)
    extra = parse_reply(spec, f"```python\nimport os\n\n{SIGNATURE}\n    return 1\n```")
    assert any("only the `run` method" in p for p in extra.problems)
    assert parse_reply(spec, GOOD).problems == []


def test_the_splice_changes_the_body_and_nothing_else(tmp_path: Path) -> None:
    crlf = tmp_path / "app.py"
    crlf.write_bytes(HOLE.replace("\n", "\r\n").encode("utf-8"))
    spec = build_spec(crlf, "Shout")
    out = splice(spec, parse_reply(spec, GOOD).code)
    before, after = spec.source.split("\r\n"), out.split("\r\n")
    hole_line = next(i for i, line in enumerate(before) if "raise Hole" in line)
    assert after[:hole_line] == before[:hole_line]
    assert after[hole_line] == '        return self.Out(answer=inp.query.upper() + "!")'
    assert after[hole_line + 1 :] == before[hole_line + 1 :]


def test_bad_arguments_are_clear_errors(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    configure_holes(parser)
    assert run_holes(parser.parse_args([str(project), "--provider", "fake"])) == 2
    assert "only apply to `tensorsketch holes fill`" in capsys.readouterr().err
    assert run_holes(parser.parse_args(["fill", str(project), "--model", "m"])) == 2
    assert "needs --provider NAME and --model MODEL" in capsys.readouterr().err
    args = ["fill", str(project), "--provider", "fake", "--model", "m", "--example", "{}"]
    assert run_holes(parser.parse_args(args)) == 2
    assert 'exactly an "in" and an "out"' in capsys.readouterr().err
    args = ["fill", str(project), "--provider", "fake", "--model", "m", "--node", "Nope"]
    assert run_holes(parser.parse_args(args)) == 2
    assert "no hole called 'Nope'" in capsys.readouterr().err
    with pytest.raises(Exception, match="not a hole"):
        build_spec(project / "app.py", "State")
    studio = argparse.ArgumentParser()
    configure_studio(studio)
    assert run_studio(studio.parse_args([str(project / "app.py"), "--fill-provider", "x"])) == 2
    assert "--fill-provider and --fill-model go together" in capsys.readouterr().err


async def test_the_contract_tests_refuse_an_undeclared_write(project: Path, tmp_path: Path) -> None:
    from tensorsketch.canvas.fill.checks import Checker

    spec = build_spec(project / "app.py", "Shout")
    sneaky = (
        f"{SIGNATURE}\n    return {{'answer': inp.query, 'query': 'changed'}}  # type: ignore\n"
    )
    checker = Checker(spec, tmp_path / "work", max_examples=3, timeout=300)
    problem = await checker.contract(checker.stage(splice(spec, sneaky), 0))
    assert problem is not None and "query" in problem and "Extra inputs" in problem
    good = splice(spec, parse_reply(spec, GOOD).code)
    assert await checker.contract(checker.stage(good, 1)) is None


# -- whole fills: the model scripted, every check real ------------------------------------------


async def test_a_good_body_is_written_surgically(project: Path, mypy_cache: Path) -> None:
    provider = FakeProvider([GOOD])
    tracer = InMemoryTracer()
    result = await _fill(project, provider, mypy_cache, tracer=tracer)
    assert result.ok, result.failures
    assert result.attempts == 1 and len(provider.calls) == 1
    assert result.passed == [
        "parses",
        "signature",
        "mypy",
        "contract tests",
        "your tests (1 file)",
    ]
    text = (project / "app.py").read_text(encoding="utf-8")
    assert text == HOLE.replace(
        'raise Hole("Return the query in upper case, with an exclamation mark")',
        'return self.Out(answer=inp.query.upper() + "!")',
    )
    assert "-        raise Hole(" in result.diff
    assert not (project / "app.py.holes.json").exists()
    assert search_holes(project / "app.py").holes == []
    # The model call was traced, with its usage (a fake model is unpriced: cost unknown).
    spans = [s for s in tracer.spans if s.kind == "model"]
    assert len(spans) == 1 and result.tokens > 0 and result.cost_usd is None


async def test_a_body_strict_mypy_rejects_is_repaired(project: Path, mypy_cache: Path) -> None:
    provider = FakeProvider([UNTYPED, GOOD])
    result = await _fill(project, provider, mypy_cache)
    assert result.ok, result.failures
    assert result.attempts == 2 and len(provider.calls) == 2
    repair = provider.calls[1].last.text
    assert "Attempt 1 was:" in repair and "def shout(text):" in repair
    assert "mypy (with pyproject.toml) rejects the module" in repair
    assert "no-untyped-def" in repair  # strict, as the project's config says
    assert 'return self.Out(answer=inp.query.upper() + "!")' in (project / "app.py").read_text()


async def test_a_body_that_never_passes_is_kept_as_a_draft(
    project: Path, mypy_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = project / "pid.txt"
    monkeypatch.setenv("TS_FILL_MARK", str(mark))
    before = _sha(project / "app.py")
    provider = FakeProvider([WRONG, WRONG])
    example = Example({"query": "hi"}, {"answer": "HI!"})
    result = await _fill(project, provider, mypy_cache, examples=[example], max_attempts=2)
    assert not result.ok and result.attempts == 2 and len(provider.calls) == 2
    assert _sha(project / "app.py") == before  # not one byte changed
    assert "answer is 'hi', expected 'HI!'" in "\n".join(result.failures)
    # The candidate ran in a subprocess, never in this process.
    assert mark.exists() and int(mark.read_text()) != os.getpid()
    draft = read_drafts(project / "app.py")["Shout"]
    assert draft["status"] == "unverified" and "inp.query.lower()" in draft["code"]
    assert draft["failures"] == result.failures and draft["attempts"] == 2
    [hole] = search_holes(project).holes
    assert hole.status == "unverified" and hole.to_dict()["draft"] == draft
    out = io.StringIO()
    parser = argparse.ArgumentParser()
    configure_holes(parser)
    assert run_holes(parser.parse_args([str(project)]), out) == 0
    assert "unverified: a draft body failed" in out.getvalue()


async def test_a_file_edited_during_the_fill_is_not_overwritten(
    project: Path, mypy_cache: Path
) -> None:
    app = project / "app.py"
    edited = HOLE.replace("# a comment the fill must keep", "# edited while the model thought")

    def model(messages: Any, tools: Any) -> str:
        app.write_text(edited, encoding="utf-8")  # the user saves the file meanwhile
        return GOOD

    result = await _fill(project, FakeProvider(policy=model), mypy_cache)
    assert not result.ok and "changed while the body was generated" in result.failures[0]
    assert app.read_text(encoding="utf-8") == edited
    assert read_drafts(app)["Shout"]["attempts"] == 1


async def test_a_fill_stops_on_its_budget(project: Path, mypy_cache: Path) -> None:
    before = _sha(project / "app.py")
    provider = FakeProvider([UNTYPED, GOOD], model="gpt-4o")  # priced
    result = await _fill(project, provider, mypy_cache, budget_usd=0.000001)
    assert not result.ok and len(provider.calls) == 1
    assert result.cost_usd is not None and result.cost_usd > 0.000001
    assert "over its max_cost_usd" in result.failures[-1]
    assert _sha(project / "app.py") == before


async def test_an_interrupted_fill_resumes_without_asking_again(
    project: Path, mypy_cache: Path
) -> None:
    from tensorsketch.runtime.backends import SqliteBackend

    db = project / "fills.db"
    crash = FakeProvider([UNTYPED, ConnectionError("the network went away")])
    with pytest.raises(ConnectionError):
        await _fill(project, crash, mypy_cache, backend=SqliteBackend(db), thread_id="t1")
    # The first candidate and its checks are journaled: resuming asks only for the repair.
    again = FakeProvider([GOOD])
    result = await _fill(project, again, mypy_cache, backend=SqliteBackend(db), thread_id="t1")
    assert result.ok and result.attempts == 2
    assert len(again.calls) == 1 and "Attempt 1 was:" in again.calls[0].last.text


def test_the_cli_fills_and_writes_the_contract_tests_when_asked(
    project: Path, mypy_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_provider("scripted-fill", lambda: lambda **_: FakeProvider([GOOD]))
    parser = argparse.ArgumentParser()
    configure_holes(parser)
    args = parser.parse_args(
        ["fill", str(project), "--provider", "scripted-fill", "--model", "m", "--write-tests"]
    )
    out = io.StringIO()
    assert run_holes(args, out) == 0, out.getvalue()
    text = out.getvalue()
    assert "Shout: written after 1 attempt" in text and "cost: unknown" in text
    written = project / "tests" / "test_shout_contract.py"
    assert "def test_ports" in written.read_text()
    # The written tests import the module from where they sit, and pass on the filled file.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(written)],
        cwd=project / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    trace = project / ".tensorsketch" / "traces" / "Shout.jsonl"
    kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert "model" in kinds


@pytest.fixture
def wire() -> Iterator[Any]:
    """The providers' scripted vendor server (loaded by path from their tests)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "tensorsketch-providers/tests/wire_server.py"
    spec = importlib.util.spec_from_file_location("fill_wire_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fill_wire_server"] = module
    spec.loader.exec_module(module)
    server = module.WireServer().start()
    try:
        yield module, server
    finally:
        server.stop()


async def test_a_fill_through_the_openai_sdk(
    project: Path, mypy_cache: Path, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tensorsketch.providers.openai import OpenAIProvider

    module, server = wire
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server.queue(
        module.Reply(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1741570283,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": GOOD},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960},
            }
        )
    )
    provider = OpenAIProvider(model="gpt-4o", base_url=f"{server.url}/v1", max_retries=0)
    try:
        result = await _fill(project, provider, mypy_cache)
    finally:
        await provider.aclose()
    assert result.ok, result.failures
    sent = server.last.body
    assert server.last.path == "/v1/chat/completions" and sent["model"] == "gpt-4o"
    assert "Return the query in upper case" in sent["messages"][-1]["content"]
    assert result.tokens == 960 and result.cost_usd == pytest.approx(900 * 2.5e-6 + 60 * 10e-6)


# -- the Studio's action ------------------------------------------------------------------------


async def test_the_studio_fills_a_hole_in_the_background(project: Path, mypy_cache: Path) -> None:
    import asyncio

    import httpx

    from tensorsketch.canvas.studio.app import Studio
    from tensorsketch.canvas.studio.fill_routes import FillSettings
    from tensorsketch.canvas.studio.routes import create_app

    token = "t0k3n"
    app_file = project / "app.py"

    async def call(app: Any, method: str, body: Any = None) -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://127.0.0.1:8765",
            headers={"X-Studio-Token": token},
        ) as c:
            return await c.request(method, "/api/holes/fill", json=body)

    async def settle(app: Any) -> dict[str, Any]:
        for _ in range(600):  # the fill's checks run in subprocesses: poll until it ends
            view = (await call(app, "GET")).json()
            if view["fills"] and view["fills"][0]["status"] != "running":
                return dict(view["fills"][0])
            await asyncio.sleep(0.5)
        raise AssertionError("the fill did not end")

    studio = Studio(path=app_file, token=token, project=project)
    off = create_app(studio)
    r = await call(off, "POST", {"node": "Shout"})
    assert r.status_code == 409 and "--fill-provider" in r.json()["error"]

    options = {"max_examples": 5, "mypy_cache": mypy_cache}
    scripted = FakeProvider(["no code here, sorry"])
    app = create_app(studio, fill=FillSettings(scripted, attempts=1, options=options))
    assert (await call(app, "POST", {"node": 3})).status_code == 400
    r = await call(app, "POST", {"node": "Nope"})
    assert r.status_code == 404 and "no hole 'Nope'" in r.json()["error"]
    r = await call(app, "POST", {"node": "Shout"})
    assert r.status_code == 202 and r.json()["status"] == "running"
    job = await settle(app)
    assert job["status"] == "draft" and "holds no `def run(...)` method" in job["failures"][0]
    [hole] = studio.holes()
    assert hole["status"] == "unverified"

    good = create_app(studio, fill=FillSettings(FakeProvider([GOOD]), options=options))
    assert (await call(good, "POST", {"node": "Shout", "file": str(app_file)})).status_code == 202
    job = await settle(good)
    assert job["status"] == "written", job
    assert studio.holes() == [] and "upper()" in app_file.read_text()
