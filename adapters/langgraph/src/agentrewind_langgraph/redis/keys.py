"""Redis key layout and Lua scripts of `RewindSaver`, kept in one place.

Every key of one thread starts with the core store's `key_base("lg", thread_id)`: namespace
and id encoded (no collisions) under one hash tag (one Cluster slot, whatever the id holds),
so each write is one atomic script. Core commands only (Redis 7, Valkey, managed Redis).

Per thread (`M` = `cns NUL checkpoint_id`):
    cp  hash  M -> JSON {"p": parent, "v": {channel: version}, "r": run_id, "m": metadata}
              NUL msgpack [cp_type, checkpoint, md_type, md_blob] (JSON text has no raw NUL,
              so scripts read the JSON head alone; one field per checkpoint)
    ix  zset  M (all scores 0: lexicographic, so the newest id of a namespace is one lookup)
    bl  hash  cns NUL channel NUL version -> kind base NUL n NUL type NUL value
    wr  hash  M NUL task_path NUL task_id NUL idx -> channel NUL type NUL value
    wx  zset  the `wr` fields, so a checkpoint's writes come back in `writes_sort_key` order
    th  hash  created_at, updated_at, ttl_ms
    tomb      string: when the thread was deleted (late writes of that history are refused)
"""

from __future__ import annotations

DATA_PARTS = ("cp", "ix", "bl", "wr", "wx", "th")
"""KEYS[1..6] of every script; KEYS[7] is the tombstone, KEYS[8] (if given) the registry."""


FAMILY = "lg"
REGISTRY = "lg:threads"
"""The namespace's sorted set of thread ids, scored by last write time."""


def thread_keys(base: str) -> list[str]:
    """The data keys of one thread (from the store's `key_base`), then its tombstone key."""
    return [f"{base}:{part}" for part in DATA_PARTS] + [f"{base}:tomb"]


def idx_text(idx: int) -> str:
    """A write index as text that sorts like the number (special writes are negative)."""
    return f"{idx + 1_000_000_000:010d}"


# The part of a record before its first NUL (a checkpoint's JSON head, a blob's kind+base).
_HEAD = """
local function head(rec) return string.sub(rec, 1, string.find(rec, '\\0', 1, true) - 1) end
"""

# Refresh the thread's TTL on every data key. Expects `ttl_arg` ('' keeps the stored one).
_TTL = (
    _HEAD
    + """
local function refresh_ttl(ttl_arg, now)
  if ttl_arg ~= '' then redis.call('HSET', KEYS[6], 'ttl_ms', ttl_arg) end
  redis.call('HSETNX', KEYS[6], 'created_at', now)
  redis.call('HSET', KEYS[6], 'updated_at', now)
  local ttl = tonumber(redis.call('HGET', KEYS[6], 'ttl_ms') or '0')
  if ttl and ttl > 0 then
    for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
"""
)

# KEYS: 6 data keys, tomb, [registry]. ARGV: now, cns, checkpoint id, record, ts, ttl_ms,
# parent id or '', thread_id, then (channel, version, base version or '', record) per blob.
PUT = (
    _TTL
    + """
local pre = ARGV[2] .. '\\0'
local tomb = redis.call('GET', KEYS[7])
if tomb then
  if tonumber(ARGV[5]) <= tonumber(tomb) then return 0 end
  if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[1], pre .. ARGV[7]) == 0 then return 0 end
  redis.call('DEL', KEYS[7])
end
local missing = {}
for i = 9, #ARGV, 4 do
  if ARGV[i + 2] ~= '' and
      redis.call('HEXISTS', KEYS[3], pre .. ARGV[i] .. '\\0' .. ARGV[i + 2]) == 0 then
    missing[#missing + 1] = (i - 9) / 4
  end
end
if #missing > 0 then
  table.insert(missing, 1, -1)
  return missing
end
local m = pre .. ARGV[3]
redis.call('HSET', KEYS[1], m, ARGV[4])
redis.call('ZADD', KEYS[2], 0, m)
for i = 9, #ARGV, 4 do
  redis.call('HSET', KEYS[3], pre .. ARGV[i] .. '\\0' .. ARGV[i + 1], ARGV[i + 3])
end
refresh_ttl(ARGV[6], ARGV[1])
if KEYS[8] then redis.call('ZADD', KEYS[8], ARGV[1], ARGV[8]) end
return 1
"""
)

