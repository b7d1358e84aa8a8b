"""Finding and loading plugins: one pluggy manager for the ``tensorsketch`` entry-point group.

The manager loads lazily (the first time a registry, the CLI or ``tensorsketch plugins`` needs
it), so ``import tensorsketch`` scans no entry points. A plugin that fails to import is skipped
and the reason is kept in :func:`failed_plugins` and logged; it never breaks the others. Set
``TENSORSKETCH_DISABLE_PLUGINS=name1,name2`` (or ``*``) to block plugins by entry-point name.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from tensorsketch import hookspecs
from tensorsketch.errors import PluginError

__all__ = [
    "Contribution",
    "PluginInfo",
    "collect",
    "failed_plugins",
    "get_plugin_manager",
    "plugin_infos",
    "reset_plugin_manager",
]

ENTRY_POINT_GROUP = "tensorsketch"
DISABLE_ENV = "TENSORSKETCH_DISABLE_PLUGINS"

_log = logging.getLogger("tensorsketch.plugins")
_lock = threading.Lock()
_manager: pluggy.PluginManager | None = None
_failed: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One loaded plugin: its entry-point name, distribution and implemented hooks."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Contribution:
    """A named thing a plugin contributed through a hook, not yet resolved."""

    name: str
    target: Any
    plugin: str


def _blocked() -> set[str]:
    raw = os.environ.get(DISABLE_ENV, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def _load(pm: pluggy.PluginManager) -> None:
    blocked = _blocked()
    if "*" in blocked:
        return
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in blocked or pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:  # a broken plugin is skipped, never fatal
            dist = ep.dist.name if ep.dist is not None else "?"
            reason = f"{type(exc).__name__}: {exc}"
            _failed[ep.name] = reason
            _log.warning(
                "skipping TensorSketch plugin %r (distribution %r, %s): %s",
                ep.name,
                dist,
                ep.value,
                reason,
            )
            continue
        if ep.dist is not None:
            pm._tensorsketch_dists[ep.name] = (ep.dist.name, ep.dist.version)  # type: ignore[attr-defined]


def get_plugin_manager() -> pluggy.PluginManager:
    """Return the process-wide plugin manager, loading entry points on first use."""
    global _manager
    if _manager is not None:
        return _manager
    with _lock:
        if _manager is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
            pm.add_hookspecs(hookspecs)
            pm._tensorsketch_dists = {}  # type: ignore[attr-defined]
            _load(pm)
            pm.check_pending()
            _manager = pm
    return _manager


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (tests; after installing a distribution at run time)."""
    global _manager
    with _lock:
        _manager = None
        _failed.clear()
        importlib.invalidate_caches()


def failed_plugins() -> Mapping[str, str]:
    """Entry-point names of plugins that failed to load, with the reason."""
    get_plugin_manager()
    return dict(_failed)


def plugin_infos() -> list[PluginInfo]:
    """Every loaded plugin with its distribution, version and hook implementations."""
    pm = get_plugin_manager()
    dists: dict[str, tuple[str, str]] = pm._tensorsketch_dists  # type: ignore[attr-defined]
    infos = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = tuple(sorted(impl.name for impl in pm.get_hookcallers(plugin) or ()))
        dist, version = dists.get(name, (None, None))
        infos.append(PluginInfo(name=name, distribution=dist, version=version, hooks=hooks))
    return sorted(infos, key=lambda info: info.name)


def collect(hook_name: str) -> dict[str, Contribution]:
    """Call a naming hook on every plugin and merge the results.

    A name contributed twice keeps the first plugin's target; the clash is logged naming both.
    A plugin that returns something other than a mapping raises :class:`PluginError` naming the
    plugin, the hook and what was expected.
    """
    pm = get_plugin_manager()
    hook = getattr(pm.hook, hook_name)
    merged: dict[str, Contribution] = {}
    for impl in hook.get_hookimpls():  # registration order
        result = impl.function()
        if result is None:
            continue
        if not isinstance(result, Mapping):
            msg = (
                f"plugin {impl.plugin_name!r} returned {type(result).__name__} from "
                f"`{hook_name}`; it must return a mapping of name -> target "
                f"('module:Attribute' string or object)."
            )
            raise PluginError(msg)
        for name, target in result.items():
            if name in merged:
                _log.warning(
                    "%s: name %r is contributed by both %r and %r; keeping %r",
                    hook_name,
                    name,
                    merged[name].plugin,
                    impl.plugin_name,
                    merged[name].plugin,
                )
                continue
            merged[name] = Contribution(name=name, target=target, plugin=impl.plugin_name)
    return merged
