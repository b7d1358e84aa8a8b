"""Effect keys: how each journaled effect's key is spelt, and how a key is read back.

A run's journal is keyed by strings, and those strings outlive the code that wrote them: a
thread written by one version resumes under the next, and the studio's debugger reads keys
back to say which node an entry belongs to. So every kind of key is spelt by exactly one
function here and read back by :func:`parse_effect_key`; nothing else writes or splits them.
The spellings are frozen — changing one orphans every journal that holds it.

The kinds (``<owner>`` is ``<step>:<node><instance>``, see :class:`Scope`):

- ``<owner>:<call>:<name>`` — a node's ``call``-th ``ctx.step`` (:func:`step_key`).
- ``<owner>:agent:<k>:model`` / ``...:summary`` — an agent's model call or context summary in
  iteration ``k``; ``...:guard_input`` / ``...:guard_reply`` — its guardrails' verdict.
- ``<owner>:agent:shown<n>`` — how many messages an agent's ``n``-th suspension in the
  superstep wrote to the state, and their fingerprint (:func:`agent_shown_key`).
- ``<owner>:agent:<k>:tool:<i>:<call id>`` — the ``i``-th tool call of iteration ``k``, and
  ``...:defer<n>`` — the wake-up time of its ``n``-th ``RetryLater``.
- ``<owner>:llm:<attempt>`` — an ``Llm`` node's model call (one per repair attempt).
- ``resume:<step>:<interrupt id>`` — a person's decision for an interrupt.
- ``writes:<plan id>:<node><instance>`` — a finished task's writes.
- ``idem:<key>`` — an effect deduplicated across the whole thread.
- ``intent:<effect key>`` — an effect that was started: written before calling out, so a
  resume that finds it without the effect's own entry knows the effect is *in doubt*.

Node names and instance suffixes hold no ``:``; a tool call id may, as long as it does not
end in ``:defer<n>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, cast

__all__ = [
    "IDEMPOTENCY_PREFIX",
    "AgentTurnKey",
    "CallKey",
    "DecisionKey",
    "DeferralKey",
    "EffectKey",
    "IdempotencyKey",
    "IntentKey",
    "LlmAttemptKey",
    "NodeEffectKey",
    "NodePosition",
    "Scope",
    "ToolCallKey",
    "WritesKey",
    "agent_shown_key",
    "agent_turn_key",
    "decision_key",
    "decisions_prefix",
    "deferral_key",
    "idempotency_key",
    "intent_key",
    "llm_attempt_key",
    "parse_effect_key",
    "part_name",
    "step_key",
    "superstep_prefix",
    "tool_effect_key",
    "writes_key",
    "writes_prefix",
]

#: Keys of effects deduplicated across the whole thread (``ctx.step(idempotency_key=...)``).
IDEMPOTENCY_PREFIX = "idem:"
_DECISION_PREFIX = "resume:"
_WRITES_PREFIX = "writes:"
#: Keys of the intents written before an effect calls out (see :func:`intent_key`).
INTENT_PREFIX = "intent:"

#: The two journaled parts of an agent iteration besides its tool calls.
AgentPart = Literal["model", "summary", "guard_input", "guard_reply", "steer"]


class NodePosition(Protocol):
    """Where a node instance runs (a :class:`~tensorsketch.context.Context` is one)."""

    @property
    def superstep(self) -> int: ...

    @property
    def node(self) -> str: ...

    @property
    def instance(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Scope:
    """A node instance in a superstep: the owner every node-effect key starts with.

    :param instance: ``""`` for a plain node, ``"#k"`` for a ``Send`` instance, followed by a
        ``"[part]"`` per :meth:`Context.scoped` level.
    """

    step: int
    node: str
    instance: str = ""
    #: ``"<step>:<node><instance>"``, made once: every key of the scope starts with it.
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", f"{self.step}:{self.node}{self.instance}")

    @classmethod
    def of(cls, ctx: NodePosition) -> Scope:
        """The scope of the node instance ``ctx`` belongs to."""
        return cls(ctx.superstep, ctx.node, ctx.instance)

    def format(self) -> str:
        return self.prefix


# -- writing keys -----------------------------------------------------------------------------


def step_key(step: int, node: str, instance: str, call: int, name: str) -> str:
    """The key of a node's ``call``-th journaled call in a superstep: stable across a re-run
    of that superstep, whatever else the node body does."""
    return f"{step}:{node}{instance}:{call}:{name}"


def agent_turn_key(scope: Scope, iteration: int, part: AgentPart) -> str:
    """An agent's model call (``"model"``), context summary (``"summary"``), or the journaled
    verdict of its guardrails on the input (``"guard_input"``) or on a reply
    (``"guard_reply"``), or the steering messages taken before a model call (``"steer"``)."""
    return f"{scope.prefix}:agent:{iteration}:{part}"


def agent_shown_key(scope: Scope, count: int) -> str:
    """What an agent's ``count``-th suspension in the superstep showed in the state (read
    back as a :class:`NodeEffectKey` named ``agent:shown<count>``)."""
    return f"{scope.prefix}:agent:shown{count}"


def tool_effect_key(scope: Scope, iteration: int, index: int, call_id: str) -> str:
    """The ``index``-th tool call the model asked for in agent iteration ``iteration``."""
    return f"{scope.prefix}:agent:{iteration}:tool:{index}:{call_id}"


def deferral_key(tool_key: str, count: int) -> str:
    """The wake-up time a tool call's ``count``-th ``RetryLater`` asked for (also the id of
    the timer interrupt that waits for it)."""
    return f"{tool_key}:defer{count}"


def llm_attempt_key(scope: Scope, attempt: int) -> str:
    """An ``Llm`` node's model call, one per structured-output repair attempt."""
    return f"{scope.prefix}:llm:{attempt}"


