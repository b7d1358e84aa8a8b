"""``RedisRunStore``: the run store in Redis, beside a :class:`RedisBackend`'s threads.

Keys (``R`` = ``{prefix}:{runs}:``; the ``{runs}`` hash tag keeps them in one Cluster slot)::

    R rec:<id>          hash    the encoded record (``rec``), its ``ver`` (compare-and-set),
                                ``lease`` expiry, and the fields the indexes are built from
    R keys              hash    idempotency key -> run id
    R all, R kind:<k>   zset    run ids by creation time (ties by id): listing order
    R status:<s>        zset    the same, per status
    R thread:<t>        zset    the same, per thread
    R label:<k>=<v>     zset    the same, per label
    R due               zset    suspended runs with a wake-up time, scored by it
    R undelivered       zset    finished runs whose webhook is not delivered yet (their
                                ``waiting`` field is ``webhook``), by creation time
    R counts            hash    runs per status and ``suspended:<reason>``
    R layout            string  key layout version of the run keys

Each write is one Lua script, so the record and every index move together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ormsgpack

from tensorsketch.errors import CheckpointDecodeError, RunConflictError
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import (
    RUN_LAYOUT_VERSION,
    InTurn,
    RunRecord,
    RunStore,
    waiting_column,
)

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.redis import RedisBackend

__all__ = ["RedisRunStore"]

# Shared by the write scripts: add (sign 1) or remove (sign -1) a run from the status, due,
# undelivered and count indexes, given its hash fields. A run is in `due` and `undelivered`
# only where its stored fields put it there (every write stores the fields it indexed by),
# so a removal touches those two only then: two commands less a transition.
_INDEX = """
local function index(b, id, status, kind, created, wake, waiting, sign)
  local due = status == 'suspended' and wake ~= ''
  local undelivered = waiting == 'webhook' and status ~= 'suspended'
  if sign > 0 then
    redis.call('ZADD', b .. 'status:' .. status, created, id)
    if due then redis.call('ZADD', b .. 'due', wake, id) end
    if undelivered then redis.call('ZADD', b .. 'undelivered', created, id) end
  else
    redis.call('ZREM', b .. 'status:' .. status, id)
    if due then redis.call('ZREM', b .. 'due', id) end
    if undelivered then redis.call('ZREM', b .. 'undelivered', id) end
  end
  if kind == 'run' then
    redis.call('HINCRBY', b .. 'counts', status, sign)
    if status == 'suspended' and waiting ~= '' then
      redis.call('HINCRBY', b .. 'counts', 'suspended:' .. waiting, sign)
    end
  end
end
"""

# ARGV: base, id, rec, created, status, kind, thread, wake, waiting, idem key, lease, owner,
# then labels as 'k=v' — sent as one argument: the others in one msgpack array with '' in
# rec's place, then rec's bytes right after it (each argument costs redis-py a dozen calls
# to pack; Redis's cmsgpack reads no binary, so rec is not inside the array). Returns {1}
# when stored, or {0, ver, lease, rec} of the run the key already names (one that has not
# failed).
_INSERT = (
    _INDEX
    + """
local off, args = cmsgpack.unpack_one(ARGV[1])
args[3] = string.sub(ARGV[1], off + 1)
local ARGV = args
local b, id = ARGV[1], ARGV[2]
if ARGV[10] ~= '' then
  local cur = redis.call('HGET', b .. 'keys', ARGV[10])
  if cur then
    local h = redis.call('HMGET', b .. 'rec:' .. cur, 'status', 'ver', 'lease', 'rec')
    if h[1] and h[1] ~= 'failed' then return {0, h[2], h[3] or '', h[4]} end
  end
end
local k = b .. 'rec:' .. id
if redis.call('EXISTS', k) == 1 then return redis.error_reply('TSRUNEXISTS') end
redis.call('HSET', k, 'rec', ARGV[3], 'ver', 1, 'lease', ARGV[11], 'status', ARGV[5],
  'kind', ARGV[6], 'created', ARGV[4], 'wake', ARGV[8], 'waiting', ARGV[9], 'owner', ARGV[12])
