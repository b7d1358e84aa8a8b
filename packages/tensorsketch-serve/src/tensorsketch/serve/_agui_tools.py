"""Frontend tools: the tools an AG-UI client declares (``RunAgentInput.tools``), which the
client runs itself.

Each becomes a tool the graph's agents can call. Calling one suspends the run with an
interrupt whose id is the tool call's id (``RUN_FINISHED`` with the ``interrupt`` outcome,
``reason: "tool_call"``); the client runs the tool and starts the next run with a ``resume``
entry for it, whose ``payload`` is the tool's result — the tool message the model reads — or
``status: "cancelled"``, an error result. This is the pattern CopilotKit frontends use for
their actions. The interrupt keeps the tool's declaration, so a resume that does not declare
the tools again still finds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui import core as agui

from tensorsketch.context import Context
from tensorsketch.interrupts import PendingInterrupt, interrupt
from tensorsketch.tools import Tool, current_tool_call

__all__ = [
    "FRONTEND_TOOL",
    "FrontendToolError",
    "frontend_call",
    "frontend_decision",
    "frontend_tools",
]

#: The key of a frontend tool call's interrupt value that names the tool.
FRONTEND_TOOL = "frontend_tool"


class FrontendToolError(RuntimeError):
    """The client cancelled a frontend tool call, or reported that it failed: the model reads
    an error result."""


def frontend_call(pending: PendingInterrupt) -> Mapping[str, Any] | None:
    """The interrupt's value when it is a frontend tool call waiting for its result."""
    value = pending.value
    if pending.kind == "interrupt" and isinstance(value, Mapping) and FRONTEND_TOOL in value:
        return value
    return None


def frontend_decision(status: str, payload: Any) -> dict[str, Any]:
    """What a frontend tool's interrupt is resumed with: ``resolved`` and the client's result,
    ``error`` and what went wrong, or ``cancelled`` (plain data, so the journal stores it)."""
    return {"status": status, "result": payload}


def _declared(name: str, description: str, parameters: Any) -> Tool:
    async def run_in_frontend(args: dict[str, Any], ctx: Context) -> Any:
        call = current_tool_call()
        call_id = call.id if call is not None else None
        value = {
            FRONTEND_TOOL: name,
            "args": args,
            "call_id": call_id,
            "description": description,
            "parameters": parameters,
        }
        answer = await interrupt(ctx, value, id=call_id)
        if not isinstance(answer, Mapping):
            return answer
        if answer.get("status") == "cancelled":
            msg = f"the user cancelled the call to {name!r}; it did not run."
            raise FrontendToolError(msg)
        if answer.get("status") == "error":
            raise FrontendToolError(f"{name!r} failed in the frontend: {answer.get('result')}")
        return answer.get("result")

    schema = parameters if isinstance(parameters, Mapping) else {"type": "object"}
    return Tool.from_schema(name, description, schema, run_in_frontend)


def frontend_tools(
    declared: Sequence[agui.Tool], pending: Sequence[PendingInterrupt] = ()
) -> list[Tool]:
    """The client's tools as agent tools: those it declares, and those of the frontend tool
    calls the thread waits on that it does not declare again. ``ValueError`` names a tool
    whose name or parameters cannot be a tool's."""
    made: dict[str, Tool] = {}
    for index, item in enumerate(declared):
        try:
            made[item.name] = _declared(item.name, item.description, item.parameters)
        except ValueError as exc:
            msg = f"`tools[{index}]` ({item.name!r}): {exc}"
            raise ValueError(msg) from None
    for waiting in pending:
        value = frontend_call(waiting)
        if value is not None and value[FRONTEND_TOOL] not in made:
            name = str(value[FRONTEND_TOOL])
            made[name] = _declared(name, str(value.get("description", "")), value.get("parameters"))
    return list(made.values())
