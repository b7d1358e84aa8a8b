"""What is graded: a :class:`Case` (inputs, graders, how many trials), grouped in a
:class:`Suite`.

A case's ``env`` is the world its tools act on. It is rebuilt for every trial (a factory is
called, a plain value is deep-copied), so one trial's writes never leak into the next.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorsketch.durable.lineage import ForkEffects, check_fork_effects
from tensorsketch.eval._approvals import ApprovalPolicy, check_policy
from tensorsketch.eval._graders import ToolSequence
from tensorsketch.eval._trial import parse_args, tool_calls_of
from tensorsketch.eval.exceptions import EvalError
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.tracing import ATTR_INPUT

if TYPE_CHECKING:
    from tensorsketch.eval._graders import GraderLike
    from tensorsketch.runtime.backends.base import Backend

__all__ = ["Case", "Checkpoint", "Suite"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a forked case starts: a stored checkpoint of a durable thread."""

    backend: Backend
    thread_id: str
    checkpoint_id: str
    #: What a trial does with an effect the stored run ran after this checkpoint (as
    #: ``fork(effects=...)``: ``"reuse"``, ``"rerun"``, or ``None`` to stop before it).
    effects: ForkEffects | None = None


@dataclass(slots=True)
class Case:
    """One task: the inputs, the graders every trial must pass, and how many trials to run.

    :param name: unique within its suite.
    :param inputs: the state fields the agent is invoked with (``{"query": ...}``).
    :param graders: graders, or names of graders registered through ``tensorsketch_graders``.
    :param trials: how many independent runs (agents are not deterministic).
    :param k: the k of pass@k / pass^k (default: ``trials``); any k <= trials is unbiased.
    :param env: the trial's environment: a zero-argument factory, or a value deep-copied per
        trial. The run gets it as its dependencies (``ctx.deps`` in tools, nodes and
        middleware), an agent factory ``agent(env)`` receives it, ``FinalState`` reads it back.
    :param output_key: the state field graded as the answer.
    :param checkpoint: start every trial from this stored checkpoint (a fork) instead of from
        the beginning; ``inputs`` are applied on top of the checkpointed state.
    :param approve: the reviewer of the trial's approvals: ``{tool_name: decision}`` (a
        decision is ``True`` / ``False``, ``"approve"`` / ``"reject"`` or ``{"approved": False,
        "reason": ...}``) or a function ``policy(pending) -> decision`` (``None``: undecided).
        Each time the run suspends, the trial resumes it with these decisions. Without it a
        run that asks for approval ends the trial suspended.
    """

    name: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    graders: Sequence[GraderLike] = ()
    trials: int = 1
    k: int | None = None
    env: Any = None
    output_key: str = "output"
    checkpoint: Checkpoint | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    approve: ApprovalPolicy | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            msg = f"Case(name, ...) needs a non-empty name, got {self.name!r}."
            raise EvalError(msg)
        if not isinstance(self.inputs, Mapping):
            msg = (
                f"Case {self.name!r}: inputs must be a dict of state fields (like "
                f"{{'query': ...}}), got {type(self.inputs).__name__}."
            )
            raise EvalError(msg)
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            msg = f"Case {self.name!r}: trials must be a positive int, got {self.trials!r}."
            raise EvalError(msg)
        if self.k is not None and not (isinstance(self.k, int) and 1 <= self.k <= self.trials):
            msg = (
                f"Case {self.name!r}: k={self.k!r} must be an int in 1..trials={self.trials}; "
                "pass@k draws k of the trials that ran."
            )
            raise EvalError(msg)
        self.graders = list(self.graders)
        check_policy(self.name, self.approve)

    def fresh_env(self) -> Any:
        """A new environment for one trial (factory called, value deep-copied)."""
        if callable(self.env):
            return self.env()
        return copy.deepcopy(self.env)

    @classmethod
    def from_trace(
        cls,
        trace: Trace | str | Path,
        name: str | None = None,
        *,
        graders: Iterable[GraderLike] = (),
        inputs: Mapping[str, Any] | None = None,
        expect_tools: bool = True,
        trials: int = 1,
    ) -> Case:
        """A regression case from a recorded run (a ``Trace`` or a ``FileTracer`` file).

        The run's input (recorded on its ``run`` span) becomes the case's inputs, and with
        ``expect_tools`` the observed tool trajectory becomes a starting expectation
        (``ToolSequence`` of the tools it called, in order). Correct the expectation where the
        recorded run was wrong: that is how a production failure becomes a test.
        """
        source = str(trace) if isinstance(trace, str | Path) else None
        loaded = Trace.load(trace) if isinstance(trace, str | Path) else trace
        roots = [span for span in loaded.roots if span.kind == "run"]
        if inputs is None:
            raw = next(
                (s.attributes.get(ATTR_INPUT) for s in roots if ATTR_INPUT in s.attributes), None
            )
            if raw is None:
                where = f" in {source!r}" if source else ""
                msg = (
                    f"no run input recorded{where}: the trace has no `run` span with a "
                    f"{ATTR_INPUT!r} attribute; pass inputs= explicitly."
                )
                raise EvalError(msg)
            parsed = parse_args(raw)
            if not isinstance(parsed, dict):
                msg = (
                    f"the recorded run input {raw!r:.80} is not a dict of state fields; "
                    "pass inputs=."
                )
                raise EvalError(msg)
            inputs = parsed
        chosen: list[GraderLike] = list(graders)
        tools = [use.name for use in tool_calls_of(loaded)]
        if expect_tools and tools:
            chosen.append(ToolSequence(tools))
        trace_id = roots[0].trace_id if roots else (loaded.spans[0].trace_id if len(loaded) else "")
        return cls(
            name=name or f"harvested-{trace_id[:8] or 'run'}",
            inputs=dict(inputs),
            graders=chosen,
            trials=trials,
            metadata={"harvested_from": source or trace_id, "observed_tools": tools},
        )

    @classmethod
    def from_checkpoint(
        cls,
        name: str,
        backend: Backend,
        thread_id: str,
        checkpoint_id: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        effects: ForkEffects | None = None,
        **options: Any,
    ) -> Case:
        """A case whose trials fork a stored run at ``checkpoint_id`` and run only its tail.

        :param effects: what a trial does with a side effect the stored run ran after the
            checkpoint, as :meth:`CompiledGraph.fork` takes it: ``"rerun"`` (against the
            trial's own ``env``), ``"reuse"`` (replay the stored result of an identical
            call), or ``None`` — the trial stops before the first one with a
            ``ForkEffectError``.
        """
        effects = check_fork_effects(effects)
        return cls(
            name,
            dict(inputs or {}),
            checkpoint=Checkpoint(backend, thread_id, checkpoint_id, effects),
            **options,
        )


class Suite:
    """A named list of cases, run together by :func:`~tensorsketch.eval.evaluate`."""

    def __init__(self, name: str, cases: Iterable[Case] = ()) -> None:
        self.name = name
        self.cases: list[Case] = []
        for case in cases:
            self.add(case)

    def add(self, case: Case) -> Suite:
        """Add a case (names are unique within a suite)."""
        if not isinstance(case, Case):
            msg = f"Suite {self.name!r} takes Case objects, got {type(case).__name__}."
            raise EvalError(msg)
        if any(existing.name == case.name for existing in self.cases):
            msg = f"Suite {self.name!r} already has a case named {case.name!r}; rename one."
            raise EvalError(msg)
        self.cases.append(case)
        return self

    def __iter__(self) -> Any:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __repr__(self) -> str:
        return f"Suite({self.name!r}, {len(self.cases)} cases)"
