"""PostgreSQL row-level security per namespace (`rls=1`), under a real non-superuser role.

The role is created for the test and dropped after it; it does not own the tables, so the
policies bind it: another namespace's rows are invisible and unwritable, even to SQL of our
own through the store's connection.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import agentrewind
from agentrewind import Timeline
from agentrewind.errors import StoreError
from agentrewind.stores.cache import CacheEntry
from agentrewind.stores.queue import QueueEntry
from postgres_support import step as rec
from postgres_support import tenant_role

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


@pytest.fixture
def tenant(postgres_url: str) -> Iterator[tuple[str, str, str]]:
    """(owner's URL, tenant role's URL, schema): tables made by the owner, RLS enabled."""
    schema = f"rls_{uuid.uuid4().hex[:8]}"
    owner_url = f"{postgres_url}?schema={schema}&rls=1"
    agentrewind.connect(owner_url, namespace="admin").close()  # migrates, enables RLS
    with tenant_role(postgres_url, schema) as url:
        yield owner_url, f"{url}?schema={schema}", schema


def test_a_tenant_sees_and_writes_only_its_namespace(tenant: tuple[str, str, str]) -> None:
    _, url, schema = tenant
    a = agentrewind.connect(url, namespace="a")  # no rls=1: the tables have it on already
    b = agentrewind.connect(url, namespace="b")
    try:
        a.begin_run("r-a")
        a.put_step(rec("r-a", "k1", 1))
        b.begin_run("r-b")
        b.put_step(rec("r-b", "k1", 1))
        assert [r.run_id for r in a.list_runs()] == ["r-a"]
        assert a.get_run("r-b") is None and a.load_steps("r-b") == []
        assert a.delete_run("r-b", force=True) is False

        q = f'"{schema}"'

        def crafted(conn: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            # no namespace set (outside the store's transactions): nothing at all
            out["bare"] = conn.execute(f"SELECT count(*) FROM {q}.ar_steps").fetchone()[0]
            with a.db.transaction(conn):  # type: ignore[attr-defined]
                c = conn.execute
                out["all"] = c(f"SELECT DISTINCT ns FROM {q}.ar_steps").fetchall()
                out["other"] = c(f"SELECT count(*) FROM {q}.ar_runs WHERE ns = 'b'").fetchone()[0]
                out["update"] = c(f"UPDATE {q}.ar_steps SET data = '\\x00' WHERE ns = 'b'").rowcount
                out["delete"] = c(f"DELETE FROM {q}.ar_runs WHERE ns = 'b'").rowcount
            return out

        seen = a.db.call(crafted)  # type: ignore[attr-defined]
        assert seen == {"bare": 0, "all": [("a",)], "other": 0, "update": 0, "delete": 0}

        def insert_into_b(conn: Any) -> None:
            with a.db.transaction(conn):  # type: ignore[attr-defined]
                conn.execute(
                    f"INSERT INTO {q}.ar_heads (ns, run_id, branch, step_id)"
                    " VALUES ('b', 'r-b', 'evil', 'x')"
                )

        with pytest.raises(StoreError, match="violates row-level security policy"):
            a.db.call(insert_into_b)  # type: ignore[attr-defined]
        # b is untouched, and the setting did not outlive a transaction on the pooled connection
        assert [r.key for r in b.load_steps("r-b")] == ["k1"] and b.get_heads("r-b") == {}
        after = a.db.call(  # type: ignore[attr-defined]
            lambda conn: conn.execute(
                "SELECT coalesce(current_setting('agentrewind.namespace', true), '')"
            ).fetchone()[0]
        )
        assert after == ""
    finally:
        a.close()
        b.close()


def test_owner_bypasses_and_only_the_owner_can_enable(
    tenant: tuple[str, str, str], postgres_url: str
) -> None:
    owner_url, url, schema = tenant
    with agentrewind.connect(url, namespace="a") as a:
        a.begin_run("r-a")
    with agentrewind.connect(owner_url, namespace="admin") as admin:
        rows = admin.db.fetchall(f'SELECT DISTINCT ns FROM "{schema}".ar_runs')  # type: ignore[attr-defined]
        assert rows == [("a",)]  # the owner (a superuser here) sees every namespace
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".ar_steps DISABLE ROW LEVEL SECURITY')
    with pytest.raises(StoreError, match="cannot enable it"):
        agentrewind.connect(f"{url}&rls=1", namespace="a")


def _role(url: str) -> str:
    return str(urlsplit(url).username)


def _plant_b(url: str) -> None:
    """Tenant b's run, timeline, queue entry and cache entry, written through its own store."""
    with agentrewind.connect(url, namespace="b") as b:
        b.begin_run("r-b")
        b.put_step(rec("r-b", "k1", 1))
        Timeline("tl-b", store=b).checkpoint({"secret": "b"})
        b.queues.push(QueueEntry("q", "r-b"))
        b.cache.put("site", "key", CacheEntry(b"b's value"), ttl=None)


