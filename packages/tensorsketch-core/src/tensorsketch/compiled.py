"""Where :class:`CompiledGraph` was imported from before the engine became a package; it lives
in :mod:`tensorsketch.pregel.compiled` (and is ``tensorsketch.CompiledGraph``)."""

from tensorsketch.pregel.compiled import CompiledGraph

__all__ = ["CompiledGraph"]
