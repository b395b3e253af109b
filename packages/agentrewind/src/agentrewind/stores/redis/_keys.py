"""Redis key layout and Lua scripts, kept in one place.

A run's keys are `PREFIX:NS:run:{TAG}:ID:part` where `NS` and `ID` are the namespace and run id
percent-encoded (so they hold no `:`, `{` or `}` and distinct pairs never give the same key)
and `TAG` is a digest of both: every key of a run has one non-empty hash tag, so a run lives in
one Cluster slot whatever its id holds. Each write is one atomic script. Only core commands are
used (Redis 7, Valkey, managed services).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from urllib.parse import quote

SCHEMA_KEY = "{prefix}:schema_version"
REDIS_SCHEMA_VERSION = 3
"""Key layout: 1 put raw `{namespace}` and `{id}` in keys (collisions, broken slots); 2 encodes
them (`id_base`); 3 scores the runs index by update time (each write moves its run), so
`list_runs` reads a page of it. Tracked per namespace; see `_migrate`."""


def encode_part(text: str) -> str:
    """Percent-encode a namespace or id for a key: injective, and free of `:`, `{`, `}`."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@functools.lru_cache(maxsize=4096)
def id_base(prefix: str, namespace: str, family: str, ident: str) -> str:
    """The common start of every key of one run (`family="run"`) or thread (`"lg"`)."""
    ns, enc = encode_part(namespace), encode_part(ident)
    tag = hashlib.blake2b(f"{ns}:{enc}".encode(), digest_size=8).hexdigest()
    return f"{prefix}:{ns}:{family}:{{{tag}}}:{enc}"


def namespace_key(prefix: str, namespace: str, name: str) -> str:
    """A key of the namespace as a whole (an index), outside every run's hash tag."""
    return f"{prefix}:{encode_part(namespace)}:{name}"


@dataclass(frozen=True, slots=True)
class RunKeys:
    """The keys of one run."""

    steps: str  # hash: step key -> encoded record
    order: str  # zset: step key scored by seq
    ids: str  # hash: step_id -> step key
    run: str  # hash: status, created_at, updated_at, ttl_ms, metrics
    heads: str  # hash: branch -> step_id
    lease: str  # string: owner, with PX expiry
    sites: str  # hash: step key -> JSON [kind, name, replayable] (opening from an index)

    @classmethod
    def of(cls, prefix: str, namespace: str, run_id: str) -> RunKeys:
        base = id_base(prefix, namespace, "run", run_id)
        return cls(
            *(
                f"{base}:{part}"
                for part in ("steps", "order", "ids", "run", "heads", "lease", "sites")
            )
        )

    def data_keys(self) -> list[str]:
        """Keys that share the run's TTL (the lease expires on its own)."""
        return [self.steps, self.order, self.ids, self.run, self.heads, self.sites]

    def all(self) -> list[str]:
        """Every key of the run: fenced scripts find the lease at KEYS[6], the sites at 7."""
        return [self.steps, self.order, self.ids, self.run, self.heads, self.lease, self.sites]


def runs_index(prefix: str, namespace: str) -> str:
    """The sorted set of a namespace's run ids, scored by last update (layout 3).

    Each write script moves its run in it atomically when it is passed as KEYS[8] (a single
    Redis); on a Cluster it lives in another slot than the run, so the store updates it with
    its own ZADD right after the write. Runs that expired (TTL) leave members behind: readers
    skip them and remove them with `DROP_GONE`.
    """
    return namespace_key(prefix, namespace, "runs")


FENCE_MARK = "AGENTREWIND_FENCE"


def _fence(needs_run: bool) -> str:
    """Lua prelude of a fenced write: KEYS[6] is the lease, ARGV[1] the writer ('' unfenced).

    ARGV[2] is the run id to move in the runs index KEYS[8] ('' when the caller does it: on a
    Cluster). Both are removed, so the script's own arguments keep their numbers. A failed check
    aborts the script with an error `FENCE_MARK<TAB>holder<TAB>pttl<TAB>run exists`.
    """
    check_run = (
        """
  if exists == 0 then
    return redis.error_reply('AGENTREWIND_FENCE\t' .. owner .. '\t60000\t0')
  end"""
        if needs_run
        else ""
    )
    return f"""
local owner = table.remove(ARGV, 1)
local member = table.remove(ARGV, 1)
if owner ~= '' then
  local holder = redis.call('GET', KEYS[6])
  local exists = redis.call('EXISTS', KEYS[4])
  if holder ~= owner then
    local pttl = 0
    if holder then pttl = redis.call('PTTL', KEYS[6]) end
    return redis.error_reply(
      'AGENTREWIND_FENCE\t' .. (holder or '') .. '\t' .. pttl .. '\t' .. exists)
  end{check_run}
end
"""


_DATA = "{1, 2, 3, 4, 5, 7}"  # the data keys of a run among KEYS (6 is the lease)

# Refresh the TTL of every data key of a run from the run hash (KEYS[4]).
_REFRESH_TTL = f"""
local ttl = tonumber(redis.call('HGET', KEYS[4], 'ttl_ms') or '0')
if ttl and ttl > 0 then
  for _, i in ipairs({_DATA}) do redis.call('PEXPIRE', KEYS[i], ttl) end
end
"""

_TOUCH = """
redis.call('HSETNX', KEYS[4], 'created_at', ARGV[1])
redis.call('HSETNX', KEYS[4], 'status', 'running')
redis.call('HSET', KEYS[4], 'updated_at', ARGV[1])
if member ~= '' then redis.call('ZADD', KEYS[8], ARGV[1], member) end
"""

