"""Run reports and trace diffs, as library calls and as ``tensorsketch trace ...``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import START, Context, FileTracer, Graph, Node, Schema
from tensorsketch.cli import main
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.report import capability_of, diff_traces, run_report

_ids = iter(range(1, 10_000))


def row(
    name: str,
    kind: str,
    parent: dict[str, Any] | None,
    ms: float,
    *,
    status: str = "ok",
    error: str | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    n = next(_ids)
    return {
        "name": name,
        "kind": kind,
        "trace_id": "t" * 32,
        "span_id": f"{n:016x}",
        "parent_id": parent["span_id"] if parent else None,
        "started_at": 1000.0 + n,
        "duration_ms": ms,
        "status": status,
        "error": error,
        "attributes": attributes,
    }


def model(
    parent: dict[str, Any], ms: float, name: str, inp: int, out: int, cost: float | None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.request.model": name,
        "gen_ai.usage.input_tokens": inp,
        "gen_ai.usage.output_tokens": out,
    }
    if cost is not None:
        attrs["gen_ai.usage.cost_usd"] = cost
    return row("model_call", "model", parent, ms, **attrs)


def tool(parent: dict[str, Any], ms: float, name: str, **extra: Any) -> dict[str, Any]:
    return row("tool_call", "tool", parent, ms, **{"gen_ai.tool.name": name}, **extra)


def run_a() -> list[dict[str, Any]]:
    run = row("run", "run", None, 100.0)
    plan = row("plan", "node", run, 20.0)
    agent = row("agent", "node", run, 78.0)
    return [
        run,
        plan,
        model(plan, 15.0, "small-1", 100, 10, 0.001),
        agent,
        model(agent, 30.0, "big-2", 1000, 120, 0.0048),
        tool(agent, 12.0, "search"),
        model(agent, 25.0, "big-2", 1200, 120, 0.0054),
        model(agent, 5.0, "local-llama", 50, 5, None),
    ]


def run_b() -> list[dict[str, Any]]:
    """The same run with the planner on another model, a slower search, an extra tool call
    that failed, and no local model call."""
    run = row("run", "run", None, 130.0)
    plan = row("plan", "node", run, 22.0)
    agent = row("agent", "node", run, 105.0)
    return [
        run,
        plan,
        model(plan, 16.0, "small-2", 100, 12, 0.002),
        agent,
        model(agent, 30.0, "big-2", 1000, 120, 0.0048),
        tool(agent, 40.0, "search"),
        model(agent, 25.0, "big-2", 1300, 150, 0.006),
        tool(agent, 3.0, "fetch", status="error", error="TimeoutError: slow site"),
    ]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_report_ranks_capabilities_by_time_and_totals_each_model(tmp_path: Path) -> None:
    report = run_report(write(tmp_path / "a.jsonl", run_a()))
    keys = [c.key for c in report.capabilities]
    assert keys == [
        "node:agent",
        "model:big-2",
        "node:plan",
        "model:small-1",
        "tool:search",
        "model:local-llama",
    ]
    by_key = {c.key: c for c in report.capabilities}
    assert by_key["model:big-2"].calls == 2
    assert by_key["model:big-2"].total_ms == pytest.approx(55.0)
    assert by_key["node:agent"].self_ms == pytest.approx(78.0 - 30 - 12 - 25 - 5)
    assert by_key["node:plan"].share == pytest.approx(0.2)

    models = {m.model: m for m in report.models}
    assert (models["big-2"].calls, models["big-2"].input_tokens, models["big-2"].output_tokens) == (
        2,
        2200,
        240,
    )
    assert models["big-2"].cost_usd == pytest.approx(0.0102)
    assert models["local-llama"].priced is False
    assert report.unpriced_models == ["local-llama"]
    assert report.summary["cost_usd"] == pytest.approx(0.0112)
    assert report.runs == 1

    text = report.render()
    assert "Time by capability (total ms, ranked):" in text
    assert "UNPRICED" in text
    assert "! no price for local-llama: their cost is not counted" in text
    assert "(excluding unpriced models)" in text
    assert report.render(top=2).count("\n  model:") == 1
    assert "... 4 more" in report.render(top=2)

    data = report.to_dict()
    assert data["unpriced_models"] == ["local-llama"]
    assert [c["key"] for c in data["capabilities"]][:2] == ["node:agent", "model:big-2"]


def test_report_lists_where_errors_happened() -> None:
    report = run_report(Trace.from_dicts(run_b()))
    assert report.errors == [
        {
            "capability": "tool:fetch",
            "span_id": report.errors[0]["span_id"],
            "error": "TimeoutError: slow site",
        }
    ]
    assert {c.key: c.errors for c in report.capabilities}["tool:fetch"] == 1
    assert "Errors:\n  tool:fetch: TimeoutError: slow site" in report.render()


def test_capability_names() -> None:
    trace = Trace.from_dicts(run_a())
    assert sorted({capability_of(s) for s in trace}) == [
        "model:big-2",
        "model:local-llama",
        "model:small-1",
        "node:agent",
        "node:plan",
        "run:run",
        "tool:search",
    ]


def test_diff_reports_added_removed_and_deltas(tmp_path: Path) -> None:
    diff = diff_traces(write(tmp_path / "a.jsonl", run_a()), write(tmp_path / "b.jsonl", run_b()))
    assert diff.added == ["run:run#0/node:agent#0/tool:fetch#0"]
    assert diff.removed == ["run:run#0/node:agent#0/model:model_call#2"]
    assert diff.totals["duration_ms"] == (100.0, 130.0)
    assert diff.totals["model_calls"] == (4, 3)
    assert diff.totals["errors"] == (0, 1)
    assert diff.totals["output_tokens"] == (255, 282)
    changes = {c.key: c.changes for c in diff.changed}
    assert changes["run:run#0/node:plan#0/model:model_call#0"]["model"] == ("small-1", "small-2")
    assert changes["run:run#0/node:agent#0/model:model_call#1"] == {
        "input_tokens": (1200, 1300),
        "output_tokens": (120, 150),
        "cost_usd": (0.0054, 0.006),
    }
    assert changes["run:run#0/node:agent#0/model:model_call#0"] == {}
    # the biggest time change comes first
    assert diff.capabilities[0] == ("tool:search", 12.0, 40.0)
    models = {m[0]: m for m in diff.models}
    assert models["small-1"][1:] == (0.001, 0.0, 10, 0)
    assert models["small-2"][1:] == (0.0, 0.002, 0, 12)

    text = diff.render()
    assert "+ run:run#0/node:agent#0/tool:fetch#0" in text
    assert "- run:run#0/node:agent#0/model:model_call#2" in text
    assert "model: 'small-1' -> 'small-2'" in text
    assert "+30.0 (+30%)" in text
    # local-llama has no price in a: its cost is unknown, not $0, and no delta is claimed
    assert diff.unpriced == (["local-llama"], [])
    assert "$0.011200+UNPRICED -> $0.012800" in text and "not comparable" in text
    assert "local-llama              UNPRICED ->" in text
    assert "! no price for local-llama in a" in text
    assert diff.to_dict()["unpriced_models"] == {"a": ["local-llama"], "b": []}
    json.dumps(diff.to_dict())  # JSON-able


def test_a_removed_subtree_is_reported_once_at_its_top() -> None:
    a = run_a()
    b = [r for r in a if r["name"] != "plan" and r["parent_id"] != a[1]["span_id"]]
    diff = diff_traces(Trace.from_dicts(a), Trace.from_dicts(b))
    assert diff.removed == ["run:run#0/node:plan#0"]
    assert diff.added == []


# -- the CLI on files written by a real run ---------------------------------------------------


class S(Schema):
    n: int = 0


class Work(Node):
    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: object) -> Out:
        with ctx.span("model_call", kind="model", **{"gen_ai.request.model": "m"}) as span:
            span.set_attributes(
                **{
                    "gen_ai.usage.input_tokens": 7,
                    "gen_ai.usage.output_tokens": 3,
                    "gen_ai.usage.cost_usd": 0.25,
                }
            )
        return self.Out(n=1)


async def _traced_run(path: Path) -> Path:
    with FileTracer(path) as tracer:
        await Graph(S).add(Work).edge(START, "Work").compile().invoke({}, tracer=tracer)
    return path


async def test_cli_report_diff_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = await _traced_run(tmp_path / "a.jsonl")
    b = await _traced_run(tmp_path / "b.jsonl")

    assert main(["trace", "report", str(a)]) == 0
    out = capsys.readouterr().out
    assert "Run: " in out and "1 model call, 0 tool calls, 0 errors" in out
    assert "node:Work" in out and "model:m" in out

    assert main(["trace", "report", str(a), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["cost_usd"] == 0.25
    assert data["models"] == [
        {
            "model": "m",
            "calls": 1,
            "input_tokens": 7,
            "output_tokens": 3,
            "cost_usd": 0.25,
            "unpriced_calls": 0,
            "priced": True,
        }
    ]

    assert main(["trace", "diff", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["added"] == data["removed"] == []
    assert data["totals"]["cost_usd"] == {"a": 0.25, "b": 0.25}

    assert main(["trace", "diff", str(a), str(b)]) == 0
    assert "Spans added (0):" in capsys.readouterr().out

    assert main(["trace", "show", str(a)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("    model_call (")
    assert "'model_calls': 1" in out


async def test_a_trace_cut_short_by_a_killed_process_is_reported_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed process writes the spans that ended and never the ``run`` span (written as
    it ends, last): those are the parts of one unfinished run, not runs of their own."""
    whole = await _traced_run(tmp_path / "whole.jsonl")
    lines = whole.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1])["kind"] == "run"  # the run span is the last line written
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    assert main(["trace", "report", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "(0 runs)" in out
    assert f"Incomplete: {len(lines) - 1} spans of a run that never ended in this file" in out
    assert main(["trace", "report", str(cut), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["runs"], data["unfinished_spans"]) == (0, len(lines) - 1)
    assert main(["trace", "report", str(whole)]) == 0
    assert "Incomplete" not in capsys.readouterr().out


def test_cli_explains_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "report", str(tmp_path / "missing.jsonl")]) == 2
    assert "no trace file at" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    assert main(["trace", "diff", str(bad), str(bad)]) == 2
    assert "line 1 is not JSON" in capsys.readouterr().err


def test_a_call_that_failed_before_any_usage_is_not_unpriced() -> None:
    """A 429 retried into a success bills nothing the trace could price: the run's cost is
    known (a cost gate can hold), and the failed call is not labelled `unpriced`."""
    root = row("run", "run", None, 50)
    failed = row(
        "model_call",
        "model",
        root,
        5,
        status="error",
        error="RateLimitError: 429",
        **{"gen_ai.request.model": "claude-sonnet-4-6"},
    )
    answered = model(root, 20, "claude-sonnet-4-6", 100, 10, 0.0005)
    no_usage = row("model_call", "model", root, 5, **{"gen_ai.request.model": "local"})
    trace = Trace.from_dicts([root, failed, answered])
    assert trace.unpriced_models == []
    assert "unpriced" not in trace.render()
    (usage,) = run_report(trace).models
    assert (usage.calls, usage.unpriced_calls, usage.cost_usd) == (2, 0, 0.0005)
    # a call that answered without reporting usage has an unknown cost
    assert Trace.from_dicts([root, no_usage]).unpriced_models == ["local"]