def decision_key(step: int, interrupt_id: str) -> str:
    """Where the decision for an interrupt raised in superstep ``step`` is recorded."""
    return f"{_DECISION_PREFIX}{step}:{interrupt_id}"


def writes_key(plan_id: str | None, node: str, instance: str) -> str:
    """Where a finished task's writes are journaled, per planning checkpoint."""
    return f"{_WRITES_PREFIX}{plan_id}:{node}{instance}"


def idempotency_key(key: str) -> str:
    """An effect deduplicated across the whole thread under the caller's own key."""
    return f"{IDEMPOTENCY_PREFIX}{key}"


def intent_key(effect_key: str) -> str:
    """Where the intent of the effect journaled under ``effect_key`` is written: an intent
    without the effect's own entry means the call may or may not have happened."""
    return f"{INTENT_PREFIX}{effect_key}"


def part_name(owner: str | int, part: str | int) -> str:
    """The name of a scoped part of a node (``Context.scoped``): ``"3.model"``, ``"3.1"``,
    ``"llm.0"``. It becomes part of the instance of every key the part journals."""
    return f"{owner}.{part}"


# -- listing keys -----------------------------------------------------------------------------


def superstep_prefix(step: int) -> str:
    """What every node-effect key of superstep ``step`` starts with."""
    return f"{step}:"


def decisions_prefix(step: int) -> str:
    """What every decision key of superstep ``step`` starts with."""
    return f"{_DECISION_PREFIX}{step}:"


def writes_prefix(plan_id: str | None) -> str:
    """What every writes key of the tasks planned at ``plan_id`` starts with."""
    return f"{_WRITES_PREFIX}{plan_id}:"


# -- reading keys -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallKey:
    """A node's ``call``-th ``ctx.step``/``ctx.next_key`` call."""

    scope: Scope
    call: int
    name: str

    @property
    def node(self) -> str:
        return self.scope.node

    def format(self) -> str:
        s = self.scope
        return step_key(s.step, s.node, s.instance, self.call, self.name)


@dataclass(frozen=True, slots=True)
class AgentTurnKey:
    """An agent's model call or context summary in one iteration."""

    scope: Scope
    iteration: int
    part: AgentPart

    @property
    def node(self) -> str:
        return self.scope.node

    def format(self) -> str:
        return agent_turn_key(self.scope, self.iteration, self.part)


@dataclass(frozen=True, slots=True)
class ToolCallKey:
    """One tool call of an agent iteration."""

    scope: Scope
    iteration: int
    index: int
    call_id: str

    @property
    def node(self) -> str:
        return self.scope.node

    def format(self) -> str:
        return tool_effect_key(self.scope, self.iteration, self.index, self.call_id)


@dataclass(frozen=True, slots=True)
class DeferralKey:
    """The ``count``-th ``RetryLater`` of a tool call."""

    tool: ToolCallKey
    count: int

    @property
    def node(self) -> str:
        return self.tool.node

    def format(self) -> str:
        return deferral_key(self.tool.format(), self.count)


@dataclass(frozen=True, slots=True)
class LlmAttemptKey:
    """An ``Llm`` node's model call."""

    scope: Scope
    attempt: int

    @property
    def node(self) -> str:
        return self.scope.node

    def format(self) -> str:
        return llm_attempt_key(self.scope, self.attempt)


