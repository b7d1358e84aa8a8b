"""TensorSketch on Ray: the run table worked by a fleet of detached async Ray actors.

Importing this package does not import Ray (it is large); the names below load their module,
and Ray, when first used. ``tensorsketch.ray.testing`` starts a local cluster inside a private
network namespace for tests and benchmarks. See docs/scale-out.md.
"""

from __future__ import annotations

from tensorsketch.ray.exceptions import RayClusterError, RayFleetError

__all__ = ["RayClusterError", "RayFleetError"]
