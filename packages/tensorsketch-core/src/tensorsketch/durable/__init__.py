"""Durable execution: checkpoints at every barrier, the effect journal, the event log, leases.

One concept a module, bottom up: :mod:`~tensorsketch.durable.checkpoint` (what a read gives
back), :mod:`~tensorsketch.durable.fingerprint` (when decoded values are trusted),
:mod:`~tensorsketch.durable.ladder` (the row format, written and folded),
:mod:`~tensorsketch.durable.reads` (reading a thread back), :mod:`~tensorsketch.durable.lease`
(one writer per thread) and :mod:`~tensorsketch.durable.journal` (one run's durable side).
This layer knows stores and values, never graphs: the engine above it passes plain plans and
a state codec in.
"""

from tensorsketch.durable.checkpoint import Checkpoint, CheckpointInfo
from tensorsketch.durable.fingerprint import schema_fingerprint
from tensorsketch.durable.journal import Opened, Restored, RunJournal, StateCodec, TaskWriteLog
from tensorsketch.durable.ladder import FANOUT, FORMAT_VERSION, PlanEntry, Position
from tensorsketch.durable.lease import LEASE_TTL, Lease
from tensorsketch.durable.reads import (
    NEEDS_LOOP,
    NeedsLoop,
    describe_checkpoints,
    load_chain,
    load_page,
    read_checkpoint,
    read_checkpoint_blocking,
)

__all__ = [
    "FANOUT",
    "FORMAT_VERSION",
    "LEASE_TTL",
    "NEEDS_LOOP",
    "Checkpoint",
    "CheckpointInfo",
    "Lease",
    "NeedsLoop",
    "Opened",
    "PlanEntry",
    "Position",
    "Restored",
    "RunJournal",
    "StateCodec",
    "TaskWriteLog",
    "describe_checkpoints",
    "load_chain",
    "load_page",
    "read_checkpoint",
    "read_checkpoint_blocking",
    "schema_fingerprint",
]