_B_TABLES = ["ar_runs", "ar_steps", "ar_heads", "ar_queue", "ar_cache", "ar_channels"]


def _crafted(store: Any, schema: str) -> dict[str, int]:
    """What `store`'s role reaches of namespace b with SQL of its own, setting the namespace."""
    q = f'"{schema}"'

    def reach(conn: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        with conn.transaction():
            conn.execute("SELECT set_config('agentrewind.namespace', 'b', true)")
            for t in _B_TABLES:
                out[t] = conn.execute(f"SELECT count(*) FROM {q}.{t} WHERE ns = 'b'").fetchone()[0]
            out["deleted"] = conn.execute(f"DELETE FROM {q}.ar_runs WHERE ns = 'b'").rowcount
            out["dequeued"] = conn.execute(f"DELETE FROM {q}.ar_queue WHERE ns = 'b'").rowcount
            conn.execute("ROLLBACK")  # (what a plain-mode tenant could delete: not kept)
        return out

    result: dict[str, int] = store.db.call(reach)
    return result


@pytest.mark.parametrize("mode", ["1", "role"])
def test_a_tenant_role_cannot_open_another_namespace_when_roles_are_bound(
    postgres_url: str, mode: str
) -> None:
    schema = f"rlsr_{uuid.uuid4().hex[:8]}"
    owner_url = f"{postgres_url}?schema={schema}&rls={mode}"
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(agentrewind.connect(owner_url, namespace="admin"))
        url_a = stack.enter_context(tenant_role(postgres_url, schema)) + f"?schema={schema}"
        url_b = stack.enter_context(tenant_role(postgres_url, schema)) + f"?schema={schema}"
        if mode == "role":
            assert admin.rls == "role"  # type: ignore[attr-defined]
            admin.bind_tenant(_role(url_a), "a")  # type: ignore[attr-defined]
            admin.bind_tenant(_role(url_b), "b")  # type: ignore[attr-defined]
        _plant_b(url_b)
        a = stack.enter_context(agentrewind.connect(url_a, namespace="a"))
        a.begin_run("r-a")
        reached = _crafted(a, schema)
        if mode == "1":
            # The limit of per-namespace mode, as documented: the client picks the namespace.
            assert all(n >= 1 for n in reached.values()), reached
            return
        assert reached == dict.fromkeys([*_B_TABLES, "deleted", "dequeued"], 0)
        with pytest.raises(StoreError, match="may not open namespace 'b'"):
            agentrewind.connect(url_a, namespace="b")
        with pytest.raises(StoreError, match="only the owner"):
            a.bind_tenant(_role(url_a), "b")  # type: ignore[attr-defined]
        # b's own role still reads all of it, unchanged
        with agentrewind.connect(url_b, namespace="b") as b:
            assert [r.key for r in b.load_steps("r-b")] == ["k1"]
            assert Timeline("tl-b", store=b).history()[0].state == {"secret": "b"}
            assert b.queues.entry("q", "r-b") is not None
            assert b.cache.get("site", "key") is not None
        # and an unbound namespace is refused to a role, but not to the owner
        with pytest.raises(StoreError, match="has not bound this one"):
            agentrewind.connect(url_b, namespace="c")
        admin.bind_tenant(_role(url_a), "a", bound=False)  # type: ignore[attr-defined]
        with pytest.raises(StoreError, match="may not open namespace 'a'"):
            agentrewind.connect(url_a, namespace="a")
