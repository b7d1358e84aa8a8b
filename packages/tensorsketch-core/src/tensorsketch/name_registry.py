"""A lazy ``name -> factory`` map: what ``create_provider("openai")`` and its siblings look in.

Names come from three places, highest precedence first: explicit ``register_*`` calls, plugins
(a ``tensorsketch_*`` hook) and a plain entry-point group. A target stays a
``"module:Attribute"`` string (or an unloaded entry point) until the name is first built, so
listing names imports nothing optional. Each registry lives beside the type it builds (the
executors' in :mod:`tensorsketch.pregel.seam`, the backends' in
:mod:`tensorsketch.runtime.backends.base`); :mod:`tensorsketch.registry` gathers them.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tensorsketch.errors import PluginError, RegistryError

__all__ = ["Registry", "resolve_target"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Entry:
    """A name's target: a ``"module:Attribute"`` string or an object; ``load`` is set for an
    installed entry point (``target`` then holds its ``module:Attribute`` text)."""

    target: Any
    origin: str
    load: Callable[[], Any] | None = None


class Registry(Generic[T]):
    """A lazy ``name -> factory`` map fed by registrations, plugins and entry points."""

    def __init__(self, kind: str, hook: str, group: str) -> None:
        self.kind = kind
        self._hook = hook
        self._group = group
        self._explicit: dict[str, _Entry] = {}
        self._installed: dict[str, _Entry] | None = None
        self._lock = threading.Lock()

    def _discover(self) -> dict[str, _Entry]:
        if self._installed is None:
            with self._lock:
                if self._installed is None:
                    # The plugin manager and the entry points load at the first lookup by
                    # name, never on import: `import tensorsketch` stays free of both.
                    from importlib import metadata  # noqa: PLC0415 - first lookup only

                    from tensorsketch.plugins import collect  # noqa: PLC0415 - first lookup only

                    found: dict[str, _Entry] = {}
                    for ep in metadata.entry_points(group=self._group):
                        origin = f"entry point {ep.value}"
                        found.setdefault(ep.name, _Entry(ep.value, origin, ep.load))
                    for name, item in collect(self._hook).items():
                        found[name] = _Entry(item.target, f"plugin {item.plugin!r}")
                    self._installed = found
        return self._installed

    def refresh(self) -> None:
        """Forget discovered names (after installing or removing a distribution)."""
        with self._lock:
            self._installed = None

    def register(self, name: str, target: Any) -> None:
        """Add or override a name with a class, a zero-argument callable, or a target string."""
        if not isinstance(name, str) or not name:
            msg = f"register_{self.kind}(name, ...) needs a non-empty name, got {name!r}."
            raise TypeError(msg)
        if not (callable(target) or isinstance(target, str)):
            msg = (
                f"register_{self.kind}({name!r}, obj): obj must be a class, a zero-argument "
                f"callable returning one, or a 'module:Attribute' string; got {target!r}."
            )
            raise TypeError(msg)
        self._explicit[name] = _Entry(target, "register()")

    def unregister(self, name: str) -> None:
        """Remove an explicit registration (installed names come back)."""
        self._explicit.pop(name, None)

    def names(self) -> list[str]:
        """Every known name, sorted. Imports no provider SDK or driver."""
        return sorted({*self._discover(), *self._explicit})

    def origin(self, name: str) -> str:
        """Where a name comes from (for ``tensorsketch plugins``)."""
        return self._lookup(name).origin

    def _lookup(self, name: str) -> _Entry:
        entry = self._explicit.get(name) or self._discover().get(name)
        if entry is None:
            known = self.names()
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            msg = (
                f"unknown {self.kind} {name!r}.{hint} Known {self.kind}s: "
                f"{', '.join(known) or 'none'}. Install the distribution that provides it, or "
                f"add it with register_{self.kind}({name!r}, YourClass)."
            )
            raise RegistryError(msg)
        return entry

    def target_path(self, name: str) -> str | None:
        """The ``module:Attribute`` a name points at, when known without importing it."""
        target = self._lookup(name).target
        return target if isinstance(target, str) else None

    def resolve(self, name: str) -> Callable[..., T]:
        """Import and return the class (or factory) behind a name."""
        entry = self._lookup(name)
        if entry.load is not None:
            obj = entry.load()
        else:
            obj = resolve_target(entry.target, what=f"{self.kind} {name!r}")
        if not isinstance(obj, type) and callable(obj) and _takes_no_arguments(obj):
            obj = obj()  # a thunk that defers a heavy import
        if not callable(obj):
            msg = (
                f"{self.kind} {name!r} ({entry.origin}) resolved to {obj!r}, which is not callable."
            )
            raise RegistryError(msg)
        factory: Callable[..., T] = obj
        return factory

    def create(self, name: str, /, *args: Any, **kwargs: Any) -> T:
        """Build the named thing; arguments go straight to its constructor."""
        return self.resolve(name)(*args, **kwargs)


def _takes_no_arguments(fn: Any) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    # A thunk: every parameter optional and none variadic (a class takes constructor args).
    return all(
        p.default is not inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def resolve_target(target: Any, *, what: str) -> Any:
    """Import a ``"module:attribute"`` target; return any other object unchanged."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    if not attr:
        msg = f"{what}: target {target!r} must look like 'package.module:Attribute'."
        raise PluginError(msg)
    module = importlib.import_module(module_name)
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        msg = f"{what}: module {module_name!r} has no attribute {attr!r} (target {target!r})."
        raise PluginError(msg) from None
    return obj
