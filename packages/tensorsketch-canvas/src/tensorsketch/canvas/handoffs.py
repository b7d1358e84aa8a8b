"""Handoffs on the canvas: the agents of a file as nodes, their ``handoffs=[...]`` as edges.

A handoff is declared where its giver is built — ``Agent(..., handoffs=[billing])`` or
``create_agent(..., handoffs=[handoff(billing, input_filter=without_tools)])`` — so that list
is the whole record. :func:`extract_handoffs` reads every ``x = Agent(...)`` /
``x = create_agent(...)`` at the top of the file or of a top-level function (the node is the
agent's ``name=``, else the variable) and each
entry of its list as a :class:`HandoffEdge`, without importing the file. An entry is a
variable naming an agent of the file, an agent's name as a string (a hand back to an agent
built later), or a ``handoff(target, ...)`` call whose literal options are read too.

:func:`add_handoff` and :func:`remove_handoff` edit that list and nothing else, so adding an
edge and removing it gives the file back byte for byte: a new entry is the receiver's
variable when it is built above the giver in the same body (its name as a string otherwise),
appended in the list's own layout; a giver without ``handoffs=`` gets it as its last argument,
and removing
its last entry removes the argument again. Both re-read their output and refuse to return a
file whose handoffs are not exactly the intended ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tensorsketch.canvas.exceptions import IRError, SourceParseError, WriteBackError

__all__ = [
    "AgentNode",
    "AgentTeam",
    "HandoffEdge",
    "add_handoff",
    "extract_handoffs",
    "remove_handoff",
]

_FACTORIES = ("Agent", "create_agent")
_HANDOFF_CALL = "handoff"
_STRING = re.compile(r"""^[rRuU]?(['"])(.*)\1$""", re.DOTALL)


@dataclass(frozen=True)
class AgentNode:
    """An agent built at the top of the file: its ``name`` (``name=`` or the variable), the
    ``variable`` it is assigned to, the factory (``Agent`` / ``create_agent``) and its line."""

    name: str
    variable: str
    factory: str
    line: int = field(compare=False)


@dataclass(frozen=True)
class HandoffEdge:
    """One entry of an agent's ``handoffs=[...]``, in the canvas's documented edge form.

    ``source`` gives the conversation to ``target`` (both agent names). ``tool_name``,
    ``input_filter`` (its code, e.g. ``"without_tools"``) and ``requires_approval`` are the
    literal options of a ``handoff(...)`` entry (``None`` / ``False`` for a bare one);
    ``by_name`` is set when the entry names its target by a string.
    """

    source: str
    target: str
    tool_name: str | None = None
    input_filter: str | None = None
    requires_approval: bool = False
    by_name: bool = False
    kind: str = "handoff"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AgentTeam:
    """The agents of a file and the handoffs between them (targets the file does not build
    are kept as edges; ``unknown`` lists those names)."""

    agents: list[AgentNode]
    handoffs: list[HandoffEdge]

    @property
    def unknown(self) -> list[str]:
        names = {a.name for a in self.agents}
        return sorted({e.target for e in self.handoffs} - names)

    def to_json(self) -> dict[str, Any]:
        return {
            "agents": [{**asdict(a)} for a in self.agents],
            "handoffs": [e.to_json() for e in self.handoffs],
        }


@dataclass
class _Built:
    """An agent's assignment as found in the module: where its call is, for editing."""

    node: AgentNode
    scope: int
    index: int
    call: cst.Call


def extract_handoffs(source: str) -> AgentTeam:
    """The agents the file builds at module level and the handoffs between them."""
    module, built = _read(source)
    by_variable = {b.node.variable: b.node for b in built}
    edges = [
        edge
        for b in built
        for entry in _entries(b.call)
        if (edge := _edge(b.node.name, entry.value, by_variable)) is not None
    ]
    del module
    return AgentTeam([b.node for b in built], edges)


def add_handoff(source: str, giver: str, receiver: str) -> str:
    """``source`` with a handoff from the agent ``giver`` to ``receiver`` (agent names)."""
    module, built = _read(source)
    giving, receiving = _agent(built, giver), _agent(built, receiver)
    before = extract_handoffs(source)
    if any(e.source == giver and e.target == receiver for e in before.handoffs):
        msg = f"agent {giver!r} already hands off to {receiver!r}; nothing to add."
        raise IRError(msg)
    if receiving.scope == giving.scope and receiving.index < giving.index:
        value: cst.BaseExpression = cst.Name(receiving.node.variable)
    else:  # built below the giver: a variable would not exist yet, the name does
        value = cst.SimpleString(_quoted(receiver, receiving.call))
    call = giving.call
    argument = _handoffs_arg(call)
    if argument is None:
        new_arg = cst.Arg(
            keyword=cst.Name("handoffs"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            value=cst.List([cst.Element(value)]),
        )
        new_call = call.with_changes(
            args=_appended(list(call.args), new_arg, call.whitespace_before_args)
        )
    else:
        listed = argument.value
        if not isinstance(listed, cst.List):
            msg = (
                f"agent {giver!r}'s `handoffs=` is not a list written in the file; make it "
                "`handoffs=[...]` to edit it from the canvas."
            )
            raise WriteBackError(msg)
        elements = _appended(
            list(listed.elements), cst.Element(value), listed.lbracket.whitespace_after
        )
        new_list = listed.with_changes(elements=elements)
        new_call = call.with_changes(
            args=[a.with_changes(value=new_list) if a is argument else a for a in call.args]
        )
    text = _replace(module, call, new_call)
    _check(text, before, add=(giver, receiver))
    return text


def remove_handoff(source: str, giver: str, receiver: str) -> str:
    """``source`` without the handoff from ``giver`` to ``receiver``."""
    module, built = _read(source)
    giving = _agent(built, giver)
    before = extract_handoffs(source)
    by_variable = {b.node.variable: b.node for b in built}
    call = giving.call
    argument = _handoffs_arg(call)
    elements = (
        list(argument.value.elements) if argument and isinstance(argument.value, cst.List) else []
    )
    matching = [
        i
        for i, el in enumerate(elements)
        if (e := _edge(giver, el.value, by_variable)) and e.target == receiver
    ]
    if argument is None or not matching:
        msg = f"agent {giver!r} has no handoff to {receiver!r} in the file; nothing to remove."
        raise IRError(msg)
    assert isinstance(argument.value, cst.List)
    kept = _removed(elements, matching[0])
    if kept:
        new_list = argument.value.with_changes(elements=kept)
        new_call = call.with_changes(
            args=[a.with_changes(value=new_list) if a is argument else a for a in call.args]
        )
    else:  # the list was the edge's only entry: the argument goes with it
        args = list(call.args)
        new_call = call.with_changes(args=_removed(args, args.index(argument)))
    text = _replace(module, call, new_call)
    _check(text, before, remove=(giver, receiver))
    return text


# -- reading ---------------------------------------------------------------------------------


def _read(source: str) -> tuple[cst.Module, list[_Built]]:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        msg = f"the file is not valid Python (line {exc.raw_line}): {exc.message}"
        raise SourceParseError(msg) from None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    built: list[_Built] = []
    for scope, suite in enumerate(_suites(module)):
        built += _built_in(suite, scope, positions)
    return module, built


def _suites(module: cst.Module) -> list[Sequence[cst.BaseStatement]]:
    """Where agents are read: the module, and the body of each top-level function (an
    example's ``main()`` builds its agents there)."""
    suites: list[Sequence[cst.BaseStatement]] = [module.body]
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef) and isinstance(statement.body, cst.IndentedBlock):
            suites.append(statement.body.body)
    return suites


def _built_in(
    suite: Sequence[cst.BaseStatement], scope: int, positions: Mapping[cst.CSTNode, Any]
) -> list[_Built]:
    built: list[_Built] = []
    for index, statement in enumerate(suite):
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        assign = statement.body[0]
        if not isinstance(assign, cst.Assign | cst.AnnAssign) or assign.value is None:
            continue
        targets = (
            [t.target for t in assign.targets]
            if isinstance(assign, cst.Assign)
            else [assign.target]
        )
        call = assign.value
        if (
            len(targets) != 1
            or not isinstance(targets[0], cst.Name)
            or not isinstance(call, cst.Call)
        ):
            continue
        factory = _callee(call.func)
        if factory not in _FACTORIES:
            continue
        variable = targets[0].value
        name = _keyword_string(call, "name") or variable
        line = positions[statement].start.line
        built.append(_Built(AgentNode(name, variable, factory, line), scope, index, call))
    return built


def _callee(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        found = _STRING.match(node.value)
        if found and "\\" not in found.group(2):
            return found.group(2)
    return None


def _keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _keyword_string(call: cst.Call, name: str) -> str | None:
    arg = _keyword(call, name)
    return _string(arg.value) if arg is not None else None


def _handoffs_arg(call: cst.Call) -> cst.Arg | None:
    return _keyword(call, "handoffs")


def _entries(call: cst.Call) -> list[cst.BaseElement]:
    arg = _handoffs_arg(call)
    if arg is None or not isinstance(arg.value, cst.List | cst.Tuple):
        return []
    return list(arg.value.elements)


def _edge(
    giver: str, value: cst.BaseExpression, agents: dict[str, AgentNode]
) -> HandoffEdge | None:
    """The edge an entry declares (``None``: an entry the canvas cannot name a target for)."""
    options: dict[str, Any] = {}
    if isinstance(value, cst.Call) and _callee(value.func) == _HANDOFF_CALL and value.args:
        first = value.args[0]
        if first.keyword is not None:
            return None
        for key in ("tool_name", "input_filter", "requires_approval"):
            arg = _keyword(value, key)
            if arg is None:
                continue
            if key == "tool_name":
                options[key] = _string(arg.value)
            elif key == "input_filter":
                options[key] = cst.Module([]).code_for_node(arg.value)
            else:
                options[key] = isinstance(arg.value, cst.Name) and arg.value.value == "True"
        value = first.value
    if isinstance(value, cst.Name) and value.value in agents:
        return HandoffEdge(giver, agents[value.value].name, **options)
    if (name := _string(value)) is not None:
        return HandoffEdge(giver, name, by_name=True, **options)
    return None


def _agent(built: list[_Built], name: str) -> _Built:
    for b in built:
        if b.node.name == name:
            return b
    known = ", ".join(repr(b.node.name) for b in built) or "none"
    msg = (
        f"no agent named {name!r} is built at the top of the file (agents: {known}); a handoff "
        "joins two `x = Agent(...)` / `x = create_agent(...)` assignments of the file."
    )
    raise IRError(msg)


# -- writing ---------------------------------------------------------------------------------


def _has_newline(ws: cst.BaseParenthesizableWhitespace | cst.MaybeSentinel) -> bool:
    return isinstance(ws, cst.ParenthesizedWhitespace)


def _appended(items: list[Any], new: Any, opening: Any) -> list[Any]:
    """``items`` with ``new`` last, in the layout the items already have: a trailing comma
    passes to the new item, and the separator before it copies the one already in use."""
    if not items:
        return [new]
    last = items[-1]
    if len(items) >= 2 and isinstance(items[-2].comma, cst.Comma):
        separator = items[-2].comma
    elif _has_newline(opening):
        separator = cst.Comma(whitespace_after=opening)
    else:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [*items[:-1], last.with_changes(comma=separator), new.with_changes(comma=last.comma)]


def _quoted(name: str, call: cst.Call) -> str:
    """``name`` as a string literal in the quotes of the agent's own ``name=`` (double when
    it has none)."""
    arg = _keyword(call, "name")
    quote = (
        "'"
        if arg is not None
        and isinstance(arg.value, cst.SimpleString)
        and arg.value.value.startswith("'")
        else '"'
    )
    if quote in name or "\\" in name:
        return repr(name)
    return f"{quote}{name}{quote}"


def _removed(items: list[Any], index: int) -> list[Any]:
    """``items`` without the one at ``index``: the inverse of :func:`_appended` (the new last
    item takes the removed last item's comma)."""
    kept = items[:index] + items[index + 1 :]
    if kept and index == len(items) - 1:
        kept[-1] = kept[-1].with_changes(comma=items[index].comma)
    return kept


def _replace(module: cst.Module, old: cst.Call, new: cst.Call) -> str:
    class _Swap(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            return new if original is old else updated

    return module.visit(_Swap()).code


def _check(
    text: str,
    before: AgentTeam,
    *,
    add: tuple[str, str] | None = None,
    remove: tuple[str, str] | None = None,
) -> None:
    """Refuse a result whose handoffs are not exactly ``before``'s with the one change."""
    wanted = [(e.source, e.target) for e in before.handoffs]
    if add is not None:
        wanted.append(add)
    if remove is not None:
        wanted.remove(remove)
    got = [(e.source, e.target) for e in extract_handoffs(text).handoffs]
    if sorted(got) != sorted(wanted):
        msg = (
            "the edited file would not read back with the intended handoffs "
            f"(wanted {sorted(wanted)}, got {sorted(got)}); the file is left as it was."
        )
        raise WriteBackError(msg)
