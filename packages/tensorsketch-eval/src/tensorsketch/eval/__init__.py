"""Evaluating agents over the trace they already emit: cases and trials, graders, pass@k and
pass^k, sandboxes, reporters, online scoring and drift detection, and optimizers that improve
an agent's prompt against its suite.

``evaluate(agent, suite)`` runs each case's trials behind a :class:`Sandbox`, grades every
trial here in the harness (never inside the agent), and returns a :class:`Report`.
"""

from tensorsketch.eval._case import Case, Checkpoint, Suite
from tensorsketch.eval._drift import (
    Baseline,
    DriftAlert,
    DriftMonitor,
    PageHinkley,
    ks_2samp,
    psi,
    two_proportion_z,
)
from tensorsketch.eval._graders import (
    Contains,
    CostBudget,
    Custom,
    Equals,
    FinalState,
    Grader,
    LatencyBudget,
    Regex,
    StepEfficiency,
    ToolArgs,
    ToolCalled,
    ToolSequence,
    grader,
)
from tensorsketch.eval._harness import ProgressEvent, evaluate, grade_trial
from tensorsketch.eval._html import render_html
from tensorsketch.eval._judge import Calibration, LlmJudge, Verdict, calibrate
from tensorsketch.eval._metrics import pass_at_k, pass_pow_k
from tensorsketch.eval._online import OnlineMonitor, score
from tensorsketch.eval._optimizer import (
    OptimizationResult,
    OptimizationRound,
    Optimizer,
    Score,
    create_optimizer,
    optimizers,
    register_optimizer,
)
from tensorsketch.eval._program import Program
from tensorsketch.eval._prompt import Example, Prompt
from tensorsketch.eval._reflective import ReflectiveOptimizer
from tensorsketch.eval._registry import create_grader, graders, register_grader
from tensorsketch.eval._report import CaseResult, Report, TrialResult
from tensorsketch.eval._reporters import (
    CallbackReporter,
    JsonlReporter,
    MetricsReporter,
    MultiReporter,
    Reporter,
    ScoreSink,
    WebhookReporter,
)
from tensorsketch.eval._sandbox import InProcessSandbox, Sandbox, SubprocessSandbox
from tensorsketch.eval._scores import record_grades
from tensorsketch.eval._source import PromptSource
from tensorsketch.eval._trial import Grade, Trial, tool_calls_of
from tensorsketch.eval.exceptions import EvalError, GateFailed, GraderError, SandboxError

__all__ = [
    "Baseline",
    "Calibration",
    "CallbackReporter",
    "Case",
    "CaseResult",
    "Checkpoint",
    "Contains",
    "CostBudget",
    "Custom",
    "DriftAlert",
    "DriftMonitor",
    "Equals",
    "EvalError",
    "Example",
    "FinalState",
    "GateFailed",
    "Grade",
    "Grader",
    "GraderError",
    "InProcessSandbox",
    "JsonlReporter",
    "LatencyBudget",
    "LlmJudge",
    "MetricsReporter",
    "MultiReporter",
    "OnlineMonitor",
    "OptimizationResult",
    "OptimizationRound",
    "Optimizer",
    "PageHinkley",
    "Program",
    "ProgressEvent",
    "Prompt",
    "PromptSource",
    "ReflectiveOptimizer",
    "Regex",
    "Report",
    "Reporter",
    "Sandbox",
    "SandboxError",
    "Score",
    "ScoreSink",
    "StepEfficiency",
    "SubprocessSandbox",
    "Suite",
    "ToolArgs",
    "ToolCalled",
    "ToolSequence",
    "Trial",
    "TrialResult",
    "Verdict",
    "WebhookReporter",
    "calibrate",
    "create_grader",
    "create_optimizer",
    "evaluate",
    "grade_trial",
    "grader",
    "graders",
    "ks_2samp",
    "optimizers",
    "pass_at_k",
    "pass_pow_k",
    "psi",
    "record_grades",
    "register_grader",
    "register_optimizer",
    "render_html",
    "score",
    "tool_calls_of",
    "two_proportion_z",
]
