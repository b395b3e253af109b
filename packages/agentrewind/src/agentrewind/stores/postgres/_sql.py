"""SQL text of the PostgreSQL store, kept in one place.

`{s}` stands for the quoted schema name (`render` fills it in), so every table is
schema-qualified and nothing depends on the session's `search_path` (PgBouncer-safe).
Times are epoch seconds from the writer's clock, as in the SQLite store.
"""

from __future__ import annotations

from typing import Any

V1 = [
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.ar_runs (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        ttl DOUBLE PRECISION, expires_at DOUBLE PRECISION,
        metrics JSONB NOT NULL DEFAULT '{}'::jsonb,
        PRIMARY KEY (ns, run_id))""",
    "CREATE INDEX IF NOT EXISTS ar_runs_updated ON {s}.ar_runs (ns, updated_at)",
    "CREATE INDEX IF NOT EXISTS ar_runs_expires ON {s}.ar_runs (ns, expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS {s}.ar_steps (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, key TEXT NOT NULL, step_id TEXT NOT NULL,
        seq BIGINT NOT NULL, data BYTEA NOT NULL,
        PRIMARY KEY (ns, run_id, key))""",
    "CREATE INDEX IF NOT EXISTS ar_steps_id ON {s}.ar_steps (ns, run_id, step_id)",
    """CREATE TABLE IF NOT EXISTS {s}.ar_heads (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, branch TEXT NOT NULL, step_id TEXT NOT NULL,
        PRIMARY KEY (ns, run_id, branch))""",
    """CREATE TABLE IF NOT EXISTS {s}.ar_leases (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, owner TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (ns, run_id))""",
    # The fence for lease-checked writes: the first statement of a write transaction calls it.
    # It locks the lease row (FOR SHARE: a takeover waits for the write to commit) and raises
    # when `owner` no longer holds the lease, which rolls the whole transaction back.
    """CREATE OR REPLACE FUNCTION {s}.ar_fence(p_ns TEXT, p_run TEXT, p_owner TEXT)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM {s}.ar_leases
            WHERE ns = p_ns AND run_id = p_run AND owner = p_owner FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'agentrewind: lease of run % is no longer held by %', p_run, p_owner
                USING ERRCODE = 'P0001';
        END IF;
    END $$""",
]
NAMESPACE_SETTING = "agentrewind.namespace"
"""The setting each transaction of a row-level-security store starts with (`set_config(...,
true)`, local to the transaction); the policies below compare `ns` with it."""
_POLICY = f"""CREATE POLICY ar_namespace ON {{s}}.{{t}}
    USING (ns = current_setting('{NAMESPACE_SETTING}', true))
    WITH CHECK (ns = current_setting('{NAMESPACE_SETTING}', true))"""
RLS_TABLES = ["ar_runs", "ar_steps", "ar_heads", "ar_leases", "ar_channels"]
# Row-level security policies per namespace. They act only once row-level security is
# enabled on the tables (`PostgresStore(rls=True)` does it); the tables' owner and
# superusers bypass them, so give the application a role of its own.
V2 = [_POLICY.replace("{t}", t) for t in RLS_TABLES[:4]] + [
    # The lease fence: `ar_fence` and the expiry check in one call, run first in a fenced
    # write's statement (a data-modifying CTE, FENCE_CTE) or transaction (FENCE_LIVE).
    """CREATE OR REPLACE FUNCTION {s}.ar_fence_live(p_ns TEXT, p_run TEXT, p_owner TEXT,
        p_now DOUBLE PRECISION) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM {s}.ar_leases WHERE ns = p_ns AND run_id = p_run AND owner = p_owner
            AND expires_at > p_now FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'agentrewind: lease of run % is no longer held by %', p_run, p_owner
                USING ERRCODE = 'P0001';
        END IF;
    END $$""",
]
# Each step's index entry (`records.site_json` of its record, written with it): opening a long
# run reads these instead of every record (`LOAD_INDEX`). Rows written before stay NULL and
# are indexed from their records. (Adding a nullable column rewrites no row.)
V3 = ["ALTER TABLE {s}.ar_steps ADD COLUMN IF NOT EXISTS site TEXT"]
# Every policy (ours, the queue's, the cache's, the LangGraph saver's) asks one function
# whether a row's namespace is open to the current transaction, so the owner switches every
# table to role-keyed policies at once by replacing its body (`rls="role"`, see `_rls`).
# Plain mode: the namespace the transaction set. Role mode: that namespace, and only when
# `ar_tenants` binds it to the current role, which the client cannot change.
NAMESPACE_OK = "{s}.ar_namespace_ok(ns)"
_BY_SETTING = f"p_ns = current_setting('{NAMESPACE_SETTING}', true)"
OK_BY_SETTING = f"SELECT {_BY_SETTING}"
OK_BY_ROLE = f"""SELECT {_BY_SETTING} AND EXISTS (SELECT 1 FROM {{s}}.ar_tenants t
    WHERE t.ns = p_ns AND t.role = current_user)"""
