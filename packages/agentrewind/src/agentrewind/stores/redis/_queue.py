"""Durable queues in Redis (and Redis Cluster): sorted sets in the queue's hash slot.

A queue's keys are `PREFIX:NS:q:{TAG}:QUEUE:part` (built by `_keys.id_base`, so distinct
(namespace, queue) pairs never collide and a queue lives in one Cluster slot):

- `wait` (sorted set): the entries a worker may take, scored `priority * 2**33 + seq`, so
  ZRANGE order is (priority, enqueue sequence); every score is an exact double (priority
  below 2**20, sequence below 2**33: a queue takes 2**33 entries in its life, then refuses
  more);
- `delay` (sorted set): entries whose not-before time is ahead, scored by it; a dequeue
  moves the due ones into `wait`, at their place;
- `fly` (sorted set): entries in flight, scored by the expiry of their slot; a dequeue puts
  the lapsed ones back into `wait`, at their place;
- `age` (sorted set): every entry not in flight (waiting or delayed), scored by enqueue
  time, for `stats`' oldest entry;
- `starts` (sorted set): the limiter's recent starts, `SEQ:DELIVERY:PARTITION` scored by
  start time;
- `dedup` (hash): deduplication id -> run id;
- `seq` (string): the enqueue counter;
- `e:RUN_ID` (hash, one per entry): `p` priority, `part` partition, `dd` deduplication id
  (absent: none), `nb` not-before, `at` enqueue time, `n` deliveries, `seq`, `o` owner (in
  flight only).

Each operation is one Lua script over those keys: atomic, and valid on a Cluster. Times come
from the server's clock (`TIME`), so workers on machines with skewed clocks agree; only a
not-before time is the pusher's. A dequeue reads `wait` from its head: in a queue without
partitions it first works out how many entries the limits allow and reads exactly those,
whatever the queue's depth; a partitioned queue reads on, in batches of 100, past entries of
full partitions (as every backend running `pick` does).

The namespace's `queues` set (another slot) names the queues for `stats()`: a single Redis
adds to it in the push script itself; on a Cluster the push adds to it first, in a call of
its own, so a queue holding entries is always listed. Members are never removed (a queue
name is cheap and may be reused); `stats()` skips queues holding nothing.
"""

from __future__ import annotations

from typing import Any

from ...errors import QueueDeduplicatedError, QueueError
from ..queue import MAX_PRIORITY, QueueBackend, QueueEntry, QueueLimits, QueueStats
from . import _keys as K

__all__ = ["RedisQueues"]

# Shared by the scripts: the server's time in seconds, an entry's key, its `wait` score,
# and putting an entry back to `wait` (a lapse or a release).
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function ekey(id) return ARGV[1] .. id end
local function back(wait, age, fly, id)
  local f = redis.call('HMGET', ekey(id), 'p', 'seq', 'at')
  redis.call('HDEL', ekey(id), 'o')
  redis.call('ZREM', fly, id)
  redis.call('ZADD', wait, tonumber(f[1]) * 8589934592 + tonumber(f[2]), id)
  redis.call('ZADD', age, f[3], id)
end
"""

# KEYS: wait, delay, age, dedup, seq, entry[, queues index (a single Redis)]. ARGV: entry key
# prefix, run id, priority, partition, has dedup ('1'/'0'), dedup id, not-before, queue name.
# Returns {'ok'}, {'dedup', holder} or {'dup'}.
PUSH = (
    _PRELUDE
    + """
if ARGV[5] == '1' then
  local holder = redis.call('HGET', KEYS[4], ARGV[6])
  if holder then return {'dedup', holder} end
end
if redis.call('EXISTS', KEYS[6]) == 1 then return {'dup'} end
local at = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
local seq = redis.call('INCR', KEYS[5])
if seq >= 8589934592 then return {'full'} end
redis.call('HSET', KEYS[6], 'p', ARGV[3], 'part', ARGV[4], 'nb', ARGV[7], 'at', at,
  'n', 0, 'seq', seq)
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[6], 'dd', ARGV[6])
  redis.call('HSET', KEYS[4], ARGV[6], ARGV[2])
