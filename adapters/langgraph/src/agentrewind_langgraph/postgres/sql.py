"""SQL text of the PostgreSQL backend of `RewindSaver`, kept in one place.

Tables carry the prefix `lg_` and live next to the core's `ar_` tables in the store's schema;
`{s}` stands for the quoted schema name. `ns` is the agentrewind store namespace; `cns` is
LangGraph's `checkpoint_ns`. Each write is one statement (data-modifying CTEs), so it is one
round trip and one transaction; the latest checkpoint with its values and writes is one
statement too, by primary key, so its cost does not grow with the thread's history.
"""

from __future__ import annotations

SCHEMA_VERSION = 3
"""Version of the `lg_` tables; a newer one is refused, an older one migrated forward."""

V1 = [
    "CREATE SCHEMA IF NOT EXISTS {s}",
    # One row per checkpoint, without its channel values (those are in lg_blobs). `versions`
    # is jsonb so a read joins the values by primary key in SQL. `metadata` is the JSON form
    # (GIN-indexed for filters); NULL when the metadata needs LangGraph's serde (`md_blob`).
    """CREATE TABLE IF NOT EXISTS {s}.lg_checkpoints (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        parent_id TEXT, run_id TEXT, cp_type TEXT NOT NULL, checkpoint BYTEA NOT NULL,
        versions JSONB NOT NULL, metadata JSONB, md_type TEXT NOT NULL, md_blob BYTEA,
        PRIMARY KEY (ns, thread_id, cns, checkpoint_id))""",
    "CREATE INDEX IF NOT EXISTS lg_checkpoints_md ON {s}.lg_checkpoints USING gin (metadata jsonb_path_ops)",
    "CREATE INDEX IF NOT EXISTS lg_checkpoints_md_null ON {s}.lg_checkpoints (ns, checkpoint_id) WHERE metadata IS NULL",
    # One row per (channel, version): kind 'f' full value, 'd' items appended to `base`.
    # `n` = items in the row for list values.
    """CREATE TABLE IF NOT EXISTS {s}.lg_blobs (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, channel TEXT NOT NULL,
        version TEXT NOT NULL, kind TEXT NOT NULL, base TEXT, n INTEGER NOT NULL DEFAULT 0,
        type TEXT NOT NULL, value BYTEA,
        PRIMARY KEY (ns, thread_id, cns, channel, version))""",
    """CREATE TABLE IF NOT EXISTS {s}.lg_writes (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL, idx INTEGER NOT NULL, task_path TEXT NOT NULL DEFAULT '',
        channel TEXT NOT NULL, type TEXT NOT NULL, value BYTEA,
        PRIMARY KEY (ns, thread_id, cns, checkpoint_id, task_id, idx))""",
    """CREATE TABLE IF NOT EXISTS {s}.lg_threads (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, ttl DOUBLE PRECISION, expires_at DOUBLE PRECISION,
        PRIMARY KEY (ns, thread_id))""",
    "CREATE INDEX IF NOT EXISTS lg_threads_updated ON {s}.lg_threads (ns, updated_at)",
    "CREATE INDEX IF NOT EXISTS lg_threads_expires ON {s}.lg_threads (expires_at) WHERE expires_at IS NOT NULL",
    # Deleted threads: a late write of the deleted history must not bring the thread back.
    """CREATE TABLE IF NOT EXISTS {s}.lg_tombstones (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, deleted_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (ns, thread_id))""",
    """CREATE TABLE IF NOT EXISTS {s}.lg_runs (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, thread_id TEXT NOT NULL,
        PRIMARY KEY (ns, run_id, thread_id))""",
    "CREATE INDEX IF NOT EXISTS lg_runs_thread ON {s}.lg_runs (ns, thread_id)",
]
NAMESPACE_SETTING = "agentrewind.namespace"
"""The core store's setting for row-level security (`agentrewind.stores.postgres._sql`)."""
RLS_TABLES = ["lg_checkpoints", "lg_blobs", "lg_writes", "lg_threads", "lg_tombstones", "lg_runs"]
# Row-level security policies per namespace, as on the core store's tables: they act once
# row-level security is enabled (a store opened with `rls=1` does it).
V2 = [
    f"""CREATE POLICY lg_namespace ON {{s}}.{t}
    USING (ns = current_setting('{NAMESPACE_SETTING}', true))
    WITH CHECK (ns = current_setting('{NAMESPACE_SETTING}', true))"""
    for t in RLS_TABLES
] + [
    # Metadata filters scan the GIN index's pending list in full (up to 4 MB: 7 ms on 100,000
    # checkpoints instead of 0.4 ms): each insert goes into the index itself instead.
    "ALTER INDEX {s}.lg_checkpoints_md SET (fastupdate = off)",
    "SELECT gin_clean_pending_list('{s}.lg_checkpoints_md'::regclass)",
]
# The policies ask the core store's `ar_namespace_ok(ns)` (its migration 4), as every agentrewind
# table's do: the owner's `rls="role"` then binds the saver's namespaces to roles too.
V3 = [
    f"""ALTER POLICY lg_namespace ON {{s}}.{t} USING ({{s}}.ar_namespace_ok(ns))
    WITH CHECK ({{s}}.ar_namespace_ok(ns))"""
    for t in RLS_TABLES
]
MIGRATIONS: list[list[str]] = [V1, V2, V3]

