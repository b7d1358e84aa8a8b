"""``RedisBackend``: durable runs in Redis, over redis-py's asyncio client.

Keys of one thread (``prefix`` defaults to ``tensorsketch``)::

    {prefix}:{<thread>}:cp      list    checkpoint records, oldest first (a header naming the
                                        record's id, parent, step, time and base, then payload)
    {prefix}:{<thread>}:cpi     hash    checkpoint id -> index in the list
    {prefix}:{<thread>}:fx      hash    effect key -> recorded result (HSETNX: first write wins)
    {prefix}:{<thread>}:ev      zset    events scored by seq
    {prefix}:{<thread>}:lease   string  the runner that owns the thread, with a PX expiry
    {prefix}:{<thread>}:bl      hash    sha256 -> a large file stored by reference (HSETNX)
    {prefix}:schema_version     string  key layout version, for later migrations

The thread id sits in a hash tag (``{...}``), so all keys of a thread live in one Redis Cluster
slot and the multi-key scripts below stay valid there. A run opens its thread with one script
call (lease, input checkpoint, the reads a resume needs: the latest checkpoint's chain of bases,
followed inside the script) and commits each superstep with one
(events, checkpoint, and the lease with the last); a folded submit's opening stores its run's
record in the same script (:data:`_FOLD`). Every write is idempotent (a save that
redis-py retries after a dropped reply does not append twice). Durability is whatever
the server is configured for: use AOF (``appendonly yes``) if checkpoints must survive a
Redis restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator, Collection
from typing import Any

import ormsgpack

try:
    import redis.asyncio as aioredis
    from redis import exceptions as redis_errors
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = (
        "RedisBackend needs redis-py (>= 5); install it with "
        '`pip install "tensorsketch-backends[redis]"`.'
    )
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.errors import BackendUnavailableError, CheckpointDecodeError
from tensorsketch.runtime.backends.base import (
    Backend,
    ForkLink,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    ThreadSummary,
    lease_lost,
)
from tensorsketch.runtime.backends.redis_pool import QuickPool
from tensorsketch.runtime.backends.redis_runs import _INDEX, _QUEUE_HEAD, _RIDE, RedisRunStore
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.serializers import Serializer

__all__ = ["RedisBackend"]

#: Version of the key layout written by this release.
KEY_LAYOUT_VERSION = 1

# KEYS: cp, cpi. ARGV: checkpoint id, record. Appends unless the id is already stored.
_SAVE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
local n = redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], n - 1)
return n
"""

# KEYS: cp, cpi. ARGV: checkpoint id.
_GET = """
local i = redis.call('HGET', KEYS[2], ARGV[1])
if not i then return false end
return redis.call('LINDEX', KEYS[1], i)
"""

# KEYS: cp, cpi. ARGV: checkpoint id, or '' for the newest; page size. The records saved just
# before it, oldest first (the newest `limit` of them): one page of the history.
_PAGE = """
local stop
if ARGV[1] == '' then
  stop = redis.call('LLEN', KEYS[1]) - 1
else
  local i = redis.call('HGET', KEYS[2], ARGV[1])
  if not i then return {} end
  stop = tonumber(i) - 1
end
if stop < 0 then return {} end
local start = math.max(0, stop - tonumber(ARGV[2]) + 1)
return redis.call('LRANGE', KEYS[1], start, stop)
"""

# Appends to `out` the chain of bases of the record at list index `idx`, newest first: each
# record's header names its base (layout-1 records, with four header fields: their parent).
_CHAIN_FN = """
local function chain(cp, cpi, idx, out)
  while idx do
    local rec = redis.call('LINDEX', cp, idx)
    if not rec then return out end
    out[#out + 1] = rec
    local b1, b2, b3, b4 = string.byte(rec, 1, 4)
    local size = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    local ok, header = pcall(cjson.decode, string.sub(rec, 5, 4 + size))
    -- A corrupt header ends the chain here; decoding the record says what is wrong.
    if not ok or type(header) ~= 'table' then return out end
    local base = header[5]
    if base == nil then base = header[2] end
    local nxt = nil
    if type(base) == 'string' then
      nxt = redis.call('HGET', cpi, base)
      if nxt then
        nxt = tonumber(nxt)
        if nxt >= idx then nxt = nil end
      end
    end
    idx = nxt
  end
  return out
end
"""

# KEYS: cp, cpi. ARGV: checkpoint id, or '' for the latest. Its chain, newest first.
_READ_CHAIN = (
    _CHAIN_FN
    + """
local idx
if ARGV[1] == '' then
  idx = redis.call('LLEN', KEYS[1]) - 1
  if idx < 0 then return {} end
else
  idx = redis.call('HGET', KEYS[2], ARGV[1])
  if not idx then return {} end
  idx = tonumber(idx)
end
return chain(KEYS[1], KEYS[2], idx, {})
"""
)

# KEYS: lease. ARGV: owner, ttl in ms. Compare-and-set: take it if free, extend it if ours.
_LEASE = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease. ARGV: owner. Deletes the lease only if it is still ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: lease, cp, cpi, ev, bl. ARGV: owner, ttl in ms, '1' if an initial checkpoint follows,
# its id, its record, then hash/data pairs of its blobs. The lease exactly as in _LEASE
# (refused: nothing read or written); then the initial checkpoint as in _SAVE, with its blobs,
# if the thread has none. Returns {acquired, created, last seq or '', the latest checkpoint's
# chain of records, newest first}: fixed positions first, as a Lua table ends at its first nil.
_OPEN = (
    _CHAIN_FN
    + """
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return {0, 0, ''}
end
local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
local seq = last[2] or ''
if ARGV[3] == '1' and redis.call('LLEN', KEYS[2]) == 0
    and redis.call('HEXISTS', KEYS[3], ARGV[4]) == 0 then
  redis.call('RPUSH', KEYS[2], ARGV[5])
  redis.call('HSET', KEYS[3], ARGV[4], 0)
  for i = 6, #ARGV, 2 do redis.call('HSETNX', KEYS[5], ARGV[i], ARGV[i + 1]) end
  return {1, 1, seq}
end
local n = redis.call('LLEN', KEYS[2])
if n == 0 then return {1, 0, seq} end
return chain(KEYS[2], KEYS[3], n - 1, {1, 0, seq})
"""
)

