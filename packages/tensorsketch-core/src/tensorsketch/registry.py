"""Choose a provider or a backend by name: ``create_provider("openai", model=...)``.

Names come from three places, highest precedence first: explicit ``register_*`` calls, plugins
(the ``tensorsketch_providers`` / ``tensorsketch_backends`` hooks), and the simple
``tensorsketch.providers`` / ``tensorsketch.backends`` entry-point groups. Listing and
resolving names imports nothing optional: a target stays a ``"module:Attribute"`` string (or an
unloaded entry point) until :func:`create_provider` / :func:`create_backend` builds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from tensorsketch.channels import ChannelMarker
from tensorsketch.name_registry import Registry
from tensorsketch.observability.tracing import Tracer
from tensorsketch.pregel.seam import Executor, executors
from tensorsketch.runtime.backends.base import Backend, backends

if TYPE_CHECKING:
    from tensorsketch.provider import ChatProvider

__all__ = [
    "Registry",
    "backends",
    "channel_marker",
    "channel_types",
    "create_backend",
    "create_executor",
    "create_provider",
    "create_tracer",
    "executors",
    "providers",
    "register_backend",
    "register_executor",
    "register_provider",
    "register_tracer",
    "tracers",
]

T = TypeVar("T")


providers: Registry[ChatProvider] = Registry(
    "provider", "tensorsketch_providers", "tensorsketch.providers"
)
tracers: Registry[Tracer] = Registry("tracer", "tensorsketch_tracers", "tensorsketch.tracers")
channel_types: Registry[ChannelMarker] = Registry(
    "channel type", "tensorsketch_channel_types", "tensorsketch.channel_types"
)


def create_provider(name: str, /, **kwargs: Any) -> ChatProvider:
    """Build a chat provider by name: ``create_provider("openai", model="gpt-4o")``."""
    return providers.create(name, **kwargs)


def create_backend(name: str, /, **kwargs: Any) -> Backend:
    """Build a durable backend by name: ``create_backend("postgres", dsn=...)``."""
    return backends.create(name, **kwargs)


def create_executor(name: str, /, **options: Any) -> Executor:
    """Build an executor by name, for ``compile(executor=...)``:
    ``create_executor("ray", address="auto", batch_size=100)``."""
    return executors.create(name, **options)


def create_tracer(name: str, /, **kwargs: Any) -> Tracer:
    """Build a tracer by name: ``create_tracer("file", path="run.jsonl")``, ``"otel"``, ..."""
    return tracers.create(name, **kwargs)


def channel_marker(name: str, /, *args: Any, **kwargs: Any) -> ChannelMarker:
    """Build a named channel marker for ``Annotated[T, ...]``: a plugin's channel type used
    without importing its module (``channel_marker("reducer", operator.add)``)."""
    return channel_types.create(name, *args, **kwargs)


def register_tracer(name: str, tracer: Any) -> None:
    """Register a tracer class (or a zero-argument callable returning one) under ``name``."""
    tracers.register(name, tracer)


def register_provider(name: str, provider: Any) -> None:
    """Register a provider class (or a zero-argument callable returning one) under ``name``."""
    providers.register(name, provider)


def register_executor(name: str, executor: Any) -> None:
    """Register an executor class (or a zero-argument callable returning one) under ``name``."""
    executors.register(name, executor)


def register_backend(name: str, backend: Any) -> None:
    """Register a backend class (or a zero-argument callable returning one) under ``name``."""
    backends.register(name, backend)