end
redis.call('ZADD', KEYS[3], at, ARGV[2])
if tonumber(ARGV[7]) > now then
  redis.call('ZADD', KEYS[2], ARGV[7], ARGV[2])
else
  redis.call('ZADD', KEYS[1], tonumber(ARGV[3]) * 8589934592 + seq, ARGV[2])
end
if #KEYS > 6 then redis.call('SADD', KEYS[7], ARGV[8]) end
return {'ok'}
"""
)

# KEYS: wait, delay, age, fly, starts. ARGV: entry key prefix, owner, n, ttl,
# concurrency ('' none), limiter n ('' none), limiter window, partitioned ('1'/'0').
# Returns {entries read from wait, (run id, {p, part, dd, nb, at, n}) per entry taken}.
TAKE = (
    _PRELUDE
    + """
local wait, delay, age, fly, starts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local n = tonumber(ARGV[3])
if n <= 0 then return {0} end
local bound = string.format('%.17g', now)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', fly, '-inf', '(' .. bound)) do
  back(wait, age, fly, id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', delay, '-inf', bound)) do
  local f = redis.call('HMGET', ekey(id), 'p', 'seq')
  redis.call('ZREM', delay, id)
  redis.call('ZADD', wait, tonumber(f[1]) * 8589934592 + tonumber(f[2]), id)
end
local conc, lim = tonumber(ARGV[5]), tonumber(ARGV[6])
local parted = ARGV[8] == '1'
local flying, started = {}, {}
if conc then
  if parted then
    for _, id in ipairs(redis.call('ZRANGE', fly, 0, -1)) do
      local p = redis.call('HGET', ekey(id), 'part')
      flying[p] = (flying[p] or 0) + 1
    end
  else
    flying[''] = redis.call('ZCARD', fly)
  end
end
if lim then
  local edge = string.format('%.17g', now - tonumber(ARGV[7]))
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', edge)
  if parted then
    for _, m in ipairs(redis.call('ZRANGE', starts, 0, -1)) do
      local p = string.match(m, '^[^:]*:[^:]*:(.*)$')
      started[p] = (started[p] or 0) + 1
    end
  else
    started[''] = redis.call('ZCARD', starts)
  end
end
-- pick(): the first entries (in dequeue order) the limits allow.
local room, taken, read, offset = {}, {}, 0, 0
local function free(part)
  local f = n
  if conc then f = math.min(f, conc - (flying[part] or 0)) end
  if lim then f = math.min(f, lim - (started[part] or 0)) end
  return f
end
local batch = math.max(n, 100)
if not parted then
  -- One partition: the first `room` entries are taken, so read exactly those.
  room[''] = free('')
  batch = room['']
end
local done = batch <= 0
while not done do
  local ids = redis.call('ZRANGE', wait, offset, offset + batch - 1)
  if #ids == 0 then break end
  read = read + #ids
  offset = offset + batch
  for _, id in ipairs(ids) do
    local part = ''
    if parted then part = redis.call('HGET', ekey(id), 'part') end
    if room[part] == nil then room[part] = free(part) end
    if room[part] <= 0 then
      if not parted then done = true; break end
    else
      room[part] = room[part] - 1
      taken[#taken + 1] = id
      -- (one partition: no room left, so pick() stops at the next entry)
      if #taken >= n or (room[part] <= 0 and not parted) then done = true; break end
    end
  end
end
local expires = now + tonumber(ARGV[4])
local out = {read}
for _, id in ipairs(taken) do
  local e = ekey(id)
  redis.call('ZREM', wait, id)
  redis.call('ZREM', age, id)
  redis.call('ZADD', fly, expires, id)
  redis.call('HSET', e, 'o', ARGV[2])
  redis.call('HINCRBY', e, 'n', 1)
  local f = redis.call('HMGET', e, 'p', 'part', 'dd', 'nb', 'at', 'n')
  if lim then  -- one member per (entry, delivery)
    local seq = redis.call('HGET', e, 'seq')
    redis.call('ZADD', starts, now, seq .. ':' .. f[6] .. ':' .. f[2])
  end
  out[#out + 1] = id
  out[#out + 1] = f
end
return out
"""
)

# KEYS: fly. ARGV: entry key prefix, owner, ttl, run ids... Returns the run ids still held.
RENEW = (
    _PRELUDE
    + """
local held = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', ekey(id), 'o') == ARGV[2] then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), id)
    held[#held + 1] = id
  end
end
return held
"""
)

# KEYS: wait, age, fly. ARGV: entry key prefix, owner, run ids...
RELEASE = (
    _PRELUDE
    + """
for i = 3, #ARGV do
  if redis.call('HGET', ekey(ARGV[i]), 'o') == ARGV[2] then
    back(KEYS[1], KEYS[2], KEYS[3], ARGV[i])
  end
end
return 1
"""
)

# KEYS: wait, delay, age, fly, dedup, entry. ARGV: run id. Returns 1 if it had an entry.
FINISH = """
local dd = redis.call('HGET', KEYS[6], 'dd')
if redis.call('DEL', KEYS[6]) == 0 then return 0 end
if dd and redis.call('HGET', KEYS[5], dd) == ARGV[1] then redis.call('HDEL', KEYS[5], dd) end
for i = 1, 4 do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 1
"""

# KEYS: wait, delay, age, fly. ARGV: entry key prefix. Reads only (lapsed slots count as
# waiting, due entries as not delayed). Returns {queued, delayed, in flight, oldest
# waiting's enqueue time or false, enqueue times of lapsed slots...}.
STATS = (
    _PRELUDE
    + """
local bound = string.format('%.17g', now)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. bound)
local out = {
  redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + #lapsed,
  redis.call('ZCOUNT', KEYS[2], '(' .. bound, '+inf'),
  redis.call('ZCARD', KEYS[4]) - #lapsed,
  false,
}
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #first > 0 then out[4] = first[2] end
for _, id in ipairs(lapsed) do out[#out + 1] = redis.call('HGET', ekey(id), 'at') end
return out
"""
)

_SCRIPTS = {
    "QUEUE_PUSH": PUSH,
    "QUEUE_TAKE": TAKE,
    "QUEUE_RENEW": RENEW,
    "QUEUE_RELEASE": RELEASE,
    "QUEUE_FINISH": FINISH,
    "QUEUE_STATS": STATS,
}
_FIELDS = ("p", "part", "dd", "nb", "at", "n")


def _s(raw: bytes | str) -> str:
    return raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw


def _entry(queue: str, run_id: str, fields: list[Any]) -> QueueEntry:
    p, part, dd, nb, at, n = fields
    return QueueEntry(
        queue,
        run_id,
        int(p),
        _s(part),
        None if dd is None else _s(dd),
        float(nb),
        float(at),
        int(n),
    )


class QueueKeys:
    """The keys of one queue (all in one hash slot)."""

    __slots__ = ("age", "base", "dedup", "delay", "fly", "seq", "starts", "wait")

    def __init__(self, prefix: str, namespace: str, queue: str) -> None:
        self.base = b = K.id_base(prefix, namespace, "q", queue)
        self.wait, self.delay, self.age, self.fly = (
            f"{b}:wait",
            f"{b}:delay",
            f"{b}:age",
            f"{b}:fly",
        )
        self.starts, self.dedup, self.seq = f"{b}:starts", f"{b}:dedup", f"{b}:seq"

    @property
    def entry_prefix(self) -> str:
        """The start of each entry's hash key (the run id follows)."""
        return f"{self.base}:e:"

    def entry(self, run_id: str) -> str:
        """The hash of the run's entry."""
        return f"{self.base}:e:{run_id}"

    def fixed(self) -> list[str]:
        """Every key of the queue but the entries' hashes."""
        return [self.wait, self.delay, self.age, self.fly, self.starts, self.dedup, self.seq]


class RedisQueues(QueueBackend):
    """The queues of a `RedisStore` namespace (Redis, Valkey, Redis Cluster)."""

    def __init__(self, store: Any) -> None:  # a RedisStore (which imports this module)
        super().__init__(store)
        self.redis: Any = store
        store.register_scripts(_SCRIPTS)
        self.index = K.namespace_key(store.prefix, store.namespace, "queues")
        self.scanned = 0
        """Entries the last `take` read from the queue's waiting set (in a queue without
        partitions, the entries it took, whatever the queue's depth)."""

    def keys(self, queue: str) -> QueueKeys:
        """The keys of `queue` in this namespace."""
        return QueueKeys(self.redis.prefix, self.redis.namespace, queue)

    def push(self, entry: QueueEntry) -> None:
        e = entry
        p = e.priority
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_PRIORITY:
            raise QueueError(f"priority must be a whole number from 0 to {MAX_PRIORITY}, not {p!r}")
        k = self.keys(e.queue)
        keys = [k.wait, k.delay, k.age, k.dedup, k.seq, k.entry(e.run_id)]
        if self.redis.cluster:  # the index lives in another slot: listed first, on its own
            self.redis._call(lambda: self.redis.client.sadd(self.index, e.queue))
        else:
            keys.append(self.index)
        has_dd = e.dedup_id is not None
        args = [
            k.entry_prefix,
            e.run_id,
            p,
            e.partition,
            "1" if has_dd else "0",
            e.dedup_id or "",
            repr(float(e.not_before)),
            e.queue,
        ]
        reply = self.redis.run_script("QUEUE_PUSH", keys, args)
        kind = _s(reply[0])
        if kind == "dedup":
            assert e.dedup_id is not None
            raise QueueDeduplicatedError(e.queue, e.dedup_id, _s(reply[1]))
        if kind == "dup":
            raise QueueError(f"run {e.run_id!r} is already in queue {e.queue!r}")
        if kind == "full":  # the sequence would no longer fit its score exactly
            raise QueueError(f"queue {e.queue!r} has taken its 2**33 entries: use another name")

    def take(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        k = self.keys(queue)
        lim = limits.limiter
        args = [
            k.entry_prefix,
            owner,
            n,
            repr(float(ttl)),
            "" if limits.concurrency is None else limits.concurrency,
            "" if lim is None else lim[0],
            repr(limits.window),
            "1" if limits.partitioned else "0",
        ]
        keys = [k.wait, k.delay, k.age, k.fly, k.starts]
        reply = self.redis.run_script("QUEUE_TAKE", keys, args)
        self.scanned = int(reply[0])
        it = iter(reply[1:])
        return [_entry(queue, _s(run_id), fields) for run_id, fields in zip(it, it, strict=True)]

    def renew(self, queue: str, owner: str, run_ids: list[str], ttl: float) -> list[str]:
        if not run_ids:
            return []
        k = self.keys(queue)
        args = [k.entry_prefix, owner, repr(float(ttl)), *run_ids]
        return [_s(r) for r in self.redis.run_script("QUEUE_RENEW", [k.fly], args)]

    def release(self, queue: str, owner: str, run_ids: list[str]) -> None:
        if not run_ids:
            return
        k = self.keys(queue)
        keys = [k.wait, k.age, k.fly]
        self.redis.run_script("QUEUE_RELEASE", keys, [k.entry_prefix, owner, *run_ids])

    def finish(self, queue: str, run_id: str) -> bool:
        k = self.keys(queue)
        keys = [k.wait, k.delay, k.age, k.fly, k.dedup, k.entry(run_id)]
        return bool(self.redis.run_script("QUEUE_FINISH", keys, [run_id]))

    def entry(self, queue: str, run_id: str) -> QueueEntry | None:
        key = self.keys(queue).entry(run_id)
        fields = self.redis._call(lambda: self.redis.client.hmget(key, *_FIELDS))
        return None if fields[0] is None else _entry(queue, run_id, fields)

    def _stats(self, queue: str) -> QueueStats:
        k = self.keys(queue)
        keys = [k.wait, k.delay, k.age, k.fly]
        queued, delayed, flying, oldest, *lapsed = self.redis.run_script(
            "QUEUE_STATS", keys, [k.entry_prefix]
        )
        times = [float(t) for t in (oldest, *lapsed) if t is not None]
        return QueueStats(queue, int(queued), int(delayed), int(flying), min(times, default=None))

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        if queue is not None:
            return [self._stats(queue)]
        names = sorted(
            _s(m) for m in self.redis._call(lambda: self.redis.client.smembers(self.index))
        )
        out = [self._stats(name) for name in names]
        return [s for s in out if s.queued or s.in_flight]