# KEYS: as PUT. ARGV: now, member, ttl_ms, thread_id, then (field, record, special) per write.
PUT_WRITES = (
    _TTL
    + """
if redis.call('EXISTS', KEYS[7]) == 1 and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  return 0
end
for i = 5, #ARGV, 3 do
  if ARGV[i + 2] == '1' then redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  else redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) end
  redis.call('ZADD', KEYS[5], 0, ARGV[i])
end
refresh_ttl(ARGV[3], ARGV[1])
if KEYS[8] then redis.call('ZADD', KEYS[8], ARGV[1], ARGV[4]) end
return 1
"""
)

# KEYS: 6 data keys, tomb, [registry]. ARGV: now, tombstone ttl seconds, thread_id.
DELETE = """
for i = 1, 6 do redis.call('DEL', KEYS[i]) end
redis.call('SET', KEYS[7], ARGV[1], 'EX', ARGV[2])
if KEYS[8] then redis.call('ZREM', KEYS[8], ARGV[3]) end
return 1
"""

# KEYS: 6 data keys (target), tomb, [registry]. ARGV: now, ttl_ms, thread_id, then for
# cp, bl, wr in turn: a count and that many (field, value) pairs.
RESTORE = (
    _TTL
    + """
for i = 1, 6 do redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[7])
local at = 4
for _, k in ipairs({1, 3, 4}) do
  local n = tonumber(ARGV[at])
  at = at + 1
  for j = 0, n - 1 do
    redis.call('HSET', KEYS[k], ARGV[at], ARGV[at + 1])
    if k == 1 then redis.call('ZADD', KEYS[2], 0, ARGV[at]) end
    if k == 4 then redis.call('ZADD', KEYS[5], 0, ARGV[at]) end
    at = at + 2
  end
end
refresh_ttl(ARGV[2], ARGV[1])
if KEYS[8] then redis.call('ZADD', KEYS[8], ARGV[1], ARGV[3]) end
return 1
"""
)

# KEYS: 6 data keys. ARGV: n checkpoint members, members..., then blob fields.
REMOVE = """
local n = tonumber(ARGV[1])
for i = 2, n + 1 do
  local m = ARGV[i]
  redis.call('HDEL', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  local ws = redis.call('ZRANGEBYLEX', KEYS[5], '[' .. m .. '\\0', '[' .. m .. '\\0\\255')
  for _, w in ipairs(ws) do
    redis.call('HDEL', KEYS[4], w)
    redis.call('ZREM', KEYS[5], w)
  end
end
for i = n + 2, #ARGV do redis.call('HDEL', KEYS[3], ARGV[i]) end
return n
"""

# KEYS: 6 data keys. What retention planning needs, without the values: a count of
# checkpoints, then (member, JSON head) per checkpoint, then (field, kind base) per blob.
HEADS = (
    _HEAD
    + """
local out = {0}
local cps = redis.call('HGETALL', KEYS[1])
for i = 1, #cps, 2 do
  out[#out + 1] = cps[i]
  out[#out + 1] = head(cps[i + 1])
end
out[1] = #cps / 2
local fields = redis.call('HKEYS', KEYS[3])
for _, f in ipairs(fields) do
  out[#out + 1] = f
  out[#out + 1] = head(redis.call('HGET', KEYS[3], f))
end
return out
"""
)

# Follow a blob's delta chain to its full row: returns the records, requested one first.
_CHAIN = """
local function blob_chain(cns, ch, ver)
  local out = {}
  local field = cns .. '\\0' .. ch .. '\\0' .. ver
  for _ = 1, 5000 do
    local r = redis.call('HGET', KEYS[3], field)
    if not r then break end
    out[#out + 1] = r
    if string.sub(r, 1, 1) ~= 'd' then break end
    local stop = string.find(r, '\\0', 2, true)
    field = cns .. '\\0' .. ch .. '\\0' .. string.sub(r, 2, stop - 1)
  end
  return out
end
"""