# -- writes ------------------------------------------------------------------------------------
_TOMB = """tomb AS (SELECT deleted_at FROM {s}.lg_tombstones
    WHERE ns = %(ns)s AND thread_id = %(tid)s AND deleted_at > %(since)s)"""
_TOUCH = """th AS (INSERT INTO {s}.lg_threads AS t (ns, thread_id, created_at, updated_at, ttl,
        expires_at)
    SELECT %(ns)s, %(tid)s, %(now)s, %(now)s, %(ttl)s, %(now)s + %(ttl)s FROM ok WHERE ok.v
    ON CONFLICT (ns, thread_id) DO UPDATE SET updated_at = excluded.updated_at,
        ttl = coalesce(excluded.ttl, t.ttl), expires_at = excluded.updated_at + coalesce(excluded.ttl, t.ttl)
    WHERE %(touch)s OR EXISTS (SELECT 1 FROM tomb))"""
# The changed values of a put, and the deltas among them whose base row is gone.
_VALUES = """b AS (SELECT * FROM unnest(%(b_ch)s::text[], %(b_ver)s::text[], %(b_kind)s::text[],
        %(b_base)s::text[], %(b_n)s::int[], %(b_type)s::text[], %(b_val)s::bytea[])
        WITH ORDINALITY AS b(channel, version, kind, base, n, type, value, i)),
missing AS (SELECT b.i FROM b WHERE b.kind = 'd' AND NOT EXISTS (SELECT 1 FROM {s}.lg_blobs x
    WHERE x.ns = %(ns)s AND x.thread_id = %(tid)s AND x.cns = %(cns)s AND x.channel = b.channel
        AND x.version = b.base))"""
_STORE = """cp AS (INSERT INTO {s}.lg_checkpoints (ns, thread_id, cns, checkpoint_id, parent_id, run_id,
        cp_type, checkpoint, versions, metadata, md_type, md_blob)
    SELECT %(ns)s, %(tid)s, %(cns)s, %(cid)s, %(parent)s, %(run)s, %(cp_type)s, %(cp)s,
        %(versions)s::jsonb, %(md)s::jsonb, %(md_type)s, %(md_blob)s FROM ok WHERE ok.v
    ON CONFLICT (ns, thread_id, cns, checkpoint_id) DO UPDATE SET parent_id = excluded.parent_id,
        run_id = excluded.run_id, cp_type = excluded.cp_type, checkpoint = excluded.checkpoint,
        versions = excluded.versions, metadata = excluded.metadata, md_type = excluded.md_type,
        md_blob = excluded.md_blob),
bl AS (INSERT INTO {s}.lg_blobs (ns, thread_id, cns, channel, version, kind, base, n, type, value)
    SELECT %(ns)s, %(tid)s, %(cns)s, b.channel, b.version, b.kind, b.base, b.n, b.type, b.value
    FROM b, ok WHERE ok.v
    ON CONFLICT (ns, thread_id, cns, channel, version) DO UPDATE SET kind = excluded.kind,
        base = excluded.base, n = excluded.n, type = excluded.type, value = excluded.value)"""
