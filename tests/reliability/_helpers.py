"""Shared pieces of the reliability tests: child processes and backend URLs."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

WORKER = str(Path(__file__).with_name("_worker.py"))


def spawn(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    """Start `_worker.py` with `args` under this interpreter (text pipes)."""
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_line(proc: subprocess.Popen[str], expected: str) -> str:
    """Read the child's next stdout line and check it starts with `expected`."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(expected):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"child said {line!r}, expected {expected!r}; stderr:\n{err}")
    return line


def unique(prefix: str) -> str:
    """A name no other test (or agent) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def cleanup_redis(url: str, pattern: str) -> None:
    """Delete every key matching `pattern` on the server at `url`."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextmanager
def backend_url(
    kind: str, tmp_path: Path, redis_url: str | None, postgres_url: str | None = None
) -> Iterator[str]:
    """A store URL on a real SQLite file, the shared Redis or the session's scratch Postgres
    database, in a fresh namespace (+ prefix on Redis)."""
    ns = unique("rel")
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={ns}"
        return
    if kind == "postgres":
        assert postgres_url is not None
        yield f"{postgres_url}?namespace={ns}"  # the scratch database is dropped at the end
        return
    assert redis_url is not None
    prefix = unique("arrel")
    try:
        yield f"{redis_url}?namespace={ns}&prefix={prefix}"
    finally:
        cleanup_redis(redis_url, f"{prefix}:*")


def server_sessions(url: str) -> set[int]:
    """Postgres: the backends of the URL's database other than this query's (else empty)."""
    if not url.startswith("postgresql"):
        return set()
    import psycopg

    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(r[0]) for r in rows}


def settle(url: str, before: set[int], seconds: float = 5.0) -> None:
    """Postgres: wait until the sessions opened since `before` (a killed child's) are gone.

    A write the child had sent whole before it died still commits: its session ends only
    after that, when it reads the closed socket. Checking the store earlier would read half
    of the state before that commit and half after.
    """
    deadline = time.monotonic() + seconds
    while url.startswith("postgresql") and time.monotonic() < deadline:
        if server_sessions(url) <= before:
            return
        time.sleep(0.05)
