"""The eval distribution's plugin module (registered under the ``tensorsketch`` group).

It contributes the built-in graders by name (``create_grader("contains", "Paris")``), exactly
as a third-party package contributes its own, and the ``tensorsketch eval`` command. Nothing
heavy is imported here: the targets are strings, and the command loads its module when run.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from tensorsketch.cli import CliCommand
from tensorsketch.hookspecs import Target, hookimpl

__all__ = ["tensorsketch_cli_commands", "tensorsketch_graders", "tensorsketch_optimizers"]

_GRADERS = "tensorsketch.eval._graders"
EVAL_HELP = "run evaluation suites (also: `eval compare A B`, `eval harvest TRACE`)"
OPTIMIZE_HELP = "improve an agent's instructions and examples against its eval suite"


@hookimpl
def tensorsketch_graders() -> Mapping[str, Target]:
    """The built-in code graders, by snake_case name."""
    return {
        "contains": f"{_GRADERS}:Contains",
        "equals": f"{_GRADERS}:Equals",
        "regex": f"{_GRADERS}:Regex",
        "tool_called": f"{_GRADERS}:ToolCalled",
        "tool_args": f"{_GRADERS}:ToolArgs",
        "tool_sequence": f"{_GRADERS}:ToolSequence",
        "step_efficiency": f"{_GRADERS}:StepEfficiency",
        "cost_budget": f"{_GRADERS}:CostBudget",
        "latency_budget": f"{_GRADERS}:LatencyBudget",
        "final_state": f"{_GRADERS}:FinalState",
        "llm_judge": "tensorsketch.eval._judge:LlmJudge",
    }


@hookimpl
def tensorsketch_optimizers() -> Mapping[str, Target]:
    """The built-in optimizers, by name."""
    return {"reflective": "tensorsketch.eval._reflective:ReflectiveOptimizer"}


def _configure(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.eval._cli import configure  # noqa: PLC0415 - a command's module loads when it runs

    configure(parser)


def _run(args: argparse.Namespace) -> int:
    from tensorsketch.eval._cli import run  # noqa: PLC0415 - a command's module loads when it runs

    return run(args)


def _configure_optimize(parser: argparse.ArgumentParser) -> None:
    from tensorsketch.eval._optimize_cli import configure  # noqa: PLC0415 - a command's module loads when it runs

    configure(parser)


def _run_optimize(args: argparse.Namespace) -> int:
    from tensorsketch.eval._optimize_cli import run  # noqa: PLC0415 - a command's module loads when it runs

    return run(args)


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch eval suite.py`` runs suites (``compare`` and ``harvest`` are its verbs);
    ``tensorsketch optimize agent.py:agent --suite suite.py`` improves the agent's prompt."""
    return [
        CliCommand(name="eval", help=EVAL_HELP, configure=_configure, run=_run),
        CliCommand(
            name="optimize", help=OPTIMIZE_HELP, configure=_configure_optimize, run=_run_optimize
        ),
    ]
