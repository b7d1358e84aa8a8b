"""TensorSketch: typed agent graphs on a durable BSP runtime.

The graph API is imported eagerly; the agent layer, tracers and backends load on first
attribute access, so ``import tensorsketch`` stays fast and pulls in no provider SDK, database
driver or web framework.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

import importlib
from typing import TYPE_CHECKING, Any

from tensorsketch import _install_hints
from tensorsketch.channels import ChannelMarker, Reducer, Topic
from tensorsketch.command import Command
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.errors import (
    BackendUnavailableError,
    BackendUnsupportedError,
    CheckpointDecodeError,
    DecisionConflictError,
    DepsUnavailableError,
    EmptyChannelError,
    ExecutorError,
    GraphRecursionError,
    GraphValidationError,
    Hole,
    InvalidUpdateError,
    LeaseLostError,
    MissingInputError,
    NodeError,
    NodeTimeoutError,
    NotDurableWarning,
    PluginError,
    QueueFullError,
    RegistryError,
    RoutingError,
    RunConflictError,
    RunNotFoundError,
    RunStoreUnsupportedError,
    TensorSketchError,
    ThreadBusyError,
    ValidationError,
)
from tensorsketch.events import Event
from tensorsketch.graph import Graph
from tensorsketch.graph_structure import BranchInfo, GraphStructure
from tensorsketch.handles import NodeHandle, Router
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.retry import RetryPolicy
from tensorsketch.schema import Schema
from tensorsketch.send import Send

_install_hints.install()

# Names that load their module on first use: ``name -> module``.
_LAZY: dict[str, str] = {
    # plugins
    "hookimpl": "tensorsketch.hookspecs",
    # registry
    "create_provider": "tensorsketch.registry",
    "create_backend": "tensorsketch.registry",
    "register_provider": "tensorsketch.registry",
    "register_backend": "tensorsketch.registry",
    "create_tracer": "tensorsketch.registry",
    "register_tracer": "tensorsketch.registry",
    "channel_marker": "tensorsketch.registry",
    "create_executor": "tensorsketch.registry",
    "register_executor": "tensorsketch.registry",
    # where a superstep's Send instances run
    "Executor": "tensorsketch.executors",
    # durability
    "Backend": "tensorsketch.runtime.backends.base",
    "InMemoryBackend": "tensorsketch.runtime.backends.memory",
    "SqliteBackend": "tensorsketch.runtime.backends.sqlite",
    "Checkpoint": "tensorsketch.durable",
    "JsonSerializer": "tensorsketch.serializers",
    "MsgpackSerializer": "tensorsketch.serializers",
    "PickleSerializer": "tensorsketch.serializers",
    "Serializer": "tensorsketch.serializers",
    # tools and messages
    "tool": "tensorsketch.tools",
    "Tool": "tensorsketch.tools",
    "Toolset": "tensorsketch.toolsets",
    "Message": "tensorsketch.messages",
    "ToolCall": "tensorsketch.messages",
    "add_messages": "tensorsketch.messages",
    # providers
    "ChatProvider": "tensorsketch.provider",
    "Completion": "tensorsketch.provider",
    "Usage": "tensorsketch.provider",
    "Capabilities": "tensorsketch.provider",
    "ProviderError": "tensorsketch.provider",
    "FakeProvider": "tensorsketch.fake",
    # agents and patterns
    "Agent": "tensorsketch.agents",
    "AgentState": "tensorsketch.agents",
    "create_agent": "tensorsketch.agents",
    "handoff": "tensorsketch.agents",
    "Llm": "tensorsketch.agents",
    "generate_structured": "tensorsketch.structured_output",
    "as_tool": "tensorsketch.patterns",
    "gather_map": "tensorsketch.patterns",
    "parallel": "tensorsketch.patterns",
    "run_subgraph": "tensorsketch.patterns",
    "Middleware": "tensorsketch.middleware",
    "ModelRequest": "tensorsketch.middleware",
    "ToolRequest": "tensorsketch.middleware",
    "RetryMiddleware": "tensorsketch.middleware",
    "ObservabilityMiddleware": "tensorsketch.middleware",
    "interrupt": "tensorsketch.interrupts",
    "Interrupt": "tensorsketch.interrupts",
    "RetryLater": "tensorsketch.interrupts",
    "run_info": "tensorsketch.interrupts",
    "Budget": "tensorsketch.budget",
    "BudgetExceededError": "tensorsketch.budget",
    "estimate_cost": "tensorsketch.pricing",
    "DEFAULT_PRICES": "tensorsketch.pricing",
    # observability
    "Tracer": "tensorsketch.observability.tracing",
    "NoopTracer": "tensorsketch.observability.tracing",
    "RecordingTracer": "tensorsketch.observability.tracing",
    "Span": "tensorsketch.observability.tracing",
    "InMemoryTracer": "tensorsketch.observability.memory",
    "Trace": "tensorsketch.observability.memory",
    "MultiTracer": "tensorsketch.observability.multi",
    "FileTracer": "tensorsketch.observability.export",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - package metadata, only for __version__

        try:
            return version("tensorsketch-core")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            return "0.0.0"
    module_name = _LAZY.get(name)
    if module_name is None:
        msg = f"module 'tensorsketch' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:
    # ``X as X``: explicit re-exports, so type checkers see the lazily loaded names.
    from tensorsketch.agents import Agent as Agent
    from tensorsketch.agents import AgentState as AgentState
    from tensorsketch.agents import Llm as Llm
    from tensorsketch.agents import create_agent as create_agent
    from tensorsketch.agents import handoff as handoff
    from tensorsketch.budget import Budget as Budget
    from tensorsketch.budget import BudgetExceededError as BudgetExceededError
    from tensorsketch.durable import Checkpoint as Checkpoint
    from tensorsketch.executors import Executor as Executor
    from tensorsketch.fake import FakeProvider as FakeProvider
    from tensorsketch.hookspecs import hookimpl as hookimpl
    from tensorsketch.interrupts import Interrupt as Interrupt
    from tensorsketch.interrupts import RetryLater as RetryLater
    from tensorsketch.interrupts import interrupt as interrupt
    from tensorsketch.interrupts import run_info as run_info
    from tensorsketch.messages import Message as Message
    from tensorsketch.messages import ToolCall as ToolCall
    from tensorsketch.messages import add_messages as add_messages
    from tensorsketch.middleware import Middleware as Middleware
    from tensorsketch.middleware import ModelRequest as ModelRequest
    from tensorsketch.middleware import ObservabilityMiddleware as ObservabilityMiddleware
    from tensorsketch.middleware import RetryMiddleware as RetryMiddleware
    from tensorsketch.middleware import ToolRequest as ToolRequest
    from tensorsketch.observability.export import FileTracer as FileTracer
    from tensorsketch.observability.memory import InMemoryTracer as InMemoryTracer
    from tensorsketch.observability.memory import Trace as Trace
    from tensorsketch.observability.multi import MultiTracer as MultiTracer
    from tensorsketch.observability.tracing import NoopTracer as NoopTracer
    from tensorsketch.observability.tracing import RecordingTracer as RecordingTracer
    from tensorsketch.observability.tracing import Span as Span
    from tensorsketch.observability.tracing import Tracer as Tracer
    from tensorsketch.patterns import as_tool as as_tool
    from tensorsketch.patterns import gather_map as gather_map
    from tensorsketch.patterns import parallel as parallel
    from tensorsketch.patterns import run_subgraph as run_subgraph
    from tensorsketch.pricing import DEFAULT_PRICES as DEFAULT_PRICES
    from tensorsketch.pricing import estimate_cost as estimate_cost
    from tensorsketch.provider import Capabilities as Capabilities
    from tensorsketch.provider import ChatProvider as ChatProvider
    from tensorsketch.provider import Completion as Completion
    from tensorsketch.provider import ProviderError as ProviderError
    from tensorsketch.provider import Usage as Usage
    from tensorsketch.registry import channel_marker as channel_marker
    from tensorsketch.registry import create_backend as create_backend
    from tensorsketch.registry import create_executor as create_executor
    from tensorsketch.registry import create_provider as create_provider
    from tensorsketch.registry import create_tracer as create_tracer
    from tensorsketch.registry import register_backend as register_backend
    from tensorsketch.registry import register_executor as register_executor
    from tensorsketch.registry import register_provider as register_provider
    from tensorsketch.registry import register_tracer as register_tracer
    from tensorsketch.runtime.backends.base import Backend as Backend
    from tensorsketch.runtime.backends.memory import InMemoryBackend as InMemoryBackend
    from tensorsketch.runtime.backends.sqlite import SqliteBackend as SqliteBackend
    from tensorsketch.serializers import JsonSerializer as JsonSerializer
    from tensorsketch.serializers import MsgpackSerializer as MsgpackSerializer
    from tensorsketch.serializers import PickleSerializer as PickleSerializer
    from tensorsketch.serializers import Serializer as Serializer
    from tensorsketch.structured_output import generate_structured as generate_structured
    from tensorsketch.tools import Tool as Tool
    from tensorsketch.tools import tool as tool
    from tensorsketch.toolsets import Toolset as Toolset

__all__ = [
    # graph
    "END",
    "START",
    "BranchInfo",
    "ChannelMarker",
    "CompiledGraph",
    "Context",
    "Event",
    "Graph",
    "GraphStructure",
    "Node",
    "NodeHandle",
    "Reducer",
    "RetryPolicy",
    "Router",
    "Schema",
    "Send",
    "Command",
    "Topic",
    # errors
    "BackendUnavailableError",
    "BackendUnsupportedError",
    "CheckpointDecodeError",
    "DecisionConflictError",
    "DepsUnavailableError",
    "EmptyChannelError",
    "ExecutorError",
    "GraphRecursionError",
    "GraphValidationError",
    "Hole",
    "InvalidUpdateError",
    "MissingInputError",
    "NodeError",
    "NodeTimeoutError",
    "NotDurableWarning",
    "PluginError",
    "RegistryError",
    "QueueFullError",
    "RoutingError",
    "RunConflictError",
    "RunNotFoundError",
    "RunStoreUnsupportedError",
    "TensorSketchError",
    "LeaseLostError",
    "ThreadBusyError",
    "ValidationError",
    "__version__",
    *_LAZY,
]