# The checkpoint, its changed values, its run and the thread's clock in one statement. It
# writes nothing when the thread was deleted after this write's history began (a late write),
# or when a delta's base row is gone; then it returns the indexes of those deltas so the
# caller sends them whole.
PUT = f"""WITH {_VALUES},
{_TOMB},
ok AS (SELECT NOT EXISTS (SELECT 1 FROM missing) AND NOT EXISTS (SELECT 1 FROM tomb
    WHERE %(ts)s <= tomb.deleted_at OR (%(parent)s::text IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM {{s}}.lg_checkpoints p WHERE p.ns = %(ns)s AND p.thread_id = %(tid)s
            AND p.cns = %(cns)s AND p.checkpoint_id = %(parent)s))) AS v),
{_STORE},
rn AS (INSERT INTO {{s}}.lg_runs (ns, run_id, thread_id)
    SELECT %(ns)s, %(run)s, %(tid)s FROM ok WHERE ok.v AND %(run)s::text IS NOT NULL
    ON CONFLICT DO NOTHING),
{_TOUCH},
tb AS (DELETE FROM {{s}}.lg_tombstones WHERE ns = %(ns)s AND thread_id = %(tid)s
    AND (SELECT v FROM ok))
SELECT ok.v, ARRAY(SELECT i FROM missing) FROM ok"""
# The put of a thread this process wrote recently (its row is fresh, its run recorded): the
# checkpoint and its values only, still refused under any live tombstone (then `PUT` decides).
# Skipping the thread row matters: an upsert that updates nothing still locks the row.
PUT_KNOWN = f"""WITH {_VALUES},
ok AS (SELECT NOT EXISTS (SELECT 1 FROM missing) AND NOT EXISTS (SELECT 1
    FROM {{s}}.lg_tombstones WHERE ns = %(ns)s AND thread_id = %(tid)s
        AND deleted_at > %(since)s) AS v),
{_STORE}
SELECT ok.v, ARRAY(SELECT i FROM missing) FROM ok"""


def _writes(cid: str, ok: str) -> str:
    """Storing `w`'s pending writes for checkpoint `cid` when `ok`.v.

    Special writes (idx < 0) replace, regular ones keep the first.
    """
    return f"""keep AS (INSERT INTO {{s}}.lg_writes (ns, thread_id, cns, checkpoint_id, task_id,
        idx, task_path, channel, type, value)
    SELECT %(ns)s, %(tid)s, %(cns)s, {cid}, w.* FROM w, {ok} WHERE {ok}.v AND w.idx >= 0
    ON CONFLICT DO NOTHING),
repl AS (INSERT INTO {{s}}.lg_writes (ns, thread_id, cns, checkpoint_id, task_id, idx, task_path,
        channel, type, value)
    SELECT %(ns)s, %(tid)s, %(cns)s, {cid}, w.* FROM w, {ok} WHERE {ok}.v AND w.idx < 0
    ON CONFLICT (ns, thread_id, cns, checkpoint_id, task_id, idx) DO UPDATE SET
        task_path = excluded.task_path, channel = excluded.channel, type = excluded.type,
        value = excluded.value)"""


def _writes_ok(cid: str, name: str) -> str:
    """Whether pending writes for checkpoint `cid` are stored (`name`.v).

    Not under a live tombstone, unless their checkpoint exists (the thread was written again).
    """
    return f"""{name} AS (SELECT NOT EXISTS (SELECT 1 FROM tomb) OR EXISTS (SELECT 1
    FROM {{s}}.lg_checkpoints p WHERE p.ns = %(ns)s AND p.thread_id = %(tid)s AND p.cns = %(cns)s
        AND p.checkpoint_id = {cid}) AS v)"""


