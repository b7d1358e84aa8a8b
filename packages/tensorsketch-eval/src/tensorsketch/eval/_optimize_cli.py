"""``tensorsketch optimize agent.py:agent --suite suite.py``: improve the agent's prompt
against its suite, print the scores before and after with confidence intervals and the diff
of the source, and write the winning prompt into the file only with ``--write``.

Exit codes: 0 done (improved or not), 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tensorsketch.eval._agents import load_attr, load_module
from tensorsketch.eval._case import Case, Suite
from tensorsketch.eval._html import render_html
from tensorsketch.eval._optimizer import OptimizationResult, OptimizationRound, create_optimizer
from tensorsketch.eval._report import clip
from tensorsketch.eval._source import PromptSource
from tensorsketch.eval.exceptions import EvalError

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Improve an agent's instructions and few-shot examples against its eval suite. The "
        "prompt is the string literal its `system=` gets (or the constant --prompt names); "
        "candidates are scored on a training split and kept only if they score higher on a "
        "held-out split. Prints the scores before and after and the diff; --write applies it."
    )
    parser.add_argument("target", metavar="AGENT.py:ATTR", help="the agent's file and name")
    parser.add_argument(
        "--suite", required=True, metavar="SUITE.py", help="the file defining the eval suite"
    )
    parser.add_argument(
        "--suite-name", metavar="NAME", help="which suite, when the file defines several"
    )
    parser.add_argument(
        "--budget-usd",
        type=float,
        metavar="N",
        help="stop before spending more than this (suite runs plus proposals, priced models)",
    )
    parser.add_argument(
        "--max-rounds", type=int, default=5, metavar="N", help="proposals to try (default 5)"
    )
    parser.add_argument(
        "--optimizer", default="reflective", metavar="NAME", help="registered optimizer name"
    )
    parser.add_argument(
        "--provider", metavar="NAME", help="the proposer model's provider (openai, anthropic...)"
    )
    parser.add_argument("--model", metavar="M", help="the proposer model (with --provider)")
    parser.add_argument(
        "--proposer",
        metavar="SPEC",
        help="the proposer as 'module:attr' or 'file.py:attr' (a ChatProvider), not --provider",
    )
    parser.add_argument(
        "--prompt", metavar="NAME", help="the module-level constant holding the prompt"
    )
    parser.add_argument(
        "--holdout", type=float, default=0.5, help="fraction of cases held out (default 0.5)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
    parser.add_argument("--trials", type=int, help="trials per case (default: each case's own)")
    parser.add_argument("--concurrency", type=int, default=1, help="trials run at once")
    parser.add_argument("--html", type=Path, metavar="PATH", help="write the HTML eval report")
    parser.add_argument(
        "--write", action="store_true", help="write the winning prompt into the agent's file"
    )


def _suite(path: str, name: str | None) -> Suite:
    module = load_module(path)
    suites = [v for v in vars(module).values() if isinstance(v, Suite)]
    loose = [v for v in vars(module).values() if isinstance(v, Case)]
    if not suites and loose:
        suites = [Suite(Path(path).stem, loose)]
    if name is not None:
        chosen = [s for s in suites if s.name == name]
        if not chosen:
            names = ", ".join(s.name for s in suites) or "none"
            msg = f"{path} defines no suite named {name!r}; the suites there: {names}."
            raise EvalError(msg)
        return chosen[0]
    if len(suites) != 1:
        found = (
            f"{len(suites)} suites ({', '.join(s.name for s in suites)})" if suites else "no suite"
        )
        msg = f"{path} defines {found}; " + (
            "choose one with --suite-name NAME." if suites else "define `suite = Suite(...)`."
        )
        raise EvalError(msg)
    return suites[0]


def _proposer(args: argparse.Namespace) -> Any:
    if args.proposer and args.provider:
        msg = "pass either --proposer SPEC or --provider NAME [--model M], not both."
        raise EvalError(msg)
    if args.proposer:
        from tensorsketch.provider import ChatProvider  # noqa: PLC0415 - only when asked

        found = load_attr(args.proposer)
        if isinstance(found, type) or (callable(found) and not isinstance(found, ChatProvider)):
            found = found()  # a provider class or a factory
        if not isinstance(found, ChatProvider):
            msg = f"--proposer {args.proposer} is {found!r}, not a chat provider."
            raise EvalError(msg)
        return found
    if args.provider:
        from tensorsketch.registry import create_provider  # noqa: PLC0415 - only when asked

        options = {"model": args.model} if args.model else {}
        return create_provider(args.provider, **options)
    msg = (
        "name the model that proposes new instructions: --provider NAME --model M (for "
        "example --provider openai --model gpt-5), or --proposer file.py:attr."
    )
    raise EvalError(msg)


def _build(args: argparse.Namespace, on_round: Any) -> Any:
    offered = {
        "proposer": _proposer(args),
        "max_rounds": args.max_rounds,
        "holdout": args.holdout,
        "seed": args.seed,
        "trials": args.trials,
        "concurrency": args.concurrency,
        "on_round": on_round,
    }
    from tensorsketch.eval._optimizer import optimizers  # noqa: PLC0415 - resolved by name

    factory = optimizers.resolve(args.optimizer)
    try:
        params = dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        params = {}
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        offered = {k: v for k, v in offered.items() if k in params}
    return create_optimizer(args.optimizer, **offered)


def _round_line(entry: OptimizationRound) -> str:
    held = str(entry.holdout) if entry.holdout is not None else "-"
    mark = "[green]kept[/]" if entry.accepted else "[dim]dropped[/]"
    examples = f", {len(entry.prompt.examples)} example(s)" if entry.prompt.examples else ""
    return (
        f"round {entry.index}: {mark} train {entry.train}  held-out {held}{examples}  "
        f"[dim]{escape(clip(entry.note, 90))}[/]"
    )


def _summary(result: OptimizationResult) -> Table:
    table = Table(title=f"{result.optimizer} on suite {result.suite}", title_justify="left")
    for column in ("split", "before", "after"):
        table.add_column(column)
    table.add_row("held-out", str(result.before), str(result.after))
    table.add_row("training", str(result.before_train), str(result.after_train))
    return table


def run(args: argparse.Namespace) -> int:
    out, err = Console(), Console(stderr=True)
    try:
        source = PromptSource.from_spec(args.target, variable=args.prompt)
        suite = _suite(args.suite, args.suite_name)
        optimizer = _build(args, lambda entry: out.print(_round_line(entry)))
        out.print(
            f"optimizing {escape(args.target)} (prompt: {escape(source.where)}) on suite "
            f"{escape(suite.name)} ({len(suite)} cases)"
        )
        result = asyncio.run(
            optimizer.optimize(source.program(), suite, budget_usd=args.budget_usd)
        )
    except (EvalError, FileNotFoundError, LookupError, ValueError, TypeError) as exc:
        err.print(f"[bold red]error[/]: {escape(str(exc))}")
        return 2
    out.print(_summary(result))
    budget = f" of ${result.budget_usd:.4f}" if result.budget_usd is not None else ""
    out.print(f"stopped: {result.stopped}; spent ${result.spent_usd:.4f}{budget}")
    if result.unpriced_models:
        out.print(
            f"[yellow]note[/]: {', '.join(result.unpriced_models)} had no price, so the "
            "spend (and the budget) could not count their calls."
        )
    if args.html is not None:
        args.html.write_text(
            render_html(result.reports, title=f"Optimizing {args.target}", optimization=result),
            encoding="utf-8",
        )
        out.print(f"HTML report: {args.html}")
    if not result.improved:
        out.print("no candidate beat the current prompt; the file is unchanged.")
        return 0
    out.print(source.diff(result.best), highlight=False, markup=False, soft_wrap=True)
    if args.write:
        source.write(result.best)
        out.print(f"wrote the new prompt into {source.path}")
    else:
        out.print("dry run: pass --write to apply this change to the file.")
    return 0
