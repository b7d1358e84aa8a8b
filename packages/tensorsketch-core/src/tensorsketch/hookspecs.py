"""The TensorSketch plugin protocol: every hook a distribution can implement.

This module *is* the plugin documentation. A plugin is any module (or object) with functions
named after these specs and decorated with :data:`tensorsketch.hookimpl`; it is found through the
``tensorsketch`` entry-point group::

    # pyproject.toml of your distribution
    [project.entry-points.tensorsketch]
    acme = "acme_tensorsketch.plugin"

    # acme_tensorsketch/plugin.py
    from tensorsketch import hookimpl

    @hookimpl
    def tensorsketch_providers():
        return {"acme": "acme_tensorsketch.provider:AcmeProvider"}

First-party distributions register through exactly these hooks; core names none of them.

Hooks that contribute *named things* return a mapping ``name -> target``. A target is either a
``"module:attribute"`` string, resolved only when the name is first used (so listing names never
imports a vendor SDK or a database driver), or an object/callable that is used as is. Keep plugin
modules light: they are imported whenever the plugin manager loads.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy

__all__ = [
    "PROJECT_NAME",
    "CliCommand",
    "Target",
    "hookimpl",
    "hookspec",
    "tensorsketch_backends",
    "tensorsketch_canvas_node_kinds",
    "tensorsketch_channel_types",
    "tensorsketch_cli_commands",
    "tensorsketch_executors",
    "tensorsketch_graders",
    "tensorsketch_memory_stores",
    "tensorsketch_optimizers",
    "tensorsketch_providers",
    "tensorsketch_serve_protocols",
    "tensorsketch_session_stores",
    "tensorsketch_tracers",
]

#: The pluggy project name: the entry-point group and the hook markers' name.
PROJECT_NAME = "tensorsketch"

#: Marks a hook specification (this module's functions).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a plugin's implementation of a hook: ``@hookimpl def tensorsketch_providers(): ...``.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@dataclass(frozen=True, slots=True)
class CliCommand:
    """One ``tensorsketch`` subcommand (what ``tensorsketch_cli_commands`` returns):
    ``configure`` adds its arguments, ``run`` returns the exit code."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    configure: Callable[[argparse.ArgumentParser], None] | None = None


#: A lazily-resolved contribution: ``"package.module:Attribute"`` or the object itself.
Target = str | Any