# KEYS: run data keys, then the lease. ARGV: owner ('' unfenced), now, n_heads,
# (branch, step_id) * n_heads, then
# (key, step_id, seq, data, site) per record.
PUT_STEPS = (
    _fence(True)
    + _TOUCH
    + """
local n = tonumber(ARGV[2])
for i = 3, 2 + 2 * n, 2 do redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1]) end
for i = 3 + 2 * n, #ARGV, 5 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 3])
  redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i])
  redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 4])
end
"""
    + _REFRESH_TTL
    + "return 1"
)

# KEYS: run data keys, then the lease. ARGV: owner ('' unfenced), now,
# ttl_ms ('' keeps the current one), status, '1' to count an execution (metrics.executions).
BEGIN_RUN = (
    _fence(False)
    + _TOUCH
    + """
if ARGV[2] ~= '' then redis.call('HSET', KEYS[4], 'ttl_ms', ARGV[2]) end
redis.call('HSET', KEYS[4], 'status', ARGV[3])
if ARGV[4] == '1' then
  local cur = redis.call('HGET', KEYS[4], 'metrics')
  local total = cur and cjson.decode(cur) or {}
  total['executions'] = (total['executions'] or 0) + 1
  redis.call('HSET', KEYS[4], 'metrics', cjson.encode(total))
end
"""
    + _REFRESH_TTL
    + "return redis.call('HGETALL', KEYS[4])"
)

# KEYS: run data keys, then the lease. ARGV: owner ('' unfenced), now, status,
# metrics json to add to the run's totals.
END_RUN = (
    _fence(True)
    + _TOUCH
    + """
local cur = redis.call('HGET', KEYS[4], 'metrics')
local total = cur and cjson.decode(cur) or {}
for k, v in pairs(cjson.decode(ARGV[3])) do total[k] = (total[k] or 0) + v end
redis.call('HSET', KEYS[4], 'status', ARGV[2], 'metrics', cjson.encode(total))
"""
    + _REFRESH_TTL
    + "return 1"
)

# KEYS: run data keys, then the lease. ARGV: owner ('' unfenced), now,
# ttl_ms ('' or '0' removes it).
SET_TTL = (
    _fence(True)
    + _TOUCH
    + """
if ARGV[2] == '' or ARGV[2] == '0' then
  redis.call('HDEL', KEYS[4], 'ttl_ms')
  for _, i in ipairs("""
    + _DATA
    + """) do redis.call('PERSIST', KEYS[i]) end
else
  redis.call('HSET', KEYS[4], 'ttl_ms', ARGV[2])
end
"""
    + _REFRESH_TTL
    + "return 1"
)

# KEYS: run data keys, then the lease. ARGV: owner ('' unfenced), now, branch, step_id ('' deletes).
SET_HEAD = (
    _fence(True)
    + _TOUCH
    + """
if ARGV[3] == '' then redis.call('HDEL', KEYS[5], ARGV[2])
else redis.call('HSET', KEYS[5], ARGV[2], ARGV[3]) end
"""
    + _REFRESH_TTL
    + "return 1"
)

# KEYS[1]: lease. ARGV: owner, ttl_ms, stale owner that may be replaced ('' for none).
ACQUIRE_LEASE = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] or (ARGV[3] ~= '' and cur == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, ARGV[1], tonumber(ARGV[2])}
end
return {0, cur, redis.call('PTTL', KEYS[1])}
"""

# KEYS[1]: lease. ARGV: owner, ttl_ms. Extends only the owner's own live lease.
RENEW_LEASE = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, ARGV[1], tonumber(ARGV[2])}
end
if not cur then return {0, '', 0} end
return {0, cur, redis.call('PTTL', KEYS[1])}
"""

# KEYS: every key of a run (the lease at KEYS[6]), then the runs index (optional, see
# `runs_index`). ARGV[1]: '1' to delete whatever holds the lease, else the lease holder the
# caller judged dead ('' for none); ARGV[3]: the run id. Returns {deleted, holder, pttl}.
DELETE_RUN = """
local cur = redis.call('GET', KEYS[6])
if ARGV[1] == '1' or (not cur) or cur == ARGV[2] then
  if #KEYS > 7 then redis.call('ZREM', KEYS[8], ARGV[3]) end
  return {redis.call('DEL', unpack(KEYS, 1, 7)), '', 0}
end
return {-1, cur, redis.call('PTTL', KEYS[6])}
"""

# KEYS: a run's steps and order. ARGV: a step key, how many of the next keys (by seq) to read
# too. Returns {keys, records}: a replay reads the records it will hit next in one round trip.
READ_AHEAD = """
local keys = {ARGV[1]}
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score then
  local after = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. score, '+inf', 'LIMIT', 0, ARGV[2])
  for _, k in ipairs(after) do keys[#keys + 1] = k end
end
return {keys, redis.call('HMGET', KEYS[1], unpack(keys))}
"""

# KEYS: (run hash, lease) of each run of a page of the runs index (a single Redis: on a
# Cluster they live in several slots, and a pipeline reads them). Returns, for each run, its
# hash as a flat list and its lease holder (nil when none).
READ_RUNS = """
local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
  out[#out + 1] = redis.call('GET', KEYS[i + 1])
end
return out
"""

# KEYS[1]: the runs index. ARGV: (run id, score read) pairs of runs found gone (expired).
# A member is removed only if its score is unchanged: a run written again since stays.
DROP_GONE = """
local n = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
"""

RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
