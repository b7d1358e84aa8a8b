"""``tensorsketch eval``: run suites from a file with a live progress bar, print the report,
write JSONL records and an HTML report, and exit non-zero when a ``--require`` gate fails.

``tensorsketch eval compare A.jsonl B.jsonl`` shows what regressed between two runs;
``tensorsketch eval harvest TRACE.jsonl`` turns a recorded run into a regression case.
Exit codes: 0 fine, 1 a gate failed / a regression was found, 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from tensorsketch.cli import count, seconds
from tensorsketch.eval._agents import load_attr, load_module
from tensorsketch.eval._case import Case, Suite
from tensorsketch.eval._harness import ProgressEvent, evaluate, planned_trials
from tensorsketch.eval._html import render_html
from tensorsketch.eval._report import (
    CEILINGS,
    GATE_METRICS,
    Report,
    clip,
    cost_text,
    mean_cost_text,
)
from tensorsketch.eval._reporters import JsonlReporter
from tensorsketch.eval._sandbox import InProcessSandbox, Sandbox, SubprocessSandbox
from tensorsketch.eval.exceptions import EvalError, GateFailed

__all__ = ["configure", "run"]

VERBS = ("compare", "harvest")
PROG = "tensorsketch eval"


def _verb_parser(verb: str, prog: str) -> argparse.ArgumentParser:
    """The usage of ``tensorsketch eval compare`` / ``harvest`` (for ``--help`` and errors)."""
    if verb == "compare":
        parser = argparse.ArgumentParser(
            prog=f"{prog} compare",
            description=(
                "Show what changed between two stored runs of a suite: each case's pass rate, "
                "the metrics and the per-grader pass rates; exit 1 when a case regressed."
            ),
        )
        parser.add_argument("before", metavar="BEFORE.jsonl", help="the earlier run's records")
        parser.add_argument("after", metavar="AFTER.jsonl", help="the later run's records")
    else:
        parser = argparse.ArgumentParser(
            prog=f"{prog} harvest",
            description=(
                "Print a regression case (Python, for a suite file) built from a recorded "
                "run's trace: its input and the tools it called."
            ),
        )
        parser.add_argument(
            "trace", metavar="TRACE.jsonl", help="a trace file (a FileTracer's, say)"
        )
        parser.add_argument(
            "--name", metavar="CASE", help="the case name (default: harvested-<trace id>)"
        )
    return parser


class _Help(argparse.Action):
    """``-h``: the verb's own help after ``compare`` / ``harvest``, the general one otherwise."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        paths = getattr(namespace, "paths", None) or []
        if paths and paths[0] in VERBS:
            _verb_parser(paths[0], parser.prog).print_help()
        else:
            parser.print_help()
        parser.exit()


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the suites a Python file defines (module-level `Suite` objects) against an agent. "
        "`tensorsketch eval compare A.jsonl B.jsonl` diffs two runs; "
        "`tensorsketch eval harvest TRACE.jsonl` prints a regression case from a recorded run."
    )
    parser.epilog = (
        "See `tensorsketch eval compare --help` and `tensorsketch eval harvest --help` for the "
        "verbs."
    )
    # replace argparse's -h/--help with one that knows the verbs (a "resolve" group drops the
    # old action's option strings)
    parser.add_argument_group("help", conflict_handler="resolve").add_argument(
        "-h", "--help", action=_Help, help="show this help (after a verb: the verb's help)"
    )
    parser.add_argument("paths", nargs="+", metavar="SUITE.py", help="suite file(s), or a verb")
    parser.add_argument(
        "--agent",
        help="the agent: 'module:attr' or 'file.py:attr' (default: the suite file's `agent`)",
    )
    parser.add_argument(
        "--suite", action="append", default=[], help="run only this suite (by name)"
    )
    parser.add_argument("--trials", type=count, help="trials per case (overrides the cases)")
    parser.add_argument("-k", type=count, dest="k", help="the k of pass@k / pass^k")
    parser.add_argument("--concurrency", type=count, default=4, help="trials at once (default 4)")
    parser.add_argument("--timeout", type=seconds, help="seconds per trial")
    parser.add_argument(
        "--sandbox",
        choices=("inprocess", "subprocess"),
        default="inprocess",
        help="where each trial runs: this process (default) or a child process per trial",
    )
    parser.add_argument(
        "--out", type=Path, help="folder for the JSONL records (one file per suite)"
    )
    parser.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="a gate, e.g. pass_pow_k=1.0 (repeatable)",
    )
    parser.add_argument("--html", type=Path, help="also write a self-contained HTML report")
    parser.add_argument(
        "--retry-failed",
        type=Path,
        metavar="RESULTS.jsonl",
        help="re-run only the failed trials of a stored run",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress bar")
    parser.add_argument("--name", help="harvest: the case name")


def _gates(items: list[str]) -> dict[str, float]:
    """The ``--require`` gates, checked (form and metric names) before anything runs."""
    gates: dict[str, float] = {}
    for item in items:
        match = re.fullmatch(r"\s*([a-z_]+)\s*=\s*([0-9.eE+-]+)\s*", item)
        try:
            value = float(match.group(2)) if match is not None else None
        except ValueError:
            value = None
        if match is None or value is None:
            msg = f"--require {item!r} is not METRIC=VALUE (e.g. --require pass_pow_k=1.0)."
            raise EvalError(msg)
        metric = match.group(1)
        if metric not in GATE_METRICS:
            msg = (
                f"--require {item!r}: unknown metric {metric!r}; choose from "
                f"{', '.join(sorted(GATE_METRICS))}."
            )
            raise EvalError(msg)
        gates[metric] = value
    return gates


def _suites(module: Any) -> list[Suite]:
    found = [v for v in vars(module).values() if isinstance(v, Suite)]
    loose = [v for v in vars(module).values() if isinstance(v, Case)]
    if not found and loose:
        found = [Suite(Path(module.__file__ or "suite").stem, loose)]
    return found


def _agent(path: str, module: Any, args: argparse.Namespace) -> Any:
    """The agent to evaluate: ``--agent``, else the file's ``agent`` — as a ``file.py:agent``
    reference when the subprocess sandbox must import it in its child process."""
    agent: Any = args.agent
    if agent is None:
        agent = getattr(module, "agent", None)
        if agent is None:
            msg = f"{path} defines no `agent`; pass --agent module:attr (or file.py:attr)."
            raise EvalError(msg)
        if args.sandbox == "subprocess" and not isinstance(agent, str):
            return f"{Path(path).resolve()}:agent"
    if isinstance(agent, str) and args.sandbox == "inprocess":
        agent = load_attr(agent)
    return agent


def _plan(args: argparse.Namespace) -> list[tuple[Any, Suite]]:
    """Every (agent, suite) to run, resolved before the first trial starts."""
    wanted: list[str] = list(dict.fromkeys(args.suite))
    runs: list[tuple[Any, Suite]] = []
    defined: list[str] = []
    for path in args.paths:
        module = load_module(path)
        agent = _agent(path, module, args)
        suites = _suites(module)
        if not suites:
            msg = (
                f"{path} defines no `Suite` (or `Case`) at module level; define one, e.g. "
                "`suite = Suite('name', [Case(...)])`."
            )
            raise EvalError(msg)
        defined += [s.name for s in suites]
        chosen = [s for s in suites if s.name in wanted] if wanted else suites
        runs += [(agent, suite) for suite in chosen]
    missing = [name for name in wanted if name not in defined]
    if missing:
        msg = (
            f"{', '.join(args.paths)} {'define' if len(args.paths) > 1 else 'defines'} no suite "
            f"named {', '.join(missing)}; the suites there: {', '.join(defined)}."
        )
        raise EvalError(msg)
    return runs


def _summary_table(report: Report) -> Table:
    table = Table(title=f"suite {report.suite}", title_justify="left")
    for column, justify in (
        ("case", "left"),
        ("passed", "right"),
        ("pass@k", "right"),
        ("pass^k", "right"),
        ("mean $", "right"),
        ("mean ms", "right"),
        ("first failure", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for case in report.cases:
        failing = next((t for t in case.trials if not t.passed), None)
        style = "green" if case.passes == case.n else ("red" if case.passes == 0 else "yellow")
        table.add_row(
            case.name,
            f"[{style}]{case.passes}/{case.n}[/]",
            f"{case.pass_at_k:.2f}",
            f"{case.pass_pow_k:.2f}",
            mean_cost_text(case.trials),
            f"{sum(t.latency_ms for t in case.trials) / max(case.n, 1):.1f}",
            (clip(failing.reason, 80) if failing else ""),
        )
    s = report.summary()
    table.caption = (
        f"completion {s['completion_rate']:.1%}  pass@k {s['pass_at_k']:.3f}  "
        f"pass^k {s['pass_pow_k']:.3f}  mean cost {report.mean_cost_text()}  "
        f"mean {s['mean_latency']:.1f} ms  errors {s['errors']}"
    )
    if report.unpriced_models:
        table.caption += "\n" + report.unpriced_note()
    table.caption_justify = "left"
    return table


async def _run_suite(
    agent: Any,
    suite: Suite,
    args: argparse.Namespace,
    console: Console,
    sandbox: Sandbox,
    retry: Report | None,
) -> Report:
    planned = planned_trials(suite.cases, args.trials, args.k, retry)
    total = sum(n for n, _ in planned.values())
    reporter = None
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / f"{suite.name}.jsonl"
        target.write_text("", encoding="utf-8")
        reporter = JsonlReporter(target)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[green]{task.fields[passed]} passed[/] [red]{task.fields[failed]} failed[/]"),
        TextColumn("{task.fields[cost]}"),
        TimeElapsedColumn(),
        console=console,
        disable=args.no_progress,
        transient=False,
    )
    with progress:
        task = progress.add_task(suite.name, total=total, passed=0, failed=0, cost="$0.0000")
        unpriced = False

        def advance(event: ProgressEvent) -> None:
            nonlocal unpriced
            unpriced = unpriced or bool(event.result.unpriced_models)
            progress.update(
                task,
                completed=event.done,
                passed=event.passed,
                failed=event.failed,
                cost=cost_text(event.cost_usd, unpriced, digits=4, dollar=True),
            )

        report = await evaluate(
            agent,
            suite,
            reporter=reporter,
            sandbox=sandbox,
            concurrency=args.concurrency,
            timeout=args.timeout,
            trials=args.trials,
            k=args.k,
            retry=retry,
            on_trial=advance,
        )
        progress.update(task, completed=total)
    if reporter is not None:
        # the records streamed as trials finished; rewrite them as one complete run (after
        # --retry-failed that includes the kept passing trials, so `compare` sees the suite)
        report.to_jsonl(reporter.path)
    return report


def _retry(path: Path | None, names: list[str]) -> Report | None:
    """The stored run ``--retry-failed`` names, read before anything runs; it retries the
    suite it holds (a log without its report record holds an unnamed "suite": every one)."""
    if path is None:
        return None
    stored = Report.load(path)
    if stored.suite != "suite" and stored.suite not in names:
        msg = (
            f"--retry-failed {str(path)!r} holds suite {stored.suite!r}, which is not among the "
            f"suites to run ({', '.join(names)}); pass that suite's results file."
        )
        raise EvalError(msg)
    return stored


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an ``--out`` or ``--html`` that cannot be written before any trial runs (after
    the suite, the error would cost the whole run's results)."""
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        msg = (
            f"--out {str(args.out)!r} is a file; it names a folder for the results "
            "(one JSONL per suite)."
        )
        raise EvalError(msg)
    html: Path | None = args.html
    if html is not None:
        if html.is_dir():
            example = str(html / "report.html")
            msg = f"--html {str(html)!r} is a folder; name the report's file, e.g. {example!r}."
            raise EvalError(msg)
        if not html.parent.is_dir():
            msg = f"--html {str(html)!r}: there is no folder {str(html.parent)!r} to write it in."
            raise EvalError(msg)


def _run_suites(args: argparse.Namespace) -> int:
    out = Console()
    err = Console(stderr=True)
    _check_outputs(args)
    gates = _gates(args.require)
    runs = _plan(args)
    retry = _retry(args.retry_failed, [suite.name for _, suite in runs])
    sandbox: Sandbox = SubprocessSandbox() if args.sandbox == "subprocess" else InProcessSandbox()
    reports: list[Report] = []
    for agent, suite in runs:
        stored = retry if retry is not None and retry.suite in (suite.name, "suite") else None
        report = asyncio.run(_run_suite(agent, suite, args, err, sandbox, stored))
        out.print(_summary_table(report))
        reports.append(report)
    if args.html is not None:
        args.html.write_text(render_html(reports), encoding="utf-8")
        err.print(f"HTML report: {args.html}")
    failed = False
    for report in reports:
        try:
            report.require(**gates)
        except GateFailed as exc:
            err.print(f"[bold red]gate failed[/]: {exc}")
            failed = True
    return 1 if failed else 0


def _usage(verb: str) -> str:
    return _verb_parser(verb, PROG).format_usage().strip()


def _compare(paths: list[str]) -> int:
    if len(paths) != 2:
        msg = f"compare takes two result files, got {len(paths)}; {_usage('compare')}"
        raise EvalError(msg)
    before, after = Report.load(paths[0]), Report.load(paths[1])
    out = Console()
    table = Table(title=f"{paths[0]} -> {paths[1]}", title_justify="left")
    for column in ("case", "before", "after", "change"):
        table.add_column(column)
    old = {c.name: c for c in before.cases}
    new = {c.name: c for c in after.cases}
    regressions = 0
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            table.add_row(
                name,
                f"{a.passes}/{a.n}" if a else "-",
                f"{b.passes}/{b.n}" if b else "-",
                "added" if a is None else "[yellow]removed[/]",
            )
            continue
        delta = b.pass_rate - a.pass_rate
        if delta < 0:
            regressions += 1
            change = f"[red]regressed {delta:+.0%}[/]"
        elif delta > 0:
            change = f"[green]improved {delta:+.0%}[/]"
        else:
            change = "same"
        table.add_row(name, f"{a.passes}/{a.n}", f"{b.passes}/{b.n}", change)
    out.print(table)
    metrics = Table(title="metrics", title_justify="left")
    for column in ("metric", "before", "after", "change"):
        metrics.add_column(column)
    sa, sb = before.summary(), after.summary()
    for key in ("completion_rate", "pass_at_k", "pass_pow_k", "mean_cost", "mean_latency"):
        worse = sb[key] > sa[key] if key in CEILINGS else sb[key] < sa[key]
        mark = "[red]worse[/]" if worse and abs(sb[key] - sa[key]) > 1e-12 else ""
        if key == "mean_cost":
            metrics.add_row(
                key, before.mean_cost_text(digits=4), after.mean_cost_text(digits=4), mark
            )
            continue
        metrics.add_row(key, f"{sa[key]:.4g}", f"{sb[key]:.4g}", mark)
    ga, gb = before.grader_breakdown(), after.grader_breakdown()
    for grader in sorted(ga.keys() | gb.keys()):
        x, y = ga.get(grader), gb.get(grader)
        mark = "[red]worse[/]" if x is not None and y is not None and y < x else ""
        metrics.add_row(
            grader, "-" if x is None else f"{x:.0%}", "-" if y is None else f"{y:.0%}", mark
        )
    out.print(metrics)
    out.print(f"{regressions} case(s) regressed" if regressions else "no case regressed")
    return 1 if regressions else 0


def _harvest(paths: list[str], name: str | None) -> int:
    if len(paths) != 1:
        msg = f"harvest takes one trace file, got {len(paths)}; {_usage('harvest')}"
        raise EvalError(msg)
    case = Case.from_trace(paths[0], name)
    tools = case.metadata["observed_tools"]
    lines = [
        "# harvested by `tensorsketch eval harvest` from " + paths[0],
        "# correct the expectation where the recorded run went wrong, then add graders",
        "from tensorsketch.eval import Case, ToolSequence",
        "",
        f"case = Case(\n    {case.name!r},",
        f"    {json.dumps(dict(case.inputs), ensure_ascii=False)},",
        f"    graders=[ToolSequence({tools!r})]," if tools else "    graders=[],",
        ")",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        verb = args.paths[0]
        if verb == "compare":
            return _compare(args.paths[1:])
        if verb == "harvest":
            return _harvest(args.paths[1:], args.name)
        return _run_suites(args)
    except (EvalError, FileNotFoundError, ValueError) as exc:
        err.print(f"[bold red]error[/]: {exc}")
        return 2