_WRITES = _writes("%(cid)s", "ok")


def _unnest_writes(p: str) -> str:
    """`w`: the pending writes passed as arrays (parameters `task`, `idx`... prefixed `p`)."""
    return f"""w AS (SELECT * FROM unnest(%({p}task)s::text[], %({p}idx)s::int[],
        %({p}path)s::text[], %({p}ch)s::text[], %({p}type)s::text[], %({p}val)s::bytea[])
        AS w(task_id, idx, task_path, channel, type, value))"""


_W = _unnest_writes("")
_WRITES_OK = _writes_ok("%(cid)s", "ok")
PUT_WRITES = f"""WITH {_W},
{_TOMB},
{_WRITES_OK},
{_WRITES},
{_TOUCH}
SELECT ok.v FROM ok"""
# The writes of a task on a thread this process wrote recently: no thread row (see PUT_KNOWN).
PUT_WRITES_KNOWN = f"""WITH {_W},
{_TOMB},
{_WRITES_OK},
{_WRITES}
SELECT ok.v FROM ok"""
# `PUT_KNOWN` carrying the pending writes held for its parent (`w_cid`, see `_defer`): one
# statement, so one implicit transaction with no settings prefix and no pipeline. The writes
# have their own condition (`wok`, as `PUT_WRITES`): a put refused for a missing delta base
# is sent again alone, its writes already stored.
PUT_KNOWN_WRITES = f"""WITH {_VALUES},
{_unnest_writes("w_")},
{_TOMB},
ok AS (SELECT NOT EXISTS (SELECT 1 FROM missing) AND NOT EXISTS (SELECT 1 FROM tomb) AS v),
{_writes_ok("%(w_cid)s", "wok")},
{_STORE},
{_writes("%(w_cid)s", "wok")}
SELECT ok.v, ARRAY(SELECT i FROM missing) FROM ok"""

DELETE_THREAD = [
    "DELETE FROM {s}.lg_checkpoints WHERE ns = %(ns)s AND thread_id = %(tid)s",
    "DELETE FROM {s}.lg_blobs WHERE ns = %(ns)s AND thread_id = %(tid)s",
    "DELETE FROM {s}.lg_writes WHERE ns = %(ns)s AND thread_id = %(tid)s",
    "DELETE FROM {s}.lg_threads WHERE ns = %(ns)s AND thread_id = %(tid)s",
    "DELETE FROM {s}.lg_runs WHERE ns = %(ns)s AND thread_id = %(tid)s",
]
SET_TOMBSTONE = """INSERT INTO {s}.lg_tombstones (ns, thread_id, deleted_at)
    VALUES (%(ns)s, %(tid)s, %(now)s)
    ON CONFLICT (ns, thread_id) DO UPDATE SET deleted_at = excluded.deleted_at"""
CLEAR_TOMBSTONE = "DELETE FROM {s}.lg_tombstones WHERE ns = %(ns)s AND thread_id = %(tid)s"
TOUCH_THREAD = """INSERT INTO {s}.lg_threads AS t (ns, thread_id, created_at, updated_at, ttl,
        expires_at)
    VALUES (%(ns)s, %(tid)s, %(now)s, %(now)s, %(ttl)s, %(now)s + %(ttl)s)
    ON CONFLICT (ns, thread_id) DO UPDATE SET updated_at = excluded.updated_at,
        ttl = coalesce(excluded.ttl, t.ttl), expires_at = excluded.updated_at + coalesce(excluded.ttl, t.ttl)"""
