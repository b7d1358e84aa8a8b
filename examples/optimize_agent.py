"""Optimizing an agent against its eval suite, offline: ``tensorsketch optimize`` from start
to finish on a ticket-triage agent.

The agent's scripted model writes a chatty sentence unless its instructions ask for one
label, and files a charge caused by a crash under "bug" unless its prompt shows examples.
The scripted proposer reads the failing trials and proposes instructions. The optimizer
keeps what scores higher on the held-out tickets: first the new instructions, then the same
instructions with demonstrations bootstrapped from tickets that passed. A dry run prints the
scores (with confidence intervals) and the diff; ``--write`` puts the winning prompt into
``triage.py``, which stays plain code.

Run: python examples/optimize_agent.py   (works in a temp folder; the HTML report is there)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tensorsketch.cli import main
from tensorsketch.eval import PromptSource

WORKDIR = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp(prefix="ts-optimize-"))

AGENT = '''\
"""Ticket triage: one label per ticket."""

from tensorsketch import FakeProvider, Usage, create_agent
from tensorsketch.messages import assistant

LABELS = {
    "I was charged twice this month": "billing",
    "Refund my annual plan": "billing",
    "The app crashes when I upload a photo": "bug",
    "Export to PDF shows a blank page": "bug",
    "I cannot log in after resetting my password": "account",
    "Please delete my account": "account",
    "The app crashed and charged my card twice": "billing",
    "A crash during checkout billed me for nothing": "billing",
}
TRICKY = {
    "The app crashed and charged my card twice",
    "A crash during checkout billed me for nothing",
}


def triage_model(messages, tools):
    prompt = messages[0].text if messages[0].role == "system" else ""
    ticket = messages[-1].text
    label = LABELS[ticket]
    if ticket in TRICKY and "Examples:" not in prompt:
        label = "bug"  # the crash misleads it unless it has seen worked examples
    if "exactly one word" not in prompt:
        return assistant(f"Thanks for reaching out! This sounds like a {label} matter to me.")
    return assistant(label)


USAGE = Usage(input_tokens=400, output_tokens=20)
model = FakeProvider(triage_model, model="gpt-5-mini", usage=USAGE)

agent = create_agent(model, system="You triage customer support tickets.")
'''

SUITE = '''\
"""Eight tickets, four held out; graded on the exact label."""

from tensorsketch.eval import Case, Equals, Suite

TICKETS = [
    ("I was charged twice this month", "billing", "train"),
    ("The app crashes when I upload a photo", "bug", "train"),
    ("I cannot log in after resetting my password", "account", "train"),
    ("The app crashed and charged my card twice", "billing", "train"),
    ("Refund my annual plan", "billing", "holdout"),
    ("Export to PDF shows a blank page", "bug", "holdout"),
    ("Please delete my account", "account", "holdout"),
    ("A crash during checkout billed me for nothing", "billing", "holdout"),
]

suite = Suite(
    "triage",
    [
        Case(f"ticket-{i}", {"query": text}, graders=[Equals(label)], metadata={"split": split})
        for i, (text, label, split) in enumerate(TICKETS, 1)
    ],
)
'''

PROPOSER = '''\
"""A scripted proposer: it reads the failing trials it is shown."""

import json

from tensorsketch import FakeProvider, Usage
from tensorsketch.messages import assistant


def propose(messages, tools):
    failures = messages[-1].text
    if "This sounds like" in failures:
        instructions = (
            "You triage customer support tickets. Answer with exactly one word: billing, bug "
            "or account."
        )
    else:  # the labels are single words now, but some are the wrong one
        instructions = (
            "You triage customer support tickets. Answer with exactly one word: billing, bug "
            "or account. Label a ticket by what the customer wants fixed."
        )
    return assistant(json.dumps({"instructions": instructions}))


proposer = FakeProvider(propose, model="gpt-5", usage=Usage(input_tokens=1500, output_tokens=150))
'''


def run(*args: str) -> int:
    print(f"\n$ tensorsketch {' '.join(args)}")
    return main(list(args))


def main_example() -> None:
    (WORKDIR / "triage.py").write_text(AGENT, encoding="utf-8")
    (WORKDIR / "triage_suite.py").write_text(SUITE, encoding="utf-8")
    (WORKDIR / "proposer.py").write_text(PROPOSER, encoding="utf-8")
    os.chdir(WORKDIR)
    command = [
        "optimize",
        "triage.py:agent",
        "--suite",
        "triage_suite.py",
        "--proposer",
        "proposer.py:proposer",
        "--budget-usd",
        "0.05",
    ]
    # A dry run: the scores before and after, the diff, and the HTML report.
    assert run(*command, "--html", "optimization.html") == 0
    assert PromptSource("triage.py").prompt.instructions == "You triage customer support tickets."
    # Apply it: the winning prompt goes into triage.py; nothing else in the file changes.
    assert run(*command, "--write") == 0
    best = PromptSource("triage.py").prompt
    print("\ntriage.py now tells the agent:")
    print(best.render())
    assert best.instructions.endswith("Label a ticket by what the customer wants fixed.")
    assert len(best.examples) == 3
    # The optimized agent is ordinary code: the eval suite now passes on every ticket.
    assert (
        run(
            "eval",
            "triage_suite.py",
            "--agent",
            "triage.py:agent",
            "--require",
            "completion_rate=1.0",
        )
        == 0
    )
    print(f"\nHTML report with the optimization history: {WORKDIR / 'optimization.html'}")


if __name__ == "__main__":
    main_example()
