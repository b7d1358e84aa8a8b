"""The Ray distribution's errors.

::

    RayFleetError(Exception)            anything the worker pool refuses; the message names the fix
    └── RayClusterError(RayFleetError)  the local test cluster could not start or stop
"""

from __future__ import annotations

__all__ = ["RayClusterError", "RayFleetError"]


class RayFleetError(Exception):
    """Something the Ray worker pool cannot do as asked; the message says how to fix it."""


class RayClusterError(RayFleetError):
    """The local Ray cluster of :mod:`tensorsketch.ray.testing` could not be set up."""