NAMESPACE_OK_FUNCTION = """CREATE OR REPLACE FUNCTION {s}.ar_namespace_ok(p_ns TEXT)
    RETURNS boolean LANGUAGE sql STABLE AS $ar$ %s $ar$"""


def policy(name: str, table: str) -> str:
    """The namespace policy `name` on `table` (through `ar_namespace_ok`)."""
    return (
        f"CREATE POLICY {name} ON {{s}}.{table} USING ({NAMESPACE_OK}) WITH CHECK ({NAMESPACE_OK})"
    )


def repolicy(name: str, table: str) -> str:
    """`policy`, for a table whose policy `name` compared the setting directly (before V4)."""
    return (
        f"ALTER POLICY {name} ON {{s}}.{table} USING ({NAMESPACE_OK}) WITH CHECK ({NAMESPACE_OK})"
    )


V4 = [
    # Which roles may open which namespace in role mode; written by the owner only (no policy
    # lets anyone else write), each role reads only its own bindings.
    """CREATE TABLE IF NOT EXISTS {s}.ar_tenants (ns TEXT NOT NULL, role TEXT NOT NULL,
        PRIMARY KEY (ns, role))""",
    "ALTER TABLE {s}.ar_tenants ENABLE ROW LEVEL SECURITY",
    "DROP POLICY IF EXISTS ar_tenants_own ON {s}.ar_tenants",  # (a migration run again)
    "CREATE POLICY ar_tenants_own ON {s}.ar_tenants FOR SELECT USING (role = current_user)",
    "GRANT SELECT ON {s}.ar_tenants TO PUBLIC",
    # A secret per namespace, under the namespace policy: NOTIFY channel names are derived
    # from it, so only a role that can read the namespace can name (and LISTEN to) them.
    """CREATE TABLE IF NOT EXISTS {s}.ar_channels (ns TEXT PRIMARY KEY, secret TEXT NOT NULL)""",
    NAMESPACE_OK_FUNCTION % OK_BY_SETTING,
    "DROP POLICY IF EXISTS ar_namespace ON {s}.ar_channels",
    policy("ar_namespace", "ar_channels"),
] + [repolicy("ar_namespace", t) for t in ["ar_runs", "ar_steps", "ar_heads", "ar_leases"]]
MIGRATIONS: list[list[str]] = [V1, V2, V3, V4]
PG_SCHEMA_VERSION = len(MIGRATIONS)
"""Version of the PostgreSQL store's tables; a newer one is refused, an older one migrated."""

# A run whose TTL ran out but that `prune` has not purged yet must not come back to life when
# its id is written again (its steps would replay). Each write that can revive a run carries
# these CTEs: they delete the expired run's steps and heads, except the rows the write itself
# replaces (one statement may not touch a row twice), and the run row is reset by the upsert.
_EXPIRED = """x AS (SELECT run_id FROM {s}.ar_runs WHERE ns = %(ns)s
        AND run_id = ANY(%(runs)s) AND expires_at < %(now)s),
    ds AS (DELETE FROM {s}.ar_steps t USING x WHERE t.ns = %(ns)s AND t.run_id = x.run_id
        AND (t.run_id, t.key) NOT IN (SELECT * FROM unnest(%(runs_of)s::text[], %(keys)s::text[]))),
    dh AS (DELETE FROM {s}.ar_heads t USING x WHERE t.ns = %(ns)s AND t.run_id = x.run_id
        AND NOT (t.run_id = %(run)s AND t.branch = ANY(%(branches)s)))"""