COPY_THREAD = [
    """INSERT INTO {s}.lg_checkpoints SELECT ns, %(tid)s, cns, checkpoint_id, parent_id, run_id,
        cp_type, checkpoint, versions, metadata, md_type, md_blob
        FROM {s}.lg_checkpoints WHERE ns = %(ns)s AND thread_id = %(src)s""",
    """INSERT INTO {s}.lg_blobs SELECT ns, %(tid)s, cns, channel, version, kind, base, n, type,
        value FROM {s}.lg_blobs WHERE ns = %(ns)s AND thread_id = %(src)s""",
    """INSERT INTO {s}.lg_writes SELECT ns, %(tid)s, cns, checkpoint_id, task_id, idx,
        task_path, channel, type, value FROM {s}.lg_writes WHERE ns = %(ns)s AND thread_id = %(src)s""",
    """INSERT INTO {s}.lg_runs SELECT DISTINCT ns, run_id, %(tid)s FROM {s}.lg_checkpoints
        WHERE ns = %(ns)s AND thread_id = %(src)s AND run_id IS NOT NULL ON CONFLICT DO NOTHING""",
]
DELETE_CHECKPOINTS = [
    """DELETE FROM {s}.lg_checkpoints WHERE ns = %(ns)s AND thread_id = %(tid)s
        AND (cns, checkpoint_id) IN (SELECT * FROM unnest(%(cns)s::text[], %(cids)s::text[]))""",
    """DELETE FROM {s}.lg_writes WHERE ns = %(ns)s AND thread_id = %(tid)s
        AND (cns, checkpoint_id) IN (SELECT * FROM unnest(%(cns)s::text[], %(cids)s::text[]))""",
]
DELETE_BLOBS = """DELETE FROM {s}.lg_blobs WHERE ns = %(ns)s AND thread_id = %(tid)s
    AND (cns, channel, version) IN (SELECT * FROM unnest(%(b_cns)s::text[], %(b_ch)s::text[],
        %(b_ver)s::text[]))"""
EXPIRED_THREADS = """SELECT ns, thread_id FROM {s}.lg_threads WHERE expires_at < %(now)s
    FOR UPDATE SKIP LOCKED"""
PURGE_TOMBSTONES = "DELETE FROM {s}.lg_tombstones WHERE deleted_at < %(since)s"

# -- reads -------------------------------------------------------------------------------------
LIVE = """NOT EXISTS (SELECT 1 FROM {s}.lg_threads t WHERE t.ns = c.ns AND t.thread_id = c.thread_id
    AND t.expires_at < %(now)s)"""
# Checkpoints with their values (delta rows followed to their full base, in SQL) and their
# pending writes; `{inner}` is `SELECT_CHECKPOINTS` with its conditions, filled in by the backend.
QUERY = """SELECT c.thread_id, c.cns, c.checkpoint_id, c.parent_id, c.cp_type, c.checkpoint,
    c.versions::text, c.metadata::text, c.md_type, c.md_blob,
    bl.ch, bl.kind, bl.n, bl.type, bl.value, wr.task, wr.ch, wr.type, wr.value
FROM ({inner}) c
LEFT JOIN LATERAL (
    WITH RECURSIVE chain(wc, depth, kind, base, n, type, value) AS (
        SELECT b.channel, 0, b.kind, b.base, b.n, b.type, b.value
        FROM jsonb_each_text(c.versions) v CROSS JOIN LATERAL (
            -- LIMIT 1 keeps this a primary-key lookup per channel (never a scan of the
            -- thread's values), whatever the planner estimates
            SELECT * FROM {s}.lg_blobs b WHERE b.ns = c.ns AND b.thread_id = c.thread_id
                AND b.cns = c.cns AND b.channel = v.key AND b.version = v.value LIMIT 1) b
        UNION ALL
        SELECT ch.wc, ch.depth + 1, b.kind, b.base, b.n, b.type, b.value
        FROM chain ch CROSS JOIN LATERAL (
            SELECT * FROM {s}.lg_blobs b WHERE b.ns = c.ns AND b.thread_id = c.thread_id
                AND b.cns = c.cns AND b.channel = ch.wc AND b.version = ch.base LIMIT 1) b
        WHERE ch.kind = 'd')
    SELECT array_agg(wc) ch, array_agg(kind) kind, array_agg(n) n, array_agg(type) type,
        array_agg(value) value
    FROM (SELECT * FROM chain ORDER BY wc, depth) o) bl ON true
LEFT JOIN LATERAL (
    SELECT array_agg(task_id) task, array_agg(channel) ch, array_agg(type) type,
        array_agg(value) value
    FROM (SELECT * FROM {s}.lg_writes w WHERE w.ns = c.ns AND w.thread_id = c.thread_id
        AND w.cns = c.cns AND w.checkpoint_id = c.checkpoint_id
        ORDER BY w.task_path, w.task_id, w.idx) o) wr ON true
ORDER BY c.checkpoint_id DESC"""
SELECT_CHECKPOINTS = """SELECT * FROM {s}.lg_checkpoints c WHERE c.ns = %(ns)s AND {live} {where}
    ORDER BY c.checkpoint_id DESC {limit}"""

