"""Checked by mypy in the `typecheck` session (not run by pytest): ``Agent`` and
``create_agent`` share one typed options definition, so a type checker sees every option —
and rejects a misspelt or mistyped one (strict mode's unused-ignore check proves each
``# type: ignore`` below is needed)."""

from __future__ import annotations

from typing import Unpack, assert_type

from tensorsketch import Agent, AgentState, CompiledGraph, FakeProvider, create_agent
from tensorsketch.agents import AgentOptions


def options() -> None:
    provider = FakeProvider()
    app = create_agent(provider, [], system="s", max_iterations=3, tool_timeout=1.5)
    assert_type(app, CompiledGraph[AgentState])
    Agent(provider, [], name="helper", report=False, output_key="answer", max_tokens=10)
    create_agent(provider, max_iteration=3)  # type: ignore[call-arg]
    create_agent(provider, max_iterations="3")  # type: ignore[arg-type]
    create_agent(provider, report=False)  # type: ignore[call-arg]


def wrapper(**options: Unpack[AgentOptions]) -> CompiledGraph[AgentState]:
    """A function of your own that forwards the options, typed by the same definition."""
    return create_agent(FakeProvider(), **options)


def forwarded() -> None:
    wrapper(system="x", fallbacks=[FakeProvider()])
