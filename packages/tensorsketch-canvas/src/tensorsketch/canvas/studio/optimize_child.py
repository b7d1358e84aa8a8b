"""The optimizer run the Studio's "Optimize" action starts, in a process of its own:
``python -m tensorsketch.canvas.studio.optimize_child`` reads the request (JSON) on stdin and
writes JSON lines on stdout, one per round (``{"round": ...}``) and the outcome
(``{"result": ...}`` or ``{"error": ...}``).

It builds the optimization exactly as ``tensorsketch optimize`` does (the same argument
parser, suite loader and optimizer factory), so the agent's and the suite's code run here,
never in the Studio. Nothing is written: the outcome carries the new source, and the Studio
writes it only when the user confirms.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from typing import Any, TextIO


def _argv(request: dict[str, Any]) -> list[str]:
    """The ``tensorsketch optimize`` arguments the request stands for."""
    argv = [f"{request['file']}:{request['agent']}", "--suite", str(request["suite"])]
    if request.get("proposer"):
        argv += ["--proposer", str(request["proposer"])]
    else:
        argv += ["--provider", str(request["provider"])]
        if request.get("model"):
            argv += ["--model", str(request["model"])]
    for option in ("max_rounds", "budget_usd", "seed"):
        if request.get(option) is not None:
            argv += [f"--{option.replace('_', '-')}", str(request[option])]
    return argv


def _prompt(prompt: Any) -> dict[str, Any]:
    return {
        "instructions": prompt.instructions,
        "examples": [{"input": e.input, "output": e.output} for e in prompt.examples],
    }


def optimize(request: dict[str, Any], out: TextIO) -> None:
    """Run the optimization ``request`` describes, reporting on ``out``."""
    from tensorsketch.eval._optimize_cli import (  # noqa: PLC0415 - the child needs the eval package
        _build,
        _suite,
        configure,
    )
    from tensorsketch.eval._source import PromptSource  # noqa: PLC0415 - as above

    def emit(item: dict[str, Any]) -> None:
        out.write(json.dumps(item, default=str) + "\n")
        out.flush()

    parser = argparse.ArgumentParser(prog="tensorsketch optimize", exit_on_error=False)
    configure(parser)
    args = parser.parse_args(_argv(request))
    source = PromptSource.from_spec(args.target, variable=args.prompt)
    suite = _suite(args.suite, args.suite_name)
    optimizer = _build(args, lambda entry: emit({"round": entry.to_dict()}))
    emit({"started": {"prompt": source.where, "suite": suite.name, "cases": len(suite)}})
    result = asyncio.run(optimizer.optimize(source.program(), suite, budget_usd=args.budget_usd))
    emit(
        {
            "result": {
                "optimizer": result.optimizer,
                "suite": result.suite,
                "before": str(result.before),
                "after": str(result.after),
                "before_train": str(result.before_train),
                "after_train": str(result.after_train),
                "scores": {
                    "before": result.before.to_dict(),
                    "after": result.after.to_dict(),
                },
                "improved": result.improved,
                "stopped": result.stopped,
                "spent_usd": result.spent_usd,
                "unpriced_models": list(result.unpriced_models),
                "initial": _prompt(result.initial),
                "best": _prompt(result.best),
                "diff": source.diff(result.best) if result.improved else "",
                "source_sha256": hashlib.sha256(source.source.encode("utf-8")).hexdigest(),
                "new_source": source.apply(result.best) if result.improved else None,
            }
        }
    )


def main() -> int:
    # What the agent and the suite print goes to stderr: stdout carries only the reports.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        request = json.loads(sys.stdin.read())
        optimize(request, out)
    except (Exception, SystemExit) as exc:  # the Studio shows why
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