_GONE = "r.expires_at < excluded.updated_at"
TOUCH_EVERY = 0.1
"""Seconds a run's `updated_at` may lag its last journal write (see TOUCH_RUNS)."""

RUN_COLUMNS = "run_id, status, created_at, updated_at, expires_at, metrics"
UPSERT_RUN = f"""WITH {_EXPIRED}
INSERT INTO {{s}}.ar_runs AS r (ns, run_id, status, created_at, updated_at, ttl, expires_at,
        metrics)
    VALUES (%(ns)s, %(run)s, 'running', %(now)s, %(now)s, %(ttl)s, %(now)s + %(ttl)s,
        jsonb_build_object('executions', %(count)s::int))
    ON CONFLICT (ns, run_id) DO UPDATE SET status = 'running', updated_at = excluded.updated_at,
        created_at = CASE WHEN {_GONE} THEN excluded.created_at ELSE r.created_at END,
        metrics = CASE WHEN {_GONE} THEN excluded.metrics ELSE jsonb_set(r.metrics,
            '{{executions}}', to_jsonb(coalesce((r.metrics->>'executions')::numeric, 0)
                                      + %(count)s::int)) END,
        ttl = coalesce(excluded.ttl, CASE WHEN {_GONE} THEN NULL ELSE r.ttl END),
        expires_at = excluded.updated_at
            + coalesce(excluded.ttl, CASE WHEN {_GONE} THEN NULL ELSE r.ttl END)
    RETURNING {RUN_COLUMNS}"""
# A journal write leaves the run's row alone (as on SQLite) when it was written less than
# 0.1 s ago (1% of its TTL if that is shorter) and is still the namespace's most recently
# updated run, so `list_runs` order is exact: the row's new version and its index entries
# would cost more than the step. An expired run is always reset.
TOUCH_RUNS = f"""INSERT INTO {{s}}.ar_runs AS r (ns, run_id, status, created_at, updated_at)
    SELECT %(ns)s, u, 'running', %(now)s, %(now)s FROM unnest(%(runs)s::text[]) AS u
    ON CONFLICT (ns, run_id) DO UPDATE SET updated_at = excluded.updated_at,
        status = CASE WHEN {_GONE} THEN 'running' ELSE r.status END,
        created_at = CASE WHEN {_GONE} THEN excluded.created_at ELSE r.created_at END,
        metrics = CASE WHEN {_GONE} THEN '{{}}'::jsonb ELSE r.metrics END,
        ttl = CASE WHEN {_GONE} THEN NULL ELSE r.ttl END,
        expires_at = CASE WHEN {_GONE} THEN NULL ELSE excluded.updated_at + r.ttl END
    WHERE {_GONE} OR NOT (excluded.updated_at - r.updated_at
            BETWEEN 0 AND least({TOUCH_EVERY}, coalesce(r.ttl / 100, {TOUCH_EVERY}))
        AND r.updated_at >= (SELECT max(updated_at) FROM {{s}}.ar_runs WHERE ns = %(ns)s))"""
# Adds the metrics field by field in SQL, so ending a run is one statement.
END_RUN = """INSERT INTO {s}.ar_runs AS r (ns, run_id, status, created_at, updated_at, metrics)
    VALUES (%(ns)s, %(run)s, %(status)s, %(now)s, %(now)s, %(metrics)s::jsonb)
    ON CONFLICT (ns, run_id) DO UPDATE SET status = %(status)s, updated_at = %(now)s,
        expires_at = %(now)s + r.ttl,
        metrics = (SELECT coalesce(jsonb_object_agg(coalesce(a.key, b.key),
                       coalesce(a.value::text::numeric, 0) + coalesce(b.value::text::numeric, 0)),
                       '{}'::jsonb)
                   FROM jsonb_each(r.metrics) a FULL JOIN jsonb_each(excluded.metrics) b
                   ON a.key = b.key)"""
SET_TTL = """INSERT INTO {s}.ar_runs AS r (ns, run_id, status, created_at, updated_at, ttl,
        expires_at)
    VALUES (%(ns)s, %(run)s, 'running', %(now)s, %(now)s, %(ttl)s, %(now)s + %(ttl)s)
    ON CONFLICT (ns, run_id) DO UPDATE SET updated_at = %(now)s, ttl = %(ttl)s,
        expires_at = %(now)s + %(ttl)s"""