# Values of (channel, version) pairs, each followed to its full base:
# (want_channel, want_version, depth, kind, n, type, value).
BLOB_CHAIN = """WITH RECURSIVE want(channel, version) AS (
    SELECT * FROM unnest(%(chs)s::text[], %(vers)s::text[])),
chain(wc, wv, depth, kind, base, n, type, value) AS (
    SELECT b.channel, b.version, 0, b.kind, b.base, b.n, b.type, b.value
    FROM want w JOIN {s}.lg_blobs b ON b.ns = %(ns)s AND b.thread_id = %(tid)s AND b.cns = %(cns)s
        AND b.channel = w.channel AND b.version = w.version
    UNION ALL
    SELECT c.wc, c.wv, c.depth + 1, b.kind, b.base, b.n, b.type, b.value
    FROM chain c JOIN {s}.lg_blobs b ON b.ns = %(ns)s AND b.thread_id = %(tid)s AND b.cns = %(cns)s
        AND b.channel = c.wc AND b.version = c.base
    WHERE c.kind = 'd')
SELECT wc, wv, depth, kind, n, type, value FROM chain"""
WRITES_FOR = """SELECT checkpoint_id, task_id, channel, type, value FROM {s}.lg_writes
    WHERE ns = %(ns)s AND thread_id = %(tid)s AND cns = %(cns)s AND checkpoint_id = ANY(%(cids)s)
    ORDER BY checkpoint_id, task_path, task_id, idx"""
PARENT_CHAIN = """WITH RECURSIVE chain(checkpoint_id, parent_id, versions, depth) AS (
    SELECT checkpoint_id, parent_id, versions, 0 FROM {s}.lg_checkpoints
    WHERE ns = %(ns)s AND thread_id = %(tid)s AND cns = %(cns)s AND checkpoint_id = %(cid)s
    UNION ALL
    SELECT c.checkpoint_id, c.parent_id, c.versions, chain.depth + 1
    FROM chain JOIN {s}.lg_checkpoints c ON c.ns = %(ns)s AND c.thread_id = %(tid)s
        AND c.cns = %(cns)s AND c.checkpoint_id = chain.parent_id)
SELECT checkpoint_id, parent_id, versions::text FROM chain ORDER BY depth"""
THREAD_IDS = "SELECT DISTINCT thread_id FROM {s}.lg_checkpoints WHERE ns = %(ns)s"
LIST_THREADS = """SELECT thread_id, created_at, updated_at, expires_at FROM {s}.lg_threads
    WHERE ns = %(ns)s AND (expires_at IS NULL OR expires_at >= %(now)s)
    ORDER BY updated_at DESC LIMIT %(limit)s"""
THREAD_CHECKPOINTS = """SELECT cns, checkpoint_id, parent_id, versions::text, run_id
    FROM {s}.lg_checkpoints WHERE ns = %(ns)s AND thread_id = %(tid)s FOR UPDATE"""
THREAD_BLOB_KEYS = """SELECT cns, channel, version, kind, base FROM {s}.lg_blobs
    WHERE ns = %(ns)s AND thread_id = %(tid)s"""
RUN_THREADS = """SELECT DISTINCT thread_id FROM {s}.lg_runs
    WHERE ns = %(ns)s AND run_id = ANY(%(runs)s)"""