redis.call('ZADD', b .. 'all', ARGV[4], id)
redis.call('ZADD', b .. 'kind:' .. ARGV[6], ARGV[4], id)
redis.call('ZADD', b .. 'thread:' .. ARGV[7], ARGV[4], id)
for i = 13, #ARGV do redis.call('ZADD', b .. 'label:' .. ARGV[i], ARGV[4], id) end
if ARGV[10] ~= '' then redis.call('HSET', b .. 'keys', ARGV[10], id) end
index(b, id, ARGV[5], ARGV[6], ARGV[4], ARGV[8], ARGV[9], 1)
return {1}
"""
)

# The head of a thread's queue: the oldest queued or running run (kind 'run') in the
# thread's index `tkey` (by creation time, ties by id), or ''. A run about to join it may be
# named (`self_id`, with the status and kind it is stored with; its hash may not exist yet).
# The thread's first runs are walked as they are (a status read each: a thread's runs are
# mostly few, and the head is mostly among them); past sixteen finished ones, the thread's
# runs in the `queued` and `running` indexes are found in C (ZINTER walks the smallest of
# its sets; it costs about ten status reads, as it builds its answer as a sorted set): a
# thread with thousands of finished runs cost a status read for each at every submit.
_QUEUE_HEAD = """
local function queue_head(b, tkey, self_id, self_status, self_kind)
  local first = redis.call('ZRANGE', tkey, 0, 15)
  for _, other in ipairs(first) do
    local st, kd = self_status, self_kind
    if other ~= self_id then
      local h = redis.call('HMGET', b .. 'rec:' .. other, 'status', 'kind')
      st, kd = h[1], h[2]
    end
    if kd == 'run' and (st == 'queued' or st == 'running') then return other end
  end
  if #first < 16 then return '' end
  local best, rank = '', nil
  if self_id and self_kind == 'run' and (self_status == 'queued' or self_status == 'running') then
    best, rank = self_id, redis.call('ZRANK', tkey, self_id)
  end
  for _, status in ipairs({'queued', 'running'}) do
    local found = redis.call('ZINTER', 3, tkey, b .. 'status:' .. status, b .. 'kind:run',
      'WEIGHTS', 1, 0, 0)
    if found[1] then
      local r = redis.call('ZRANK', tkey, found[1])
      if rank == nil or r < rank then best, rank = found[1], r end
    end
  end
  return best
end
"""

# _INSERT, then (when stored) the head of the thread's queue: {1, id or ''}.
_INSERT_IN_TURN = _QUEUE_HEAD + _INSERT.replace(
    "return {1}\n",
    "return {1, queue_head(b, b .. 'thread:' .. ARGV[7])}\n",
)
assert _INSERT_IN_TURN != _INSERT

# ARGV: base, id, expected ver, rec, status, wake, waiting, owner, lease. Returns the new
# version, or 0 when the stored one differs (or the run is gone).
_REPLACE = (
    _INDEX
    + """
local b, id = ARGV[1], ARGV[2]
local k = b .. 'rec:' .. id
local old = redis.call('HMGET', k, 'ver', 'status', 'kind', 'created', 'wake', 'waiting')
if not old[1] or old[1] ~= ARGV[3] then return 0 end
index(b, id, old[2], old[3], old[4], old[5], old[6], -1)
local wake = ARGV[6]
if ARGV[5] ~= 'suspended' then wake = '' end
index(b, id, ARGV[5], old[3], old[4], wake, ARGV[7], 1)
local ver = tonumber(old[1]) + 1
redis.call('HSET', k, 'rec', ARGV[4], 'ver', ver, 'status', ARGV[5], 'wake', wake,
  'waiting', ARGV[7], 'owner', ARGV[8], 'lease', ARGV[9])
return ver
"""
)

# A ride (tensorsketch.runtime.backends.rides): KEYS: the thread's lease key when the write
# is fenced by it (else none). ARGV: base, id, fence owner ('' for none), write ('1' / '0'),
# then _REPLACE's arguments after base and id. The write is skipped unless the fence owner
# holds the lease. Returns one integer: twice the version after, plus one if the write was
# stored (its version is that one), or -1 when there is no record (an integer is the reply
# redis-py parses cheapest: a string costs it a read and a decode more).
_RIDE = (
    _INDEX
    + """
