"""PostgreSQL row-level security per namespace (`rls=1`), under a real non-superuser role.

The role is created for the test and dropped after it; it does not own the tables, so the
policies bind it: another namespace's rows are invisible and unwritable, even to SQL of our
own through the store's connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import agentrewind
from agentrewind.errors import StoreError
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