# KEYS: ev, cp, cpi, lease, bl. ARGV: '1' if a checkpoint follows, its id, its record, '1' if
# a lease is released ('2': the script is fenced by the same owner, whose lease it has just
# read, so it is deleted without a second read), its owner, twice the number of blobs that
# follow (plus one if the events' argument is one member as it is), their hash/data pairs,
# then the events' members
# in one argument, each after its length (4 bytes, big-endian): one argument where a score
# and a member each cost redis-py a dozen calls to pack. A commit's events are mostly one
# member (one row of the run's events): it comes unframed, as every byte of a string the
# script makes (a member cut out of the argument) costs the server a dozen instructions to
# hash. The events as in append_events (a member begins with its seq, the score), the blobs
# first write wins, the checkpoint as in _SAVE (once per id), the lease as in _RELEASE.
_COMMIT = """
local nb = tonumber(ARGV[6])
local events = 7 + 2 * math.floor(nb / 2)
for i = 7, events - 1, 2 do redis.call('HSETNX', KEYS[5], ARGV[i], ARGV[i + 1]) end
local packed, pos, batch = ARGV[events] or '', 1, {}
if nb % 2 == 1 then
  local seq = 0
  for j = 1, 8 do seq = seq * 256 + string.byte(packed, j) end
  redis.call('ZADD', KEYS[1], seq, packed)
  packed = ''
end
while pos + 3 <= #packed do
  local b1, b2, b3, b4 = string.byte(packed, pos, pos + 3)
  local size = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  local member = string.sub(packed, pos + 4, pos + 3 + size)
  local seq = 0
  for j = 1, 8 do seq = seq * 256 + string.byte(member, j) end
  batch[#batch + 1] = seq
  batch[#batch + 1] = member
  if #batch >= 1000 then
    redis.call('ZADD', KEYS[1], unpack(batch))
    batch = {}
  end
  pos = pos + 4 + size
end
if #batch > 0 then redis.call('ZADD', KEYS[1], unpack(batch)) end
if ARGV[1] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[2]) == 0 then
  local n = redis.call('RPUSH', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[3], ARGV[2], n - 1)
end
if ARGV[4] == '2' or (ARGV[4] == '1' and redis.call('GET', KEYS[4]) == ARGV[5]) then
  redis.call('DEL', KEYS[4])
end
return 1
"""

# KEYS: lease. ARGV: owner, ttl in ms. Extends the lease only while it is still ours: a
# lapsed or taken-over lease is never won back by a renewal.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# Put in front of a write script: KEYS[1] is the lease and ARGV[1] the writer's owner id, both
# taken off before the script proper runs, which then does nothing unless the lease is ours.
_FENCE = """
local lease = table.remove(KEYS, 1)
local fence = table.remove(ARGV, 1)
if redis.call('GET', lease) ~= fence then return redis.error_reply('TSLEASELOST') end
"""

# KEYS: bl. ARGV: the hashes to keep; the thread's other blobs are removed (pruning).
_KEEP_BLOBS = """
local keep = {}
for i = 1, #ARGV do keep[ARGV[i]] = true end
for _, h in ipairs(redis.call('HKEYS', KEYS[1])) do
  if not keep[h] then redis.call('HDEL', KEYS[1], h) end
end
return 1
"""

# KEYS: fx. ARGV: key/value pairs, each stored unless the key is (first write wins).
_RECORD = """
for i = 1, #ARGV, 2 do redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""

# A unit's script and a ride's (redis_runs._RIDE) as one: each body becomes a function of
# its own KEYS and ARGV. KEYS: the unit's (the ride's one key, the thread's lease, is among
# them). ARGV: the unit's arguments, then the ride's in one: a msgpack array of text —
# whether the ride goes first ('1': a write, fenced like the unit, so a refused unit writes
# no record either), whether the unit's reply is wanted ('1'), the lease key's place among
# the keys (0: the ride has no key), and the ride's text arguments — followed by the
# encoded record if the ride writes one (every argument redis-py packs costs it a dozen
# calls; Redis's cmsgpack reads no binary, so the record is not inside the array). Returns
# the ride's reply (an integer) alone, or, with the unit's reply wanted, that reply's
# elements after it (a reply that is no table is one element): each nested array and bulk
# string costs redis-py's parser a dozen calls more. A unit's error reply is returned as
# it is. The unit gets the script's own KEYS and ARGV (the ride's argument taken off the
# end), not copies. A write riding first under the unit's own fence has one _FENCE in front
# of both (the lease read once), its arguments naming no lease (see _carrying).
_CARRY = """
local blob = table.remove(ARGV)
local off, p = cmsgpack.unpack_one(blob)
local first = p[1] == '1'
local ra = {p[4], p[5], p[6], p[7]}
if p[7] == '1' then
  ra = {p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], string.sub(blob, off + 1), p[12],
    p[13]}