@hookspec
def tensorsketch_providers() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute chat providers by name, for :func:`tensorsketch.create_provider`.

    :return: ``{"openai": "tensorsketch.providers.openai:OpenAIProvider", ...}``. The target is a
        :class:`~tensorsketch.ChatProvider` subclass or a zero-argument callable returning one.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_backends() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute durable backends by name, for :func:`tensorsketch.create_backend`.

    The attribute name of a string target also becomes importable from
    ``tensorsketch.runtime.backends`` (``"...postgres:PostgresBackend"`` makes
    ``from tensorsketch.runtime.backends import PostgresBackend`` work).

    :return: ``{"postgres": "tensorsketch.runtime.backends.postgres:PostgresBackend"}``.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_memory_stores() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute long-term memory stores by name, for
    :func:`tensorsketch.memory.create_memory_store`.

    :return: ``{"postgres": "tensorsketch.memory.postgres:PostgresStore"}``. The target is a
        :class:`tensorsketch.memory.MemoryStore` subclass or a callable building one.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_session_stores() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute session stores (conversation history across threads) by name, for
    :func:`tensorsketch.memory.create_session_store`.

    :return: ``{"postgres": "tensorsketch.memory.postgres_sessions:PostgresSessionStore"}``.
        The target is a :class:`tensorsketch.memory.SessionStore` subclass or a callable
        building one.

    .. versionadded:: 0.2
    """


@hookspec
def tensorsketch_executors() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute executors by name — where a superstep's ``Send`` instances run — for
    :func:`tensorsketch.create_executor` and ``compile(executor="name")``.

    :return: ``{"ray": "tensorsketch.ray.executor:RayExecutor"}``. The target is a
        :class:`tensorsketch.executors.Executor` subclass (built with the options passed to
        ``create_executor``) or a callable returning one.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_cli_commands() -> Sequence[CliCommand]:  # type: ignore[empty-body]
    """Contribute subcommands to the ``tensorsketch`` console command.

    :return: a sequence of :class:`tensorsketch.cli.CliCommand`. Names must be unique across all
        plugins; a clash is reported naming both plugins.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_channel_types() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute custom state channel markers by name (for tooling and the canvas).

    A marker is a :class:`tensorsketch.channels.ChannelMarker` subclass; using it in
    ``Annotated[T, Marker(...)]`` already works without registration. Registering gives it a
    name: ``Annotated[T, channel_marker("name", ...)]`` builds it without importing the
    plugin's module, and ``tensorsketch plugins`` lists it.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_tracers() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute tracer/exporter factories by name (``"otel"``, ``"file"``, ...), for
    :func:`tensorsketch.create_tracer`.

    :return: ``{"otel": "tensorsketch.observability.otel:OTelTracer"}``.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_serve_protocols() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute serving protocols by name (``"openai"``, ``"a2a"``, ``"agui"``, ...), for
    ``tensorsketch.serve.serve(graph, protocols=[...])`` and ``tensorsketch serve --protocol``.

    :return: ``{"acme": "acme_tensorsketch.serve:acme_protocol"}``. The target is a
        ``tensorsketch.serve.Protocol(factory, path=...)`` (``path`` is where ``serve`` mounts
        it), or a bare app factory ``factory(graph, **options) -> ASGI app`` (mounted at
        ``/<name>``). ``serve`` passes each factory only the options its signature names.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_graders() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute evaluation graders by name, for :func:`tensorsketch.eval.create_grader`.

    A suite then names the grader instead of importing it: ``Case(..., graders=["polite"])``
    or ``create_grader("polite", threshold=0.8)``.

    :return: ``{"polite": "acme_evals.graders:Polite"}``. The target is a grader class (an
        object with ``name`` and ``grade(trial)``) or a callable building one.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_optimizers() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute optimizers by name, for :func:`tensorsketch.eval.create_optimizer` and
    ``tensorsketch optimize --optimizer NAME``.

    :return: ``{"acme": "acme_evals.optimizers:AcmeOptimizer"}``. The target is a class with
        ``name`` and ``async optimize(program, suite, *, budget_usd=None)`` (the
        ``tensorsketch.eval.Optimizer`` contract) or a callable building one.

    .. versionadded:: 0.1
    """


@hookspec
def tensorsketch_canvas_node_kinds() -> Mapping[str, Target]:  # type: ignore[empty-body]
    """Contribute canvas node kinds (how the canvas draws and edits a node family).

    Reserved: nothing calls it yet (issue 15 builds its consumer).

    .. versionadded:: 0.1
    """


#: Who calls each hook. A hook with no caller yet is reserved for the issue that builds its
#: consumer, so a plugin author can tell a hook that takes effect from one that does not yet.
CONSUMERS: Mapping[str, str] = {
    "tensorsketch_providers": "tensorsketch.registry.providers (create_provider)",
    "tensorsketch_backends": "tensorsketch.registry.backends (create_backend)",
    "tensorsketch_memory_stores": "tensorsketch.memory.memory_stores (create_memory_store)",
    "tensorsketch_session_stores": (
        "tensorsketch.memory.session_stores (create_session_store, SessionHistory)"
    ),
    "tensorsketch_executors": "tensorsketch.registry.executors (create_executor, compile)",
    "tensorsketch_cli_commands": "tensorsketch.cli (the `tensorsketch` command)",
    "tensorsketch_channel_types": "tensorsketch.registry.channel_types (channel_marker)",
    "tensorsketch_tracers": "tensorsketch.registry.tracers (create_tracer)",
    "tensorsketch_graders": "tensorsketch.eval.graders (create_grader, grader names in a Case)",
    "tensorsketch_serve_protocols": "tensorsketch.serve.protocols (serve, `tensorsketch serve`)",
    "tensorsketch_optimizers": "tensorsketch.eval.optimizers (create_optimizer, `optimize`)",
}
RESERVED: Mapping[str, str] = {
    "tensorsketch_canvas_node_kinds": "issue 15 (the Studio)",
}

ALL_SPECS: tuple[str, ...] = (
    "tensorsketch_providers",
    "tensorsketch_backends",
    "tensorsketch_memory_stores",
    "tensorsketch_session_stores",
    "tensorsketch_executors",
    "tensorsketch_cli_commands",
    "tensorsketch_channel_types",
    "tensorsketch_tracers",
    "tensorsketch_serve_protocols",
    "tensorsketch_graders",
    "tensorsketch_optimizers",
    "tensorsketch_canvas_node_kinds",
)