GET_RUN = f"""SELECT {RUN_COLUMNS} FROM {{s}}.ar_runs WHERE ns = %s AND run_id = %s
    AND (expires_at IS NULL OR expires_at >= %s)"""
LIST_RUNS = f"""SELECT {RUN_COLUMNS} FROM {{s}}.ar_runs WHERE ns = %s
    AND (expires_at IS NULL OR expires_at >= %s) ORDER BY updated_at DESC LIMIT %s"""
# The run row goes last: `delete_run` reports its rowcount.
DELETE_RUN = [
    "DELETE FROM {s}.ar_leases WHERE ns = %(ns)s AND run_id = ANY(%(runs)s)",
    "DELETE FROM {s}.ar_steps WHERE ns = %(ns)s AND run_id = ANY(%(runs)s)",
    "DELETE FROM {s}.ar_heads WHERE ns = %(ns)s AND run_id = ANY(%(runs)s)",
    "DELETE FROM {s}.ar_runs WHERE ns = %(ns)s AND run_id = ANY(%(runs)s) RETURNING run_id",
]
EXPIRED_RUNS = """SELECT run_id FROM {s}.ar_runs WHERE ns = %s AND expires_at < %s"""

_UPSERT_STEPS = """INSERT INTO {s}.ar_steps (ns, run_id, key, step_id, seq, data, site)
    SELECT %(ns)s, * FROM unnest(%(runs_of)s::text[], %(keys)s::text[], %(ids)s::text[],
        %(seqs)s::bigint[], %(datas)s::bytea[], %(sites)s::text[])
    ON CONFLICT (ns, run_id, key) DO UPDATE SET
        step_id = excluded.step_id, seq = excluded.seq, data = excluded.data,
        site = excluded.site"""
_SET_HEADS = """INSERT INTO {s}.ar_heads (ns, run_id, branch, step_id)
    SELECT %(ns)s, %(run)s, * FROM unnest(%(branches)s::text[], %(heads)s::text[])
    ON CONFLICT (ns, run_id, branch) DO UPDATE SET step_id = excluded.step_id"""
UPSERT_STEPS = _UPSERT_STEPS
SET_HEADS = _SET_HEADS
# Steps, heads (an empty array moves none) and the runs' clocks in one statement.
PUT_STEPS = f"""WITH {_EXPIRED},
    st AS ({_UPSERT_STEPS}),
    hd AS ({_SET_HEADS})
{TOUCH_RUNS}"""
LOAD_STEPS = "SELECT key, data FROM {s}.ar_steps WHERE ns = %s AND run_id = %s ORDER BY seq"
GET_STEP = "SELECT key, data FROM {s}.ar_steps WHERE ns = %s AND run_id = %s AND step_id = %s"
# Opening a run (`_bulk.load_index`), one statement: each step's key, index entry and seq,
# and its record only where it has no entry (written before V3) or when the run is short
# (fewer than %(short)s steps: it opens with every record decoded).
LOAD_INDEX = """SELECT key, site, seq, CASE WHEN site IS NULL OR (SELECT count(*) < %(short)s
        FROM (SELECT 1 FROM {s}.ar_steps WHERE ns = %(ns)s AND run_id = %(run)s
            LIMIT %(short)s) n) THEN data END
    FROM {s}.ar_steps WHERE ns = %(ns)s AND run_id = %(run)s"""
# Tables before V3 (a read-only store leaves them as they are): every record.
LOAD_RECORDS = "SELECT key, data FROM {s}.ar_steps WHERE ns = %s AND run_id = %s"
LAST_STEP = """SELECT seq, step_id FROM {s}.ar_steps WHERE ns = %s AND run_id = %s
    ORDER BY seq DESC LIMIT 1"""
STEP_ID_BY_KEY = "SELECT step_id FROM {s}.ar_steps WHERE ns = %s AND run_id = %s AND key = %s"
STEP_BY_KEY = "SELECT data FROM {s}.ar_steps WHERE ns = %s AND run_id = %s AND key = %s"

DELETE_HEAD = "DELETE FROM {s}.ar_heads WHERE ns = %(ns)s AND run_id = %(run)s AND branch = %(b)s"
GET_HEADS = "SELECT branch, step_id FROM {s}.ar_heads WHERE ns = %s AND run_id = %s"