local b, id = ARGV[1], ARGV[2]
local k = b .. 'rec:' .. id
local wrote = 0
local allowed = ARGV[3] == '' or redis.call('GET', KEYS[1]) == ARGV[3]
if ARGV[4] == '1' and allowed then
  local old = redis.call('HMGET', k, 'ver', 'status', 'kind', 'created', 'wake', 'waiting')
  if old[1] and old[1] == ARGV[5] then
    index(b, id, old[2], old[3], old[4], old[5], old[6], -1)
    local wake = ARGV[7]
    if ARGV[6] ~= 'suspended' then wake = '' end
    index(b, id, ARGV[6], old[3], old[4], wake, ARGV[8], 1)
    wrote = tonumber(old[1]) + 1
    redis.call('HSET', k, 'rec', ARGV[9], 'ver', wrote, 'status',
      ARGV[6], 'wake', wake, 'waiting', ARGV[8], 'owner', ARGV[10], 'lease', ARGV[11])
  end
end
if wrote > 0 then return 2 * wrote + 1 end
local ver = redis.call('HGET', k, 'ver')
if not ver then return -1 end
return 2 * tonumber(ver)
"""
)

# ARGV: base, owner, lease, ids... Extends the lease of the owner's active runs among ids.
_RENEW = """
local b, owner, lease = ARGV[1], ARGV[2], ARGV[3]
local kept = {}
for i = 4, #ARGV do
  local k = b .. 'rec:' .. ARGV[i]
  local h = redis.call('HMGET', k, 'owner', 'status')
  if h[1] == owner and (h[2] == 'queued' or h[2] == 'running') then
    redis.call('HSET', k, 'lease', lease)
    redis.call('HINCRBY', k, 'ver', 1)
    kept[#kept + 1] = ARGV[i]
  end
end
return kept
"""

# ARGV: base, ids... Returns {ver, lease, rec} per id ({} for a missing one).
_GET_MANY = """
local out = {}
for i = 2, #ARGV do
  local h = redis.call('HMGET', ARGV[1] .. 'rec:' .. ARGV[i], 'ver', 'lease', 'rec')
  if h[1] then out[#out + 1] = {h[1], h[2] or '', h[3]} else out[#out + 1] = {} end
end
return out
"""

# ARGV: base, thread, n, then per run: id, idempotency key ('' for none), label count,
# labels as 'k=v'. The caller read the thread's runs just before; the script checks the thread
# index still holds exactly those ids (else returns {-1}: read again), then removes every one
# that is not queued or running, with its index entries. Returns {removed, kept ids...}.
_DROP_THREAD = (
    _INDEX
    + """
local b, thread, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local tkey = b .. 'thread:' .. thread
if redis.call('ZCARD', tkey) ~= n then return {-1} end
local runs, i = {}, 4
for r = 1, n do
  local id, key, nl = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if not redis.call('ZSCORE', tkey, id) then return {-1} end
  local labels = {}
  for l = 1, nl do labels[l] = ARGV[i + 2 + l] end
  runs[r] = {id, key, labels}
  i = i + 3 + nl
end
local out = {0}
for _, run in ipairs(runs) do
  local id, k = run[1], b .. 'rec:' .. run[1]
  local h = redis.call('HMGET', k, 'status', 'kind', 'created', 'wake', 'waiting')
  if h[1] == 'queued' or h[1] == 'running' then
    out[#out + 1] = id
  else
    if h[1] then index(b, id, h[1], h[2], h[3], h[4] or '', h[5] or '', -1) end
    redis.call('ZREM', b .. 'all', id)
    if h[2] then redis.call('ZREM', b .. 'kind:' .. h[2], id) end
    redis.call('ZREM', tkey, id)
    for _, label in ipairs(run[3]) do redis.call('ZREM', b .. 'label:' .. label, id) end
    if run[2] ~= '' and redis.call('HGET', b .. 'keys', run[2]) == id then
      redis.call('HDEL', b .. 'keys', run[2])
    end
    redis.call('DEL', k)
    out[1] = out[1] + 1
  end
end
return out
"""
)

#: One run of a thread (no check that every record of the thread is listed).
_DROP_RUN = _DROP_THREAD.replace("if redis.call('ZCARD', tkey) ~= n then return {-1} end\n", "")
assert _DROP_RUN != _DROP_THREAD

_BATCH = 200


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisRunStore(RunStore):
    """Run records and their indexes under the backend's key prefix."""

    def __init__(self, backend: RedisBackend) -> None:
        super().__init__(backend.serializer)
        self.backend = backend
        self.base = f"{backend.prefix}:{{runs}}:"
        self._ready = False

    async def _script(self, what: str, source: str, args: list[Any]) -> Any:
        async with self.backend._use(what) as client:
            if not self._ready:
                await self._check_layout(client)
            return await self.backend._call(client, source, [], [self.base, *args])

    async def _check_layout(self, client: Any) -> None:
        key = f"{self.base}layout"
        await client.set(key, RUN_LAYOUT_VERSION, nx=True)
        found = int(await client.get(key) or RUN_LAYOUT_VERSION)
        if found != RUN_LAYOUT_VERSION:
            msg = (
                f"the Redis run keys under prefix {self.backend.prefix!r} use layout version "
                f"{found}, which this release does not understand (it writes "
                f"{RUN_LAYOUT_VERSION}); use the matching release or another prefix."
            )
            raise CheckpointDecodeError(msg)
        self._ready = True

    def _decode(self, row: Sequence[Any]) -> RunRecord | None:
        if not row:
            return None
        version, lease, rec = row
        lease_text = _text(lease) if lease is not None else ""
        return RunRecord.decode(
            self.serializer, rec, int(version), float(lease_text) if lease_text else None
        )

    async def _insert(self, record: RunRecord) -> tuple[RunRecord, bool]:
        async with self.backend._use("creating a run") as client:
            if not self._ready:
                await self._check_layout(client)
            reply = await self.backend._call(client, _INSERT, [], self.insert_args(record))
        if int(reply[0]) == 1:
            return record, True
        existing = self._decode(reply[1:])
        assert existing is not None
        return existing, False

    async def _insert_in_turn(self, record: RunRecord) -> InTurn:
        # One script: the insert and the walk of the thread's runs for its queue's head; in
        # the same round trip, where the thread stands (the run's guess of where it begins,
        # checked by the unit that opens the thread).
        async with self.backend._use("creating a run") as client:
            if not self._ready:
                await self._check_layout(client)
            reply, head = await self.backend.script_reading_head(
                client, _INSERT_IN_TURN, self.insert_args(record), record.thread_id
            )
        if int(reply[0]) == 1:
            return InTurn(record, True, _text(reply[1]) or None, head)
        existing = self._decode(reply[1:])
        assert existing is not None
        return InTurn(existing, False, None)

    def insert_args(self, record: RunRecord) -> list[Any]:
        """:data:`_INSERT`'s one argument: the rest packed, then the encoded record."""
        return [ormsgpack.packb(self._insert_text(record)) + record.encode(self.serializer)]

    def _insert_text(self, record: RunRecord) -> list[str]:
        """:data:`_INSERT`'s text arguments, ``''`` in the encoded record's place."""
        r = record
        return [
            self.base,
            r.run_id,
            "",
            repr(r.created_at),
            r.status,
            r.kind,
            r.thread_id,
            repr(r.wake_at) if r.wake_at is not None and r.status == "suspended" else "",
            waiting_column(r) or "",
            r.idempotency_key or "",
            repr(r.lease_expires_at) if r.lease_expires_at is not None else "",
            r.owner or "",
            *(f"{k}={v}" for k, v in r.labels.items()),
        ]

    def fold_arg(self, ride: RecordRide) -> bytes:
        """A folded opening's one argument (``redis._FOLD``): the ride's write's text, the
        length of the insert's encoded record and the insert's text, packed; then the
        insert's encoded record and the write's (one argument and one unpacking on the
        server where the insert and the ride took two)."""
        assert ride.insert is not None
        record = ride.insert.encode(self.serializer)
        w = ride.write
        if w is None:
            head, written = ["0", "", "", "", "", "", ""], b""
        else:
            head = ["1", *_write_fields(w)]
            written = w.encode(self.serializer)
        text = ormsgpack.packb([*head, len(record), *self._insert_text(ride.insert)])
        return text + record + written

    async def _many(self, what: str, ids: Sequence[Any]) -> list[RunRecord]:
        if not ids:
            return []
        rows = await self._script(what, _GET_MANY, [_text(i) for i in ids])
        return [r for r in map(self._decode, rows) if r is not None]

    async def get(self, run_id: str) -> RunRecord | None:
        found = await self._many("reading a run", [run_id])
        return found[0] if found else None

    async def _list(
        self,
        statuses: tuple[str, ...] | None,
        thread_id: str | None,
        labels: dict[str, str],
        kind: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        b = self.base
        if labels:
            key, value = next(iter(labels.items()))
            sources = [f"{b}label:{key}={value}"]
        elif thread_id is not None:
            sources = [f"{b}thread:{thread_id}"]
        elif statuses is not None:
            sources = [f"{b}status:{s}" for s in statuses]
        elif kind is not None:
            sources = [f"{b}kind:{kind}"]
        else:
            sources = [f"{b}all"]
        found: list[RunRecord] = []
        for source in sources:
            found += await self._scan(source, statuses, thread_id, labels, kind, after, limit)
        found.sort(key=lambda r: (r.created_at, r.run_id))
        return found[:limit]

    async def _scan(
        self,
        source: str,
        statuses: tuple[str, ...] | None,
        thread_id: str | None,
        labels: dict[str, str],
        kind: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        """Walk one index from the cursor, keeping records that match every filter."""
        found: list[RunRecord] = []
        low: Any = "-inf" if after is None else repr(after[0])
        skip_to = after
        offset = 0  # past members of one score already read (a run of equal scores)
        while len(found) < limit:
            async with self.backend._use("listing runs") as client:
                raw: list[Any] = await client.zrangebyscore(
                    source, low, "+inf", start=offset, num=_BATCH, withscores=True
                )
            if not raw:
                break
            ids = []
            for pair in raw:
                run_id, score = _text(pair[0]), float(pair[1])
                if skip_to is not None and (score, run_id) <= skip_to:
                    continue
                ids.append(run_id)
            for record in await self._many("listing runs", ids):
                if statuses is not None and record.status not in statuses:
                    continue
                if thread_id is not None and record.thread_id != thread_id:
                    continue
                if kind is not None and record.kind != kind:
                    continue
                if any(record.labels.get(k) != v for k, v in labels.items()):
                    continue
                found.append(record)
            if len(raw) < _BATCH:
                break
            last = float(raw[-1][1])
            offset = offset + len(raw) if repr(last) == low else 0
            skip_to = (last, _text(raw[-1][0]))
            low = repr(last)
        return found[:limit]

    async def _replace(self, record: RunRecord) -> RunRecord | None:
        r = record
        args: list[Any] = [
            r.run_id,
            str(r.version),
            r.encode(self.serializer),
            r.status,
            repr(r.wake_at) if r.wake_at is not None else "",
            waiting_column(r) or "",
            r.owner or "",
            repr(r.lease_expires_at) if r.lease_expires_at is not None else "",
        ]
        version = int(await self._script("updating a run", _REPLACE, args))
        return None if version == 0 else record.replace(version=version)

    def ride_args(self, ride: RecordRide, fence: str | None) -> tuple[list[str], bytes | None]:
        """:data:`_RIDE`'s arguments for ``ride`` (a write fenced by ``fence``'s lease): its
        text ones, in order but for the encoded record (``None`` for a read), which travels
        after them as it is bytes (see :data:`redis._CARRY`)."""
        w = ride.write
        if w is None:
            return [self.base, ride.run_id, "", "0"], None
        text = [self.base, ride.run_id, fence or "", "1", *_write_fields(w)]
        return text, w.encode(self.serializer)

    @staticmethod
    def ride_result(ride: RecordRide, reply: int) -> RideResult:
        """What :data:`_RIDE`'s reply says: the version after, and the write if stored."""
        if reply < 0:
            return RideResult(None)
        version = reply >> 1
        if reply & 1 and ride.write is not None:
            return RideResult(version, ride.write.replace(version=version))
        return RideResult(version)

    @property
    def ready(self) -> bool:
        """Its key layout was checked (a ride's script writes under it)."""
        return self._ready

    async def due(self, before: float, limit: int = 100) -> list[RunRecord]:
        async with self.backend._use("reading due timers") as client:
            ids = await client.zrangebyscore(f"{self.base}due", "-inf", before, start=0, num=limit)
        found = await self._many("reading due timers", ids)
        # The index and the records are two reads: a record moved on in between (a schedule
        # another runner just fired) is no longer due, and firing it again would tick twice.
        due = [r for r in found if r.wake_at is not None and r.wake_at <= before]
        return sorted(due, key=lambda r: r.wake_at or 0.0)

    async def undelivered(self, limit: int = 100) -> list[RunRecord]:
        async with self.backend._use("reading undelivered webhooks") as client:
            ids = await client.zrange(f"{self.base}undelivered", 0, limit - 1)
        found = await self._many("reading undelivered webhooks", ids)
        return [r for r in found if r.webhook_pending]

    async def next_wake(self) -> float | None:
        async with self.backend._use("reading due timers") as client:
            first = await client.zrange(f"{self.base}due", 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    async def renew(self, owner: str, run_ids: Sequence[str], lease_expires_at: float) -> set[str]:
        if not run_ids:
            return set()
        kept: set[str] = set()
        ids = list(run_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            reply = await self._script(
                "renewing run leases", _RENEW, [owner, repr(lease_expires_at), *chunk]
            )
            kept.update(_text(i) for i in reply)
        return kept

    async def _delete(self, record: RunRecord) -> bool:
        labels = [f"{k}={v}" for k, v in record.labels.items()]
        args = [
            record.thread_id,
            "1",
            record.run_id,
            record.idempotency_key or "",
            str(len(labels)),
            *labels,
        ]
        reply = await self._script("deleting a run", _DROP_RUN, args)
        return int(reply[0]) > 0

    async def _delete_thread(self, thread_id: str) -> tuple[int, list[RunRecord]]:
        for _attempt in range(20):
            records: list[RunRecord] = []
            after: tuple[float, str] | None = None
            while True:
                page = await self._list(None, thread_id, {}, None, after, 1000)
                records += page
                if len(page) < 1000:
                    break
                after = (page[-1].created_at, page[-1].run_id)
            args: list[Any] = [thread_id, str(len(records))]
            for r in records:
                labels = [f"{k}={v}" for k, v in r.labels.items()]
                args += [r.run_id, r.idempotency_key or "", str(len(labels)), *labels]
            reply = await self._script("deleting a thread's runs", _DROP_THREAD, args)
            if int(reply[0]) >= 0:
                kept_ids = {_text(i) for i in reply[1:]}
                kept = await self._many("deleting a thread's runs", sorted(kept_ids))
                return int(reply[0]), kept
        msg = f"the runs of thread {thread_id!r} kept changing while deleting them; retry."
        raise RunConflictError(msg)

    async def counts(self) -> dict[str, int]:
        async with self.backend._use("counting runs") as client:
            raw = await client.hgetall(f"{self.base}counts")
        return {_text(k): int(v) for k, v in raw.items() if int(v)}


def _write_fields(w: RunRecord) -> list[str]:
    """A ride's write as the scripts read it: version, status, wake time, what it waits
    for, owner and lease expiry (an empty string for each one unset)."""
    return [
        str(w.version),
        w.status,
        repr(w.wake_at) if w.wake_at is not None else "",
        waiting_column(w) or "",
        w.owner or "",
        repr(w.lease_expires_at) if w.lease_expires_at is not None else "",
    ]
