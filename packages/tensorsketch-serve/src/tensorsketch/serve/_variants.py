"""A served graph with its agent changed for one request.

A protocol request can ask for more than the graph was built with: an OpenAI client's
``response_format`` (answer in this JSON schema), an AG-UI frontend's own ``tools``. The graph
stays as it is; the request runs on a variant of it whose agent node is
:meth:`Agent.variant <tensorsketch.agents.Agent.variant>` of the graph's own (same name and
ports, so its threads, checkpoints and journal are the graph's).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensorsketch.agents import Agent
from tensorsketch.pregel.compiled import CompiledGraph

if TYPE_CHECKING:
    from tensorsketch.schema import Schema
    from tensorsketch.tools import Tool

__all__ = ["agents_of", "with_agents"]


def agents_of(graph: CompiledGraph[Any]) -> list[str]:
    """The names of the graph's top-level :class:`Agent` nodes, in the graph's order."""
    return [name for name, spec in graph.spec.nodes.items() if isinstance(spec.node, Agent)]


def with_agents(
    graph: CompiledGraph[Any],
    names: Sequence[str],
    *,
    output_schema: type[Schema] | None = None,
    extra_tools: Sequence[Tool] = (),
) -> CompiledGraph[Any]:
    """``graph`` with the agents ``names`` answering in ``output_schema`` and offering
    ``extra_tools`` (``ValueError`` when one clashes with an agent's own tool)."""
    nodes = dict(graph.spec.nodes)
    for name in names:
        node = nodes[name]
        assert isinstance(node.node, Agent)
        agent = node.node.variant(output_schema=output_schema, extra_tools=extra_tools)
        nodes[name] = dataclasses.replace(node, node=agent, run=agent.run)
    spec = copy.copy(graph.spec)  # every derived field kept (replace() would recompute some)
    spec.nodes = nodes
    return CompiledGraph(spec)
