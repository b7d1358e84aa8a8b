"""Durability modes: when a durable run commits its checkpoints (``invoke(durability=...)``).

A checkpoint is where a resume starts; the effect journal is what keeps side effects
exactly-once. The modes trade how far behind the first may fall for fewer waits on the store,
and never touch the second: an effect's intent and result are durable before the effect's
result is used, in every mode.

- ``"sync"`` (the default): each barrier's checkpoint is committed before the next superstep
  starts. A crash loses nothing past the last barrier.
- ``"async"``: each barrier's checkpoint is committed while the next superstep runs, never
  more than one behind (the next barrier waits for it). A crash loses at most that
  superstep's checkpoint; resuming re-runs it, replaying its journaled effects.
- ``"exit"``: a checkpoint is committed only when the run stops — it ends, suspends, fails
  or exceeds ``max_steps``. A crash resumes from the last committed point (the input), and
  every journaled effect replays instead of running again.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

__all__ = ["DURABILITY_MODES", "Durability", "check_durability"]

#: When a durable run commits its checkpoints (see the module docstring).
Durability: TypeAlias = Literal["sync", "async", "exit"]

#: The modes ``durability=`` accepts, the default first.
DURABILITY_MODES: tuple[Durability, ...] = get_args(Durability)


def check_durability(value: object, what: str = "durability=") -> Durability:
    """``value`` as a :data:`Durability`, or a ``ValueError`` naming the modes."""
    for mode in DURABILITY_MODES:
        if value == mode:
            return mode
    modes = ", ".join(repr(mode) for mode in DURABILITY_MODES)
    msg = (
        f"{what} must be one of {modes}, got {value!r}: 'sync' commits each superstep's "
        "checkpoint before the next starts, 'async' while the next runs, 'exit' only when "
        "the run stops."
    )
    raise ValueError(msg)