# Append a checkpoint's pending writes to `out` as (field, record) pairs, in `wx` order.
_WRITES_OF = """
local function append_writes(m, out)
  local fields = redis.call('ZRANGEBYLEX', KEYS[5], '[' .. m .. '\\0', '[' .. m .. '\\0\\255')
  if #fields > 0 then
    local recs = redis.call('HMGET', KEYS[4], unpack(fields))
    for i, f in ipairs(fields) do
      if recs[i] then
        out[#out + 1] = f
        out[#out + 1] = recs[i]
      end
    end
  end
  return out
end
"""

# KEYS: 6 data keys. ARGV: cns, all namespaces ('1'/'0'), exact id, before id, limit (0: none),
# pushdown filter JSON ('' for none). Returns, newest first, per checkpoint:
# member, cp record (JSON head NUL msgpack), {channel, n records, records...},
# {field, record...}.
QUERY = (
    _HEAD
    + _CHAIN
    + _WRITES_OF
    + """
local cns, all_ns, exact, before = ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4]
local limit = tonumber(ARGV[5])
local filter = nil
if ARGV[6] ~= '' then filter = cjson.decode(ARGV[6]) end
local members
if exact ~= '' and not all_ns then
  members = {cns .. '\\0' .. exact}
elseif not all_ns then
  local hi = '[' .. cns .. '\\0\\255'
  if before ~= '' then hi = '(' .. cns .. '\\0' .. before end
  if filter == nil and limit > 0 then
    members = redis.call('ZREVRANGEBYLEX', KEYS[2], hi, '[' .. cns .. '\\0', 'LIMIT', 0, limit)
  else
    members = redis.call('ZREVRANGEBYLEX', KEYS[2], hi, '[' .. cns .. '\\0')
  end
else
  local all = redis.call('ZRANGE', KEYS[2], 0, -1)
  members = {}
  for _, m in ipairs(all) do
    local id = string.sub(m, string.find(m, '\\0', 1, true) + 1)
    if (exact == '' or id == exact) and (before == '' or id < before) then
      members[#members + 1] = m
    end
  end
  local function cid(m) return string.sub(m, string.find(m, '\\0', 1, true) + 1) end
  table.sort(members, function(a, b) return cid(a) > cid(b) end)
end
local out = {}
for _, m in ipairs(members) do
  if limit > 0 and #out >= limit then break end
  local rec = redis.call('HGET', KEYS[1], m)
  if rec then
    local info = cjson.decode(head(rec))
    local ok = true
    if filter ~= nil and type(info.m) == 'table' then
      for _, kv in ipairs(filter) do
        if info.m[kv[1]] ~= kv[2] then ok = false break end
      end
    end
    if ok then
      local ns = string.sub(m, 1, string.find(m, '\\0', 1, true) - 1)
      local blobs = {}
      for ch, ver in pairs(info.v) do
        local chain = blob_chain(ns, ch, ver)
        blobs[#blobs + 1] = ch
        blobs[#blobs + 1] = #chain
        for _, r in ipairs(chain) do blobs[#blobs + 1] = r end
      end
      out[#out + 1] = {m, rec, blobs, append_writes(m, {})}
    end
  end
end
return out
"""
)

# KEYS: 6 data keys. ARGV: cns, then (channel, version) pairs. Returns per pair: n, records.
BLOBS = (
    _CHAIN
    + """
local out = {}
for i = 2, #ARGV, 2 do
  local chain = blob_chain(ARGV[1], ARGV[i], ARGV[i + 1])
  out[#out + 1] = #chain
  for _, r in ipairs(chain) do out[#out + 1] = r end
end
return out
"""
)

# KEYS: 6 data keys. ARGV: start member. Returns (member, JSON head) up the parent chain.
CHAIN = (
    _HEAD
    + """
local out = {}
local m = ARGV[1]
local ns = string.sub(m, 1, string.find(m, '\\0', 1, true) - 1)
for _ = 1, 100000 do
  local rec = redis.call('HGET', KEYS[1], m)
  if not rec then break end
  local cj = head(rec)
  out[#out + 1] = m
  out[#out + 1] = cj
  local p = cjson.decode(cj).p
  if type(p) ~= 'string' then break end
  m = ns .. '\\0' .. p
end
return out
"""
)

# KEYS: 6 data keys. ARGV: checkpoint members. Returns (field, record) pairs, sorted per member.
WRITES = (
    _WRITES_OF
    + """
local out = {}
for _, m in ipairs(ARGV) do append_writes(m, out) end
return out
"""
)
