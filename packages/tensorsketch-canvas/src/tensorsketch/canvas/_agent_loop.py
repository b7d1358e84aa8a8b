"""The agent loop drawn out: ``decompose(agent)`` / ``decomposed_agent(...)`` as a subgraph.

The decomposed loop is built by a library function, not written in the user's file, so the
canvas cannot read its wiring there. It knows the shape instead — a ``model`` node and a
``tools`` node, ``START → model``, and the conditional cycle between them — exactly as
``tensorsketch.agents.decomposed.decompose`` wires it (the canvas tests compare the two
through the runtime's ``Graph.structure``). Its ports are the ``AgentState`` fields the
parent's state shares; the loop's own position between turns stays inside it.
"""

from __future__ import annotations

import libcst as cst

from tensorsketch.canvas._classes import string_value
from tensorsketch.canvas._modules import assigned_call, dotted, module_of
from tensorsketch.canvas._source import ParsedSource
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port

__all__ = ["AGENT_FIELDS", "LOOP_FUNCTIONS", "agent_loop", "loop_graph"]

#: The functions that build the decomposed loop, by the paths a file may import them from.
LOOP_FUNCTIONS = frozenset(
    f"{module}.{name}"
    for module in ("tensorsketch.agents", "tensorsketch.agents.decomposed")
    for name in ("decompose", "decomposed_agent")
)
#: ``AgentState``'s fields, as a parent sharing them sees them (a subgraph node's ports).
AGENT_FIELDS = (
    Port("query", "str"),
    Port("messages", "list[Message]"),
    Port("output", "str"),
    Port("parsed", "Any"),
    Port("status", "AgentStatus"),
    Port("pending", "list[PendingInterrupt]"),
    Port("iterations", "int"),
    Port("usage", "Usage"),
    Port("cost_usd", "float | None"),
    Port("stop_detail", "str"),
    Port("compaction", "Compaction | None"),
    Port("tripwire", "Tripwire | None"),
    Port("active_agent", "str"),
)
#: The agent's name when no ``name=`` says otherwise (``AgentOptions.name``).
DEFAULT_NAME = "agent"


def agent_loop(src: ParsedSource, call: cst.Call) -> str | None:
    """The agent's name when ``call`` builds the decomposed loop, else ``None``: the
    ``name=`` of ``decomposed_agent(...)``, or of the ``Agent(...)`` / ``create_agent(...)``
    ``decompose`` is given (inline or assigned at module level); ``"agent"`` when none is
    written as a literal."""
    parts = dotted(src.code(call.func))
    if parts is None:
        return None
    full = module_of(src, parts)
    if full not in LOOP_FUNCTIONS:
        return None
    if full.endswith("decomposed_agent"):
        return _name_of(call)
    agent = call.args[0].value if call.args else None
    if isinstance(agent, cst.Name):
        agent = assigned_call(src.module, agent.value)
    return _name_of(agent) if isinstance(agent, cst.Call) else DEFAULT_NAME


def loop_graph(name: str) -> GraphIR:
    """The decomposed loop's graph, as ``decompose`` builds it (named after the agent)."""
    route = {"model": "_after_model", "tools": "_after_tools"}
    edges = [EdgeIR(START, "model")]
    for source, targets in (("model", ["model", "tools", END]), ("tools", ["model", END])):
        edges.extend(
            EdgeIR(source, target, "conditional", path=route[source], label=target)
            for target in targets
        )
    return GraphIR(
        name=name,
        state="LoopState",
        nodes=[NodeIR("model", cls="ModelStep"), NodeIR("tools", cls="ToolStep")],
        edges=edges,
        style="statement",
    )


def _name_of(call: cst.Call) -> str:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "name":
            return string_value(arg.value) or DEFAULT_NAME
    return DEFAULT_NAME