end
local rk = {}
if p[3] > 0 then rk[1] = KEYS[p[3]] end
local rode
if first then rode = ride(rk, ra) end
local reply = unit(KEYS, ARGV)
if type(reply) == 'table' and reply.err then return reply end
if not first then rode = ride(rk, ra) end
if p[2] ~= '1' then return rode end
if reply == nil then reply = false end
if type(reply) ~= 'table' then reply = {reply} end
table.insert(reply, 1, rode)
return reply
"""
_CARRIED: dict[str, str] = {}
_CARRIED_FENCED: dict[str, str] = {}


def _carrying(source: str, *, fenced: bool = False) -> str:
    """The script running ``source`` and a ride together (see :data:`_CARRY`); ``fenced``:
    both behind one :data:`_FENCE` (a write ride first, guarded by the unit's own lease and
    owner: the ride's arguments name no lease, so the lease is read once, not twice)."""
    cache = _CARRIED_FENCED if fenced else _CARRIED
    combined = cache.get(source)
    if combined is None:
        combined = cache[source] = (
            f"local function unit(KEYS, ARGV)\n{source}\nend\n"
            f"local function ride(KEYS, ARGV)\n{_RIDE}\nend\n"
            f"{_FENCE if fenced else ''}{_CARRY}"
        )
    return combined


# A unit's script and a ride that only reads (most rides: a journal write's, a commit's
# without a write), as one: _CARRY without the msgpack array, the read after the unit. ARGV:
# the unit's, then one argument: '1' if the unit's reply is wanted (else '0'), then the run's
# record key. Returns what _CARRY returns (_RIDE's reply to a read: twice the version, or -1
# when there is no record).
_CARRY_READ = """
local last = table.remove(ARGV)
local reply = unit(KEYS, ARGV)
if type(reply) == 'table' and reply.err then return reply end
local ver = redis.call('HGET', string.sub(last, 2), 'ver')
local rode = -1
if ver then rode = 2 * tonumber(ver) end
if string.byte(last, 1) ~= 49 then return rode end
if reply == nil then reply = false end
if type(reply) ~= 'table' then reply = {reply} end
table.insert(reply, 1, rode)
return reply
"""
_CARRIED_READ: dict[str, str] = {}


def _carrying_read(source: str) -> str:
    """The script running ``source`` and a ride's read after it (see :data:`_CARRY_READ`)."""
    combined = _CARRIED_READ.get(source)
    if combined is None:
        combined = _CARRIED_READ[source] = (
            f"local function unit(KEYS, ARGV)\n{source}\nend\n{_CARRY_READ}"
        )
    return combined


_FENCED: dict[str, str] = {}


def _fenced(source: str) -> str:
    """``source`` behind :data:`_FENCE`, built once (a string built per call is hashed again
    by every dictionary look-up of it)."""
    fenced = _FENCED.get(source)
    if fenced is None:
        fenced = _FENCED[source] = _FENCE + source
    return fenced


# A folded submit's opening (RecordRide.insert; see RedisBackend.folds_submits): the run's
# insert (the record and its indexes exactly as RedisRunStore.create stores them), the
# lease and the rest of _OPEN only if that run heads its thread's queue (the oldest queued or
# running run of the thread, redis_runs._QUEUE_HEAD; refused: {0, 0, ''}),
# and the ride's write only where _OPEN took the lease. That write is stored as the insert
# (the record as the ride wrote it, version 2, indexed by its status): _RIDE's result over
# the insert, without indexing the run `queued` first and moving it. One script, so nothing
# sees the record without the rest, nor a crash splits them. KEYS: _OPEN's. ARGV: _OPEN's,
# then one argument: a msgpack array of text — whether the ride writes ('1'), the version it
# expects, its status, wake, waiting, owner and lease, the length of the insert's encoded
# record, then _INSERT's text arguments — followed by the insert's encoded record, then the
# ride's. Returns _OPEN's reply with _RIDE's (an integer) in front; an insert refused (the
# run id is taken: TSRUNEXISTS) is the error reply, nothing written.
_FOLD = (
    _INDEX
    + _QUEUE_HEAD
    + """
local blob = table.remove(ARGV)
local off, p = cmsgpack.unpack_one(blob)
local cut = off + p[8]
local b, id, created, status, kind = p[9], p[10], p[12], p[13], p[14]
local wake, waiting, key, lease, owner = p[16], p[17], p[18], p[19], p[20]
local k = b .. 'rec:' .. id
if key ~= '' then
  local cur = redis.call('HGET', b .. 'keys', key)
  local st = cur and redis.call('HGET', b .. 'rec:' .. cur, 'status')
  if st and st ~= 'failed' then
    local ver = redis.call('HGET', k, 'ver')
    if ver then return {2 * tonumber(ver), 0, 0, ''} end
    return {-1, 0, 0, ''}
  end
end
if redis.call('EXISTS', k) == 1 then return redis.error_reply('TSRUNEXISTS') end
local tkey = b .. 'thread:' .. p[15]
redis.call('ZADD', tkey, created, id)
local reply = {0, 0, ''}
if queue_head(b, tkey, id, status, kind) == id then reply = unit(KEYS, ARGV) end
local ver, rec = '1', nil
if reply[1] == 1 and p[1] == '1' and p[2] == '1' then
  ver, rec, status, waiting, owner, lease = '2', string.sub(blob, cut + 1), p[3], p[5], p[6], p[7]
  wake = ''
  if status == 'suspended' then wake = p[4] end
else
  rec = string.sub(blob, off + 1, cut)
end
redis.call('HSET', k, 'rec', rec, 'ver', ver, 'lease', lease, 'status', status, 'kind', kind,
  'created', created, 'wake', wake, 'waiting', waiting, 'owner', owner)
redis.call('ZADD', b .. 'all', created, id)
redis.call('ZADD', b .. 'kind:' .. kind, created, id)
for i = 21, #p do redis.call('ZADD', b .. 'label:' .. p[i], created, id) end
if key ~= '' then redis.call('HSET', b .. 'keys', key, id) end
index(b, id, status, kind, created, wake, waiting, 1)
table.insert(reply, 1, ver == '2' and 5 or 2)
return reply
"""
)
_FOLDING = f"local function unit(KEYS, ARGV)\n{_OPEN}\nend\n{_FOLD}"

# A script and a read of a thread's head as one: the script's body becomes a function of its
# ARGV. KEYS: the thread's cp, ev. Returns {the script's reply, the newest checkpoint's id or
# '', the highest event seq or ''}, then the newest record itself if its header did not give
# a text id (the caller decodes it, and names a corrupt one); a script's error reply is
# returned as it is. A reply {number, text} (a stored run and its queue's head) with a head
# read from the header comes as one string instead, '<seq> <number> <#text> <text><id>':
# redis-py parses the nested table's six elements at a dozen calls each.
_HEAD = """
local reply = script(ARGV)
if type(reply) == 'table' and reply.err then return reply end
if reply == nil then reply = false end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local out = {reply, '', last[2] or ''}
local rec = redis.call('LINDEX', KEYS[1], -1)
if rec then
  local ok, header = false, nil
  if #rec >= 4 then
    local b1, b2, b3, b4 = string.byte(rec, 1, 4)
    local size = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    ok, header = pcall(cjson.decode, string.sub(rec, 5, 4 + size))
  end
  if ok and type(header) == 'table' and type(header[1]) == 'string' and header[1] ~= '' then
    out[2] = header[1]
  else
    out[4] = rec
  end
end
if out[4] == nil and type(reply) == 'table' and #reply == 2 and type(reply[1]) == 'number'
    and type(reply[2]) == 'string' then
  return out[3] .. ' ' .. reply[1] .. ' ' .. #reply[2] .. ' ' .. reply[2] .. out[2]
end
return out
"""
_READING_HEAD: dict[str, str] = {}


def _reading_head(source: str) -> str:
    """The script running ``source`` and reading the thread's head (see :data:`_HEAD`)."""
    combined = _READING_HEAD.get(source)
    if combined is None:
        combined = _READING_HEAD[source] = f"local function script(ARGV)\n{source}\nend\n{_HEAD}"
    return combined


_SEQ_BYTES = 8


def _no_script(exc: BaseException) -> bool:
    """The server does not know the script called by SHA (redis-py raises ``NoScriptError``,
    whose text no longer says ``NOSCRIPT``)."""
    return isinstance(exc, redis_errors.NoScriptError) or "NOSCRIPT" in str(exc)


def _lease_lost(exc: BaseException) -> bool:
    return isinstance(exc, redis_errors.ResponseError) and "TSLEASELOST" in str(exc)


class RedisBackend(Backend):
    """Checkpoints, journal, events and leases in Redis.

    :param dsn: a ``redis://`` / ``rediss://`` / ``unix://`` URL; the backend owns its client.
    :param client: a ``redis.asyncio.Redis`` to share instead (``decode_responses`` must be
        off: payloads are bytes).
    :param prefix: namespace of every key, so several apps (or test runs) share one database.
    :param lease_ttl: seconds a runner's lease lasts without renewal.
    :param connect_timeout: seconds to wait for a connection to the server.
    :param command_timeout: seconds to wait for a command's reply before the call fails with
        ``BackendUnavailableError`` (every command touches one thread's keys, so the default
        is far above a healthy server's latency; raise it for very large checkpoints over a
        slow link). A refused or dropped connection is retried once, a timeout is not.
    :param max_connections: connections the backend's client opens at most; a call beyond
        them waits for a free one (up to ``command_timeout``) rather than failing — a busy
        runner has more calls in flight than that.
        These apply to the client the backend creates; a ``client=`` keeps its own settings.

    A client belongs to the event loop it was first used on; a call from another live loop
    (the sync ``get_state`` helper) uses a short-lived client built from the same settings.
    """

    name = "redis"
    fences_writes = True
    stores_blobs = True

    def __init__(
        self,
        dsn: str | None = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "tensorsketch",
        serializer: Serializer | str | None = None,
        lease_ttl: float = 30.0,
        connect_timeout: float = 5.0,
        command_timeout: float = 10.0,
        max_connections: int = 100,
    ) -> None:
        super().__init__(serializer=serializer)
        if type(max_connections) is not int or max_connections < 1:
            msg = f"`max_connections` must be an int >= 1, got {max_connections!r}."
            raise ValueError(msg)
        self.max_connections = max_connections
        for label, value in (
            ("connect_timeout", connect_timeout),
            ("command_timeout", command_timeout),
        ):
            if not value > 0:
                msg = f"`{label}` must be a positive number of seconds, got {value!r}."
                raise ValueError(msg)
        self.connect_timeout = float(connect_timeout)
        self.command_timeout = float(command_timeout)
        if client is not None and not isinstance(client, aioredis.Redis):
            msg = (
                f"`client=` must be a redis.asyncio.Redis, got {type(client).__name__}; create "
                "one with `redis.asyncio.Redis.from_url(url)`."
            )
            raise TypeError(msg)
        if client is not None and client.connection_pool.connection_kwargs.get("decode_responses"):
            msg = (
                "the Redis client given to RedisBackend has `decode_responses=True`; payloads "
                "are bytes, so pass a client created without it."
            )
            raise ValueError(msg)
        if client is None and not dsn:
            msg = "RedisBackend needs a `dsn` URL or a `client=`, e.g. RedisBackend('redis://...')."
            raise ValueError(msg)
        if not prefix or "{" in prefix or "}" in prefix:
            msg = f"`prefix` must be non-empty and free of braces, got {prefix!r}."
            raise ValueError(msg)
        if not lease_ttl > 0:
            msg = f"`lease_ttl` must be a positive number of seconds, got {lease_ttl!r}."
            raise ValueError(msg)
        self.dsn = dsn if client is None else None
        self.prefix = prefix
        self.lease_ttl = float(lease_ttl)
        self._given = client
        self._client: aioredis.Redis | None = client
        self._home: asyncio.AbstractEventLoop | None = None
        self._ready = False
        # Scripts are bound to a client only for registration; each call passes the client.
        self._scripts: dict[str, Any] = {}
        #: Scripts loaded on the server (a unit that carries a ride calls its script by SHA;
        #: one the server lost is loaded again and the call retried: nothing of it ran).
        self._loaded: set[str] = set()
        #: The SHA of the script carrying a ride with each unit's script (fenced or not),
        #: once loaded: what a ride looks up (forgotten with ``_loaded``).
        self._carrier_shas: dict[str, str] = {}
        #: The same for a fenced unit's script and a write riding first behind its fence.
        self._fenced_carrier_shas: dict[str, str] = {}
        #: The same for a unit's script carrying a ride that only reads (_CARRY_READ).
        self._reader_shas: dict[str, str] = {}

    # -- keys -------------------------------------------------------------------------------

    def _key(self, thread_id: str, kind: str) -> str:
        return f"{self.prefix}:{{{thread_id}}}:{kind}"

    # -- connections ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _use(self, what: str) -> AsyncIterator[aioredis.Redis]:
        loop = asyncio.get_running_loop()
        home = self._home
        if home is None or (home is not loop and self._given is None and home.is_closed()):
            # Our own client follows the live loop. A client you passed stays on the loop it
            # was first used on; once that loop is gone, calls use short-lived clients.
            self._home = home = loop
            if self._given is None:
                self._client = self._new_client()
        try:
            if home is loop:
                assert self._client is not None
                if not self._ready:
                    await self._setup(self._client)
                yield self._client
            else:
                client = self._one_shot()
                try:
                    if not self._ready:
                        await self._setup(client)
                    yield client
                finally:
                    await client.aclose()
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            text = str(exc).strip().rstrip(".")  # redis-py ends its messages with a period
            msg = (
                f"redis backend unavailable while {what}: {type(exc).__name__}: {text}. Check "
                "that the Redis server is running and reachable, then retry."
            )
            raise BackendUnavailableError(msg) from exc

    def _new_client(self) -> aioredis.Redis:
        """A client whose every call is bounded: redis-py's defaults wait forever for a reply
        and retry three times, so a black-holed server never raised in time."""
        assert self.dsn is not None
        # A blocking pool: past `max_connections`, a call waits for a connection to come
        # back (redis-py's default pool raises "Too many connections" at once); a quick one,
        # as checking out and back costs the blocking pool a quarter of every command.
        pool = QuickPool.from_url(
            self.dsn,
            max_connections=self.max_connections,
            timeout=self.command_timeout,
            socket_connect_timeout=self.connect_timeout,
            socket_timeout=self.command_timeout,
            socket_keepalive=True,
            # One quick retry replaces a connection that died while idle; a timeout is not
            # retried (the server did not answer once, it will not answer faster now).
            retry=Retry(
                ExponentialBackoff(cap=0.5, base=0.05),
                1,
                supported_errors=(redis_errors.ConnectionError,),
            ),
        )
        return aioredis.Redis.from_pool(pool)

    def _one_shot(self) -> aioredis.Redis:
        if self._given is None:
            return self._new_client()
        pool = self._given.connection_pool
        fresh = aioredis.ConnectionPool(
            connection_class=pool.connection_class, **pool.connection_kwargs
        )
        return aioredis.Redis.from_pool(fresh)

    def _script(self, client: aioredis.Redis, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = client.register_script(source)
        return script

    async def _call(
        self, client: aioredis.Redis, source: str, keys: list[str], args: list[Any]
    ) -> Any:
        return await self._script(client, source)(keys=keys, args=args, client=client)

    async def _setup(self, client: aioredis.Redis) -> None:
        key = f"{self.prefix}:schema_version"
        await client.set(key, KEY_LAYOUT_VERSION, nx=True)
        found = int(await client.get(key) or KEY_LAYOUT_VERSION)
        if found > KEY_LAYOUT_VERSION:
            msg = (
                f"the Redis keys under prefix {self.prefix!r} use TensorSketch layout version "
                f"{found}, newer than this release understands ({KEY_LAYOUT_VERSION}); upgrade "
                "tensorsketch-backends, or use another prefix."
            )
            raise CheckpointDecodeError(msg)
        self._ready = True

    # -- checkpoints ------------------------------------------------------------------------

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        c = checkpoint
        if c.blobs:  # the commit script stores blobs and the row in one call
            await self.commit_step(c.thread_id, c, [])
            return
        record = _encode_checkpoint(c)
        keys = [self._key(c.thread_id, "cp"), self._key(c.thread_id, "cpi")]
        async with self._use("saving a checkpoint") as client:
            await self._call(client, _SAVE, keys, [c.checkpoint_id, record])

    async def get_blobs(self, thread_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        async with self._use("reading stored files") as client:
            found: list[Any] = await client.hmget(self._key(thread_id, "bl"), wanted)
        return {d: bytes(raw) for d, raw in zip(wanted, found, strict=True) if raw is not None}

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        async with self._use("loading the latest checkpoint") as client:
            raw: Any = await client.lindex(self._key(thread_id, "cp"), -1)
        return None if raw is None else _decode_checkpoint(thread_id, raw)

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        keys = [self._key(thread_id, "cp"), self._key(thread_id, "cpi")]
        async with self._use("loading a checkpoint") as client:
            raw = await self._call(client, _GET, keys, [checkpoint_id])
        return None if raw is None else _decode_checkpoint(thread_id, raw)

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        async with self._use("listing checkpoints") as client:
            raws: list[Any] = await client.lrange(self._key(thread_id, "cp"), 0, -1)
        return [_decode_checkpoint(thread_id, raw) for raw in raws]

    async def page_checkpoints(
        self, thread_id: str, *, before: str | None = None, limit: int
    ) -> list[StoredCheckpoint]:
        keys = [self._key(thread_id, "cp"), self._key(thread_id, "cpi")]
        async with self._use("reading a page of checkpoints") as client:
            raws: list[Any] = await self._call(client, _PAGE, keys, [before or "", limit])
        return [_decode_checkpoint(thread_id, raw) for raw in reversed(raws)]

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        keys = [self._key(thread_id, "cp"), self._key(thread_id, "cpi")]
        async with self._use("reading a checkpoint") as client:
            raws: list[Any] = await self._call(client, _READ_CHAIN, keys, [checkpoint_id or ""])
        return [_decode_checkpoint(thread_id, raw) for raw in reversed(raws)]

    # -- the effect journal -----------------------------------------------------------------

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        async with self._use("recording an effect") as client:
            await client.hsetnx(self._key(thread_id, "fx"), key, value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        async with self._use("reading the effect journal") as client:
            raw: Any = await client.hget(self._key(thread_id, "fx"), key)
        return None if raw is None else bytes(raw)

    async def record_effects(
        self,
        thread_id: str,
        effects: list[tuple[str, bytes]],
        *,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        if not effects:
            return
        args: list[Any] = [part for pair in effects for part in pair]
        keys = [self._key(thread_id, "fx")]
        async with self._use("recording effects") as client:
            if ride is not None:
                await self._riding(client, thread_id, (_RECORD, keys, args), fence, ride)
                return
            await self._fenced_call(client, _RECORD, thread_id, fence, keys, args)

    async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        async with self._use("reading the effect journal") as client:
            raws: list[Any] = await client.hmget(self._key(thread_id, "fx"), keys)
        return {k: bytes(raw) for k, raw in zip(keys, raws, strict=True) if raw is not None}

    # -- the event log ----------------------------------------------------------------------

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        if not events:
            return
        mapping = {_event_member(e): e.seq for e in events}
        async with self._use("appending events") as client:
            await client.zadd(self._key(thread_id, "ev"), mapping)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        async with self._use("reading events") as client:
            raws: list[Any] = await client.zrange(
                self._key(thread_id, "ev"), since, "+inf", byscore=True
            )
        return [
            StoredEvent(
                seq=int.from_bytes(raw[:_SEQ_BYTES], "big"), payload=bytes(raw[_SEQ_BYTES:])
            )
            for raw in raws
        ]

    async def last_event_seq(self, thread_id: str) -> int | None:
        async with self._use("reading events") as client:
            last = await client.zrange(self._key(thread_id, "ev"), -1, -1, withscores=True)
        return int(last[0][1]) if last else None

    async def thread_head(self, thread_id: str) -> tuple[str | None, int | None]:
        async with self._use("reading the thread's head") as client:
            pipe = client.pipeline(transaction=False)
            pipe.lindex(self._key(thread_id, "cp"), -1)
            pipe.zrange(self._key(thread_id, "ev"), -1, -1, withscores=True)
            raw, last = await pipe.execute()
        checkpoint_id = None if raw is None else _decode_checkpoint(thread_id, raw).checkpoint_id
        return checkpoint_id, int(last[0][1]) if last else None

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        key = self._key(thread_id, "lease")
        ms = max(1, int(ttl * 1000))
        async with self._use("taking the thread lease") as client:
            if await client.set(key, owner, nx=True, px=ms):
                return True
            return bool(await self._call(client, _LEASE, [key], [owner, ms]))

    async def renew_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        ms = max(1, int(ttl * 1000))
        async with self._use("renewing the thread lease") as client:
            return bool(
                await self._call(client, _RENEW, [self._key(thread_id, "lease")], [owner, ms])
            )

    async def release_lease(self, thread_id: str, owner: str) -> None:
        async with self._use("releasing the thread lease") as client:
            await self._call(client, _RELEASE, [self._key(thread_id, "lease")], [owner])

    # -- batched units of work ---------------------------------------------------------------
    #
    # Each is one script: one round trip, and atomic on the server (no other client sees half
    # of it, and a client dying mid-call cannot split it). A script that fails halfway is not
    # rolled back by Redis, but these only fail on keys of the wrong type, which only a
    # foreign write under the prefix could create.

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
        *,
        ride: RecordRide | None = None,
    ) -> ThreadOpening:
        keys = [self._key(thread_id, kind) for kind in ("lease", "cp", "cpi", "ev", "bl")]
        args: list[Any] = [owner, max(1, int(ttl * 1000))]
        if initial is None:
            args += ["0", "", ""]
        else:
            args += ["1", initial.checkpoint_id, _encode_checkpoint(initial)]
            args += [part for pair in initial.blobs for part in pair]
        if ride is not None and ride.insert is not None:  # a folded submit's (folds_submits)
            async with self._use("storing the run and opening its thread") as client:
                reply: list[Any] = await self._folding(client, keys, args, ride)
            return self._opening(thread_id, reply)
        async with self._use("opening the thread") as client:
            if ride is None:
                reply = await self._call(client, _OPEN, keys, args)
            else:  # the ride's write after the lease, only where it was taken
                reply = await self._riding(
                    client, thread_id, (_OPEN, keys, args), None, ride, owner, answer=True
                )
        return self._opening(thread_id, reply)

    @staticmethod
    def _opening(thread_id: str, reply: list[Any]) -> ThreadOpening:
        """What :data:`_OPEN`'s reply says."""
        acquired, created, seq = int(reply[0]), int(reply[1]), reply[2]
        if not acquired:
            return ThreadOpening(acquired=False, checkpoints=[], last_event_seq=None)
        return ThreadOpening(
            acquired=True,
            checkpoints=[_decode_checkpoint(thread_id, raw) for raw in reversed(reply[3:])],
            last_event_seq=int(float(seq)) if seq else None,
            created=bool(created),
        )

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        if checkpoint is None and not events and release_owner is None:
            return
        keys = [self._key(thread_id, kind) for kind in ("ev", "cp", "cpi", "lease", "bl")]
        args: list[Any] = []
        if checkpoint is None:
            args += ["0", "", ""]
        else:
            args += ["1", checkpoint.checkpoint_id, _encode_checkpoint(checkpoint)]
        if release_owner is None:
            args += ["0", ""]
        else:  # a fence of the same owner has just read the lease: no second read
            args += ["2" if release_owner == fence else "1", release_owner]
        blobs = () if checkpoint is None else checkpoint.blobs
        one = len(events) == 1  # its one member goes as it is (see _COMMIT)
        args.append(2 * len(blobs) + one)
        args += [part for pair in blobs for part in pair]
        if one:
            args.append(_event_member(events[0]))
        else:
            args.append(
                b"".join([_FRAME(len(e.payload) + _SEQ_BYTES, e.seq) + e.payload for e in events])
            )
        # ``durable`` has no say here: durability is the server's (AOF) configuration.
        async with self._use("saving a checkpoint") as client:
            if ride is not None:
                await self._riding(client, thread_id, (_COMMIT, keys, args), fence, ride)
                return
            await self._fenced_call(client, _COMMIT, thread_id, fence, keys, args)

    async def _folding(
        self, client: aioredis.Redis, keys: list[str], args: list[Any], ride: RecordRide
    ) -> list[Any]:
        """:meth:`open_thread` for a folded submit (:data:`_FOLD`, one ``EVALSHA``): the
        run's insert, then the opening and the ride's write only where the run heads its
        thread's queue. Sets ``ride.result`` whether or not the lease was taken; returns
        :data:`_OPEN`'s reply."""
        arguments = [*args, self.run_store().fold_arg(ride)]
        for attempt in range(2):
            sha = self._carrier_shas.get(_FOLDING)
            if sha is None:
                sha = self._carrier_shas[_FOLDING] = await self._sha(client, _FOLDING)
            try:
                reply = await client.evalsha(sha, len(keys), *keys, *arguments)
                break
            except redis_errors.ResponseError as exc:
                if _no_script(exc) and attempt == 0:
                    self._forget_scripts()
                    continue
                raise
        ride.result = RedisRunStore.ride_result(ride, reply[0])
        return list(reply[1:])

    def _forget_scripts(self) -> None:
        """The server lost its scripts (a restart, ``SCRIPT FLUSH``; nothing ran): every
        SHA this backend knows is loaded again at its next use."""
        self._loaded.clear()
        self._carrier_shas.clear()
        self._fenced_carrier_shas.clear()
        self._reader_shas.clear()

    @property
    def folds_submits(self) -> bool:  # type: ignore[override]
        """A submit's insert may ride its run's opening (:attr:`Backend.folds_submits`)
        once the run store is in use (its key layout checked), as rides do."""
        return self.carries_rides

    # -- rides ------------------------------------------------------------------------------

    @property
    def carries_rides(self) -> bool:  # type: ignore[override]
        """Rides travel with this backend's units once its run store is in use."""
        store = self.__dict__.get("_run_store")
        return isinstance(store, RedisRunStore) and store.ready

    async def script_reading_head(
        self, client: aioredis.Redis, source: str, args: list[Any], thread_id: str
    ) -> tuple[Any, tuple[str | None, int | None]]:
        """A run-store script (it builds the run keys from its arguments) and a read of
        ``thread_id``'s head, as one script: one command, where a pipeline of three cost
        redis-py as much again. The head is still a guess its reader checks later."""
        keys = [self._key(thread_id, "cp"), self._key(thread_id, "ev")]
        raw = await self._call(client, _reading_head(source), keys, args)
        if isinstance(raw, bytes):  # one string (see _HEAD)
            seq, number, size, rest = raw.split(b" ", 3)
            cut = int(size)
            reply: Any = [int(number), rest[:cut]]
            checkpoint_id, odd = rest[cut:], None
        else:
            reply, checkpoint_id, seq, *odd = raw
        if odd:  # a newest record whose header the script did not read: decode it here
            head: str | None = _decode_checkpoint(thread_id, odd[0]).checkpoint_id
        else:
            head = checkpoint_id.decode() if checkpoint_id else None
        return reply, (head, int(float(seq)) if seq else None)

    async def _sha(self, client: aioredis.Redis, source: str) -> str:
        script = self._script(client, source)
        if source not in self._loaded:
            await client.script_load(source)
            self._loaded.add(source)
        return str(script.sha)

    async def _riding(
        self,
        client: aioredis.Redis,
        thread_id: str,
        unit: tuple[str, list[str], list[Any]],
        fence: str | None,
        ride: RecordRide,
        after_lease: str | None = None,
        *,
        answer: bool = False,
    ) -> Any:
        """Run a unit's script and ``ride``'s as one script (one round trip, nothing in
        between; a MULTI of the two cost redis-py about what the round trip saved). A write
        rides first, fenced by the same lease as the unit (so a unit refused for a lost
        lease writes no record either); a read rides after, and so does a write
        ``after_lease`` (the unit that takes the lease: written only where it took it for
        that owner). Sets ``ride.result``; returns the unit's reply as a list (a reply that
        is no list: one element) if ``answer``, else ``None`` (it is not sent back)."""
        store = self.run_store()
        source, keys, args = unit
        lease = self._key(thread_id, "lease")
        # A write riding first behind the unit's own fence: one fence for both (the lease
        # read once; the ride's arguments name none), the unit's script as it is.
        shared = fence is not None and ride.write is not None and after_lease is None
        if fence is not None:
            keys, args = [lease, *keys], [fence, *args]
            if not shared:
                source = _fenced(source)
        shas = self._fenced_carrier_shas if shared else self._carrier_shas
        if ride.write is None:  # a read, after the unit (_CARRY_READ): no lease, no array
            shas = self._reader_shas
            tail: Any = f"{'1' if answer else '0'}{store.base}rec:{ride.run_id}"
        else:
            guard = None if shared else fence if after_lease is None else after_lease
            at = 0  # the lease key's place among the keys (1-based), when the ride is guarded
            if guard is not None:
                if lease not in keys:  # pragma: no cover - every guarded unit names the lease
                    keys = [*keys, lease]
                at = keys.index(lease) + 1
            text, record = store.ride_args(ride, guard)
            first = "0" if after_lease is not None else "1"
            tail = ormsgpack.packb([first, "1" if answer else "0", at, *text])
            if record is not None:
                tail += record
        for attempt in range(2):
            sha = shas.get(source)
            if sha is None:
                combined = (
                    _carrying_read(source)
                    if ride.write is None
                    else _carrying(source, fenced=shared)
                )
                sha = shas[source] = await self._sha(client, combined)
            try:
                reply = await client.evalsha(sha, len(keys), *keys, *args, tail)
                break
            except redis_errors.ResponseError as exc:
                if _no_script(exc):
                    self._forget_scripts()
                    if attempt == 0:
                        continue
                if _lease_lost(exc):
                    raise lease_lost(thread_id) from exc
                raise
        if not answer:
            ride.result = store.ride_result(ride, reply)
            return None
        ride.result = store.ride_result(ride, reply[0])
        return reply[1:]

    async def _fenced_call(
        self,
        client: aioredis.Redis,
        source: str,
        thread_id: str,
        fence: str | None,
        keys: list[str],
        args: list[Any],
    ) -> Any:
        """Run a write script, made conditional on ``fence`` holding the lease if given."""
        if fence is None:
            return await self._call(client, source, keys, args)
        lease = self._key(thread_id, "lease")
        try:
            return await self._call(client, _fenced(source), [lease, *keys], [fence, *args])
        except redis_errors.ResponseError as exc:
            if _lease_lost(exc):
                raise lease_lost(thread_id) from exc
            raise

    # -- run records ------------------------------------------------------------------------

    async def summarize_threads(self, prefix: str = "") -> list[ThreadSummary]:
        # One SCAN for the ids, then one pipelined round trip: each list's length and its
        # last (newest) row, whose header holds the time.
        threads = await self.list_threads(prefix)
        if not threads:
            return []
        async with self._use("listing threads") as client:
            pipe = client.pipeline(transaction=False)
            for thread_id in threads:
                pipe.llen(self._key(thread_id, "cp"))
                pipe.lindex(self._key(thread_id, "cp"), -1)
            found: list[Any] = await pipe.execute()
        out: list[ThreadSummary] = []
        for index, thread_id in enumerate(threads):
            count, newest = found[2 * index], found[2 * index + 1]
            if count and newest is not None:
                row = _decode_checkpoint(thread_id, newest)
                out.append(ThreadSummary(thread_id, int(count), row.created_at))
        return out

    async def list_forks(self, thread_id: str) -> list[ForkLink]:
        # Like summarize_threads: one SCAN, then one pipelined round trip for every thread's
        # first record (a fork's parent is in its header) and this thread's checkpoint ids.
        others = [t for t in await self.list_threads() if t != thread_id]
        if not others:
            return []
        async with self._use("listing forks") as client:
            pipe = client.pipeline(transaction=False)
            pipe.hkeys(self._key(thread_id, "cpi"))
            for other in others:
                pipe.lindex(self._key(other, "cp"), 0)
            found: list[Any] = await pipe.execute()
        mine = {k.decode() if isinstance(k, bytes) else str(k) for k in found[0]}
        out: list[ForkLink] = []
        for other, first in zip(others, found[1:], strict=True):
            row = None if first is None else _decode_checkpoint(other, first)
            if row is not None and row.parent_id is not None and row.parent_id in mine:
                out.append(ForkLink(other, row.checkpoint_id, row.parent_id))
        return out

    async def list_effects(self, thread_id: str, prefix: str = "") -> list[tuple[str, bytes]]:
        async with self._use("reading the effect journal") as client:
            raw: Any = await client.hgetall(self._key(thread_id, "fx"))
        found = [
            (key.decode() if isinstance(key, bytes) else str(key), bytes(value))
            for key, value in raw.items()
        ]
        return sorted((k, v) for k, v in found if k.startswith(prefix))

    async def forget_effects(self, thread_id: str, keys: list[str]) -> None:
        if not keys:
            return
        async with self._use("forgetting journal entries") as client:
            await client.hdel(self._key(thread_id, "fx"), *keys)

    # -- thread administration --------------------------------------------------------------

    async def list_threads(self, prefix: str = "", limit: int | None = None) -> list[str]:
        # Every thread with a checkpoint has a ``cp`` list; SCAN walks them without blocking
        # the server (KEYS would). The thread part of the pattern is glob-escaped.
        escaped = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix)
        pattern = f"{self.prefix}:{{{escaped}*}}:cp"
        head, tail = len(self.prefix) + 2, len(":cp") + 1
        found: set[str] = set()
        async with self._use("listing threads") as client:
            async for key in client.scan_iter(match=pattern, count=1000):
                name = key.decode() if isinstance(key, bytes) else str(key)
                found.add(name[head:-tail])
        ordered = sorted(t for t in found if t.startswith(prefix))
        return ordered if limit is None else ordered[:limit]

    async def delete_thread(self, thread_id: str) -> None:
        keys = [self._key(thread_id, kind) for kind in ("cp", "cpi", "fx", "ev", "lease", "bl")]
        async with self._use("deleting a thread") as client:
            await client.delete(*keys)  # one command: the keys share a slot

    async def replace_checkpoints(
        self,
        thread_id: str,
        checkpoints: list[StoredCheckpoint],
        *,
        blobs: Collection[str] | None = None,
    ) -> None:
        cp, cpi, bl = (self._key(thread_id, kind) for kind in ("cp", "cpi", "bl"))
        async with self._use("pruning checkpoints") as client:
            pipe = client.pipeline(transaction=True)  # MULTI/EXEC: one unit
            pipe.delete(cp, cpi)
            if checkpoints:
                pipe.rpush(cp, *[_encode_checkpoint(c) for c in checkpoints])
                pipe.hset(cpi, mapping={c.checkpoint_id: i for i, c in enumerate(checkpoints)})
            for c in checkpoints:
                for digest, data in c.blobs:
                    pipe.hsetnx(bl, digest, data)
            if blobs is not None:
                pipe.eval(_KEEP_BLOBS, 1, bl, *sorted(set(blobs)))
            await pipe.execute()

    def run_store(self) -> RedisRunStore:
        """The run records, under this backend's prefix (see :mod:`.redis_runs`)."""
        store = self.__dict__.get("_run_store")
        if store is None:
            store = self.__dict__["_run_store"] = RedisRunStore(self)
        return store

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the client this backend created (a ``client=`` you passed stays open)."""
        client, home = self._client, self._home
        self._home = None
        self._ready = False
        if self._given is None:
            self._client = None
            if client is not None and home is asyncio.get_running_loop():
                await client.aclose()

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "prefix": self.prefix,
            "lease_ttl": self.lease_ttl,
            "connect_timeout": self.connect_timeout,
            "command_timeout": self.command_timeout,
        }

    def __repr__(self) -> str:
        return f"RedisBackend(prefix={self.prefix!r})"


def _event_member(e: StoredEvent) -> bytes:
    """An event as a sorted-set member: its seq first, so equal payloads stay distinct."""
    return e.seq.to_bytes(_SEQ_BYTES, "big") + e.payload


#: An event's frame head as :data:`_COMMIT` reads it: the member's length (4 bytes), then its
#: seq (8), both big-endian, where the member's payload follows (two C calls an event: a
#: frame built from :func:`_event_member` cost six).
_FRAME = struct.Struct(">IQ").pack


def _encode_checkpoint(c: StoredCheckpoint) -> bytes:
    header = json.dumps([c.checkpoint_id, c.parent_id, c.step, c.created_at, c.base_id]).encode()
    return len(header).to_bytes(4, "big") + header + c.payload


def _decode_checkpoint(thread_id: str, raw: bytes) -> StoredCheckpoint:
    try:
        size = int.from_bytes(raw[:4], "big")
        header = json.loads(raw[4 : 4 + size])
        checkpoint_id, parent_id, step, created_at = header[:4]
        # A record of layout 1 (four fields) was a delta on its parent, or a snapshot.
        base_id = header[4] if len(header) > 4 else parent_id
        payload = bytes(raw[4 + size :])
    except (ValueError, TypeError) as exc:
        msg = (
            f"a checkpoint record of thread {thread_id!r} in Redis is corrupt ({exc}); fork "
            "from an earlier checkpoint or start a new thread."
        )
        raise CheckpointDecodeError(msg) from exc
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=str(checkpoint_id),
        parent_id=None if parent_id is None else str(parent_id),
        step=int(step),
        created_at=float(created_at),
        payload=payload,
        base_id=None if base_id is None else str(base_id),
    )
