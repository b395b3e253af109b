"""A scratch PostgreSQL database per test session: unique name, dropped at the end.

A module with a unique name (not a conftest) so every test folder can import it. The server
comes from $AGENTREWIND_TEST_POSTGRES (default postgresql://postgres@127.0.0.1:5432/postgres);
only databases this module creates are ever touched.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from agentrewind import StepRecord

POSTGRES_URL = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def postgres_required() -> bool:
    return os.environ.get("AGENTREWIND_REQUIRE_POSTGRES") == "1"


def postgres_up(url: str = POSTGRES_URL) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((parts.hostname or "127.0.0.1", parts.port or 5432)) == 0


def _with_db(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


def create_scratch_database(url: str = POSTGRES_URL) -> tuple[str, str]:
    """Create `agentrewind_test_<pid>_<rand>`; return (its URL, its name)."""
    import psycopg

    name = f"agentrewind_test_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_db(url, name), name


def drop_scratch_database(name: str, url: str = POSTGRES_URL) -> None:
    import psycopg

    assert name.startswith("agentrewind_test_")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def tenant_role(url: str, schema: str) -> Iterator[str]:
    """A LOGIN role that is neither superuser nor owner, with DML rights on `schema`'s
    tables; yields `url` as that role. The role is dropped afterwards."""
    import psycopg

    role = f"agentrewind_test_tenant_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS')
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'
        )
        conn.execute(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO "{role}"')
    parts = urlsplit(url)
    netloc = f"{role}@{parts.hostname}:{parts.port or 5432}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def step(run_id: str, key: str, seq: int) -> StepRecord:
    """A completed custom step whose output is its `seq` (what the PostgreSQL tests write)."""
    now = time.time()
    return StepRecord(
        run_id=run_id, step_id=f"id-{key}", key=key, kind="custom", name=key,
        status="completed", seq=seq, output=seq, created_at=now, updated_at=now,
    )  # fmt: skip