# Takes the lease when it is free, expired, ours, or held by `dead` (a dead process); else
# returns no row.
# Lease times are the server's (`clock_timestamp()`), as Redis's PX is: a client whose clock
# is off can neither hold a run longer nor take a live lease early.
NOW = "extract(epoch from clock_timestamp())"
TAKE_LEASE = """INSERT INTO {s}.ar_leases AS l (ns, run_id, owner, expires_at)
    VALUES (%(ns)s, %(run)s, %(owner)s, extract(epoch from clock_timestamp()) + %(ttl)s)
    ON CONFLICT (ns, run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
    WHERE l.owner = excluded.owner OR l.expires_at <= extract(epoch from clock_timestamp())
        OR l.owner = %(dead)s
    RETURNING owner"""
GET_LEASE = f"SELECT owner, expires_at, {NOW} FROM {{s}}.ar_leases WHERE ns = %s AND run_id = %s"
RELEASE_LEASE = "DELETE FROM {s}.ar_leases WHERE ns = %s AND run_id = %s AND owner = %s"
FENCE = "SELECT {s}.ar_fence(%(ns)s, %(run)s, %(owner)s)"
# `delete_run` without force, in its transaction: lock the lease row (waiting for a taker's
# write to commit), then, in a new snapshot that sees the latest lease, refuse a live one by
# calling `ar_fence` with an owner nobody has (it raises; the delete rolls back).
LOCK_LEASE = """SELECT 1 FROM {s}.ar_leases WHERE ns = %(ns)s AND run_id = %(run)s FOR UPDATE"""
LIVE_LEASE_REFUSES = """SELECT {s}.ar_fence(%(ns)s, %(run)s, '') FROM {s}.ar_leases
    WHERE ns = %(ns)s AND run_id = %(run)s AND expires_at > extract(epoch from clock_timestamp())
    AND owner <> %(dead)s"""

# The same for the runs of a bulk delete (`prune`).
LOCK_LEASES = """SELECT 1 FROM {s}.ar_leases WHERE ns = %(ns)s AND run_id = ANY(%(runs)s)
    FOR UPDATE"""
LIVE_LEASES_REFUSE = """SELECT {s}.ar_fence(%(ns)s, run_id, '') FROM {s}.ar_leases
    WHERE ns = %(ns)s AND run_id = ANY(%(runs)s) AND expires_at > extract(epoch from clock_timestamp())
    AND NOT (owner = ANY(%(dead)s::text[]))"""

LEASES = f"""SELECT run_id, owner, expires_at, {NOW} FROM {{s}}.ar_leases
    WHERE ns = %s AND run_id = ANY(%s)"""
RENEW = """UPDATE {s}.ar_leases SET expires_at = extract(epoch from clock_timestamp()) + %(ttl)s
    WHERE ns = %(ns)s AND run_id = %(run)s AND owner = %(owner)s
        AND expires_at > extract(epoch from clock_timestamp())
    RETURNING owner"""

# Data-modifying CTEs always run, to the end, whatever the statement reads: each inserts no
# row, but its condition calls the function (once), inside the statement's transaction.
FENCE_CTE = """ar_fenced AS (INSERT INTO {s}.ar_leases SELECT NULL, NULL, NULL, NULL
    WHERE {s}.ar_fence_live(%(ar_ns)s, %(ar_run)s, %(ar_owner)s,
        extract(epoch from clock_timestamp())) IS NULL)"""
# The same fence as a transaction's first statement (PostgresStore.fenced_in).
FENCE_LIVE = f"SELECT {{s}}.ar_fence_live(%(ar_ns)s, %(ar_run)s, %(ar_owner)s, {NOW})"
NOTIFY_CTE = """ar_notified AS (INSERT INTO {s}.ar_leases SELECT NULL, NULL, NULL, NULL
    WHERE pg_notify(%(ar_channel)s, %(ar_payload)s) IS NULL)"""


def render(text: Any, schema: str) -> Any:
    """`text` (a string or a list of strings) with `{s}` replaced by the quoted schema."""
    if isinstance(text, list):
        return [t.replace("{s}", schema) for t in text]
    return text.replace("{s}", schema)
