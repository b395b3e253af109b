"""Row-level security of a PostgreSQL store: per namespace (`rls=1`) or bound to roles.

`rls=1`: each transaction sets `agentrewind.namespace` and the policies admit the rows of
that namespace. The client chooses the setting, so any role that can run SQL can open any
namespace: it keeps honest code honest, it does not isolate tenants from each other.

`rls="role"` (the tables' owner, once): the policies also require that the owner bound the
namespace to the current database role (a row of `ar_tenants`, which no other role can
write), so a tenant's own role cannot open another tenant's namespace whatever it sets.
Every table's policy calls `ar_namespace_ok(ns)`; switching modes replaces its body.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import psycopg

from ...errors import StoreConfigError, StoreError
from . import _sql as Q

__all__ = ["apply", "bind_tenant", "channel_secret", "enable_on", "parse", "row_security"]

_MODE = """SELECT set_config(%(setting)s, %(ns)s, true), {s}.ar_namespace_ok(%(ns)s),
    coalesce((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user), false)
    OR pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = %(table)s::regclass),
        'MEMBER'),
    position('ar_tenants' in (SELECT prosrc FROM pg_proc
        WHERE oid = %(fn)s::regprocedure)) > 0, current_user"""


def parse(value: Any) -> bool | str:
    """The `rls` option: False, True, or `"role"` (URL: `rls=1`, `rls=role`)."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low == "role":
            return "role"
        return low not in ("0", "false", "off", "no", "")
    if value in (True, False, None):
        return bool(value)
    raise StoreConfigError(f"rls must be False, True or 'role', not {value!r}")


def apply(store: Any, rls: bool | str) -> None:
    """Enable row-level security as `rls` asks (the owner) and check what this role may open.

    Raises:
        StoreError: Not the owner and asked to enable (or to bind roles), or role mode is on
            and the owner has not bound this store's namespace to this role.
    """
    db = store.db
    if rls == "role":
        fn = store.render(Q.NAMESPACE_OK_FUNCTION % Q.OK_BY_ROLE)
        try:
            db.call(lambda conn: conn.execute(fn))
        except StoreError as exc:
            raise StoreError(
                f"rls='role' needs the owner of the agentrewind tables in schema "
                f"{store.schema!r} (this role cannot replace ar_namespace_ok): {exc}"
            ) from exc
    store.rls = False
    if not db.row_security(store.schema, Q.RLS_TABLES, enable=bool(rls)):
        return
    db.settings[Q.NAMESPACE_SETTING] = store.namespace
    if rls and not store.read_only:  # the owner: tables a tenant will find under the policies
        store._open_queues()._tables()
        store._open_cache()._tables()
    args = {
        "setting": Q.NAMESPACE_SETTING,
        "ns": store.namespace,
        "table": store.render("{s}.ar_runs"),
        "fn": store.render("{s}.ar_namespace_ok(text)"),
    }

    def mode(conn: Any) -> Any:
        with conn.transaction():
            return conn.execute(store.render(_MODE), args).fetchone()

    _, ok, bypass, by_role, role = db.call(mode)
    store.rls = "role" if by_role else True
    if not ok and not bypass:
        raise StoreError(
            f"PostgreSQL at {store.url}: role {role!r} may not open namespace "
            f"{store.namespace!r}: row-level security binds namespaces to roles in schema "
            f"{store.schema!r}, and the tables' owner has not bound this one to this role "
            f"(store.bind_tenant({role!r}, {store.namespace!r}) as the owner); nothing was read"
        )


def enable_on(store: Any, tables: Sequence[str]) -> None:
    """Row-level security on more of the store's tables (the queue's, the cache's) when on."""
    if Q.NAMESPACE_SETTING in store.db.settings:
        store.db.row_security(store.schema, tables, enable=True)


def bind_tenant(store: Any, role: str, namespace: str, *, bound: bool = True) -> None:
    """Bind (or unbind) `namespace` to database role `role` in role mode (the owner only)."""
    sql = (
        "INSERT INTO {s}.ar_tenants (ns, role) VALUES (%s, %s) ON CONFLICT DO NOTHING"
        if bound
        else "DELETE FROM {s}.ar_tenants WHERE ns = %s AND role = %s"
    )
    try:
        store.write([(store.render(sql), (namespace, role))])
    except StoreError as exc:
        raise StoreError(
            f"only the owner of the agentrewind tables binds namespaces to roles: {exc}"
        ) from exc


_SECRET = """WITH new AS (INSERT INTO {s}.ar_channels (ns, secret) VALUES (%(ns)s, %(secret)s)
        ON CONFLICT (ns) DO NOTHING RETURNING secret)
    SELECT secret FROM new UNION ALL SELECT secret FROM {s}.ar_channels WHERE ns = %(ns)s"""


def channel_secret(store: Any) -> str:
    """The namespace's secret for NOTIFY channel names (made on first use).

    It is read under the namespace's policy: a role that cannot read the namespace cannot
    compute its channel names.
    """
    args = {"ns": store.namespace, "secret": secrets.token_hex(16)}
    # (a read-only store makes it too when none exists yet: it is no user data, and a
    # subscriber may come before the first publisher)
    write = store.db.run if store.read_only else store.write
    for _ in range(2):  # (empty once: a concurrent first writer committed after our snapshot)
        try:
            rows = write([(store.render(_SECRET), args)], fetch=0)
        except StoreError as exc:
            raise StoreError(
                f"namespace {store.namespace!r}: its channel secret (table ar_channels) could "
                f"not be read or made: {exc}"
            ) from exc
        if rows:
            return str(rows[0][0])
    raise StoreError(f"namespace {store.namespace!r}: its channel secret could not be read")


def row_security(db: Any, schema: str, tables: Sequence[str], *, enable: bool) -> bool:
    """Whether row-level security is on for `tables` of `schema`; `enable` turns it on.

    Enabling needs the tables' owner: another role gets a `StoreError` saying so.
    """

    def check(conn: Any) -> bool:
        with conn.transaction():
            rows = conn.execute(
                "SELECT c.relname, c.relrowsecurity FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)",
                (schema, list(tables)),
            ).fetchall()
            off = [name for name, on in rows if not on]
            if not off or not enable:
                return len(off) < len(rows)
            for name in off:
                try:
                    with conn.transaction():
                        conn.execute(f'ALTER TABLE "{schema}"."{name}" ENABLE ROW LEVEL SECURITY')
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise StoreError(
                        f"row-level security is not enabled on {schema}.{name}, and this "
                        "role cannot enable it: open the store once with rls=1 as the "
                        "tables' owner"
                    ) from exc
            return True

    return bool(db.call(check))