@dataclass(frozen=True, slots=True)
class NodeEffectKey:
    """A node effect of no kind above (a key some other code journaled under its node)."""

    scope: Scope
    name: str

    @property
    def node(self) -> str:
        return self.scope.node

    def format(self) -> str:
        return f"{self.scope.prefix}:{self.name}"


@dataclass(frozen=True, slots=True)
class DecisionKey:
    """A person's decision for interrupt ``interrupt_id`` of superstep ``step``."""

    step: int
    interrupt_id: str

    @property
    def node(self) -> None:
        return None

    def format(self) -> str:
        return decision_key(self.step, self.interrupt_id)


@dataclass(frozen=True, slots=True)
class WritesKey:
    """A finished task's writes (``plan_id`` ``None``: written before any checkpoint)."""

    plan_id: str | None
    node: str
    instance: str = ""

    def format(self) -> str:
        return writes_key(self.plan_id, self.node, self.instance)


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """An effect deduplicated across the thread under the caller's ``key``."""

    key: str

    @property
    def node(self) -> None:
        return None

    def format(self) -> str:
        return idempotency_key(self.key)


@dataclass(frozen=True, slots=True)
class IntentKey:
    """The intent of an effect (``effect`` is that effect's key, read back)."""

    effect: EffectKey

    @property
    def node(self) -> str | None:
        return self.effect.node

    def format(self) -> str:
        return intent_key(self.effect.format())


#: A journal key, read back.
EffectKey: TypeAlias = (
    CallKey
    | AgentTurnKey
    | ToolCallKey
    | DeferralKey
    | LlmAttemptKey
    | NodeEffectKey
    | DecisionKey
    | WritesKey
    | IdempotencyKey
    | IntentKey
)

_INT = re.compile(r"-?[0-9]+")
_DEFERRAL = re.compile(r"(.*):defer([0-9]+)", re.DOTALL)
_AGENT_TURN = re.compile(r"(-?[0-9]+):(model|summary|guard_input|guard_reply)")
_TOOL_CALL = re.compile(r"(-?[0-9]+):tool:(-?[0-9]+):(.*)", re.DOTALL)


def parse_effect_key(key: str) -> EffectKey | None:
    """What ``key`` is, or ``None`` for a string no function here spells.

    ``parse_effect_key(k).format() == k`` for every key the writers above produce.
    """
    head, sep, rest = key.partition(":")
    if not sep:
        return None
    if head == "idem":
        return IdempotencyKey(rest)
    if head == "intent":
        effect = parse_effect_key(rest)
        return None if effect is None or isinstance(effect, IntentKey) else IntentKey(effect)
    if head == "resume":
        step, sep, interrupt_id = rest.partition(":")
        if not sep or not _INT.fullmatch(step):
            return None
        return DecisionKey(int(step), interrupt_id)
    if head == "writes":
        plan, sep, owner = rest.partition(":")
        node, instance = _split_owner(owner)
        if not sep or not node:
            return None
        return WritesKey(None if plan == "None" else plan, node, instance)
    if not _INT.fullmatch(head):
        return None
    owner, sep, name = rest.partition(":")
    node, instance = _split_owner(owner)
    if not sep or not node:
        return None
    return _node_effect(Scope(int(head), node, instance), name)


def _split_owner(owner: str) -> tuple[str, str]:
    """``"<node><instance>"`` as ``(node, instance)``: the instance starts at ``#`` or ``[``."""
    cuts = [i for i in (owner.find("#"), owner.find("[")) if i >= 0]
    if not cuts:
        return owner, ""
    cut = min(cuts)
    return owner[:cut], owner[cut:]


def _node_effect(scope: Scope, name: str) -> EffectKey:
    call, sep, call_name = name.partition(":")
    if sep and _INT.fullmatch(call):
        return CallKey(scope, int(call), call_name)
    kind, sep, tail = name.partition(":")
    if sep and kind == "llm" and _INT.fullmatch(tail):
        return LlmAttemptKey(scope, int(tail))
    if sep and kind == "agent":
        turn = _AGENT_TURN.fullmatch(tail)
        if turn is not None:
            return AgentTurnKey(scope, int(turn[1]), cast("AgentPart", turn[2]))
        tool = _TOOL_CALL.fullmatch(tail)
        if tool is not None:
            call_id = tool[3]
            deferred = _DEFERRAL.fullmatch(call_id)
            if deferred is not None:
                key = ToolCallKey(scope, int(tool[1]), int(tool[2]), deferred[1])
                return DeferralKey(key, int(deferred[2]))
            return ToolCallKey(scope, int(tool[1]), int(tool[2]), call_id)
    return NodeEffectKey(scope, name)
