"""Fixtures shared by every test session: real SQLite files, real Redis, a real Redis Cluster.

Redis tests skip with a clear reason when no server can be found, unless
AGENTREWIND_REQUIRE_REDIS=1 (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
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
from redis_support import RedisServer, _redis_up, cleanup_redis

REDIS_URL = os.environ.get("AGENTREWIND_TEST_REDIS", "redis://127.0.0.1:6379/0")

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
def redis_url() -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(REDIS_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if not _redis_up(host, port):
        skip_or_fail(
            f"no Redis server at {host}:{port} (set AGENTREWIND_TEST_REDIS to use another)"
        )
    return REDIS_URL


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
def redis_server_bin() -> str:
    path = shutil.which("redis-server")
    if path is None or shutil.which("redis-cli") is None:
        skip_or_fail("redis-server/redis-cli not found on PATH")
    return str(path)


@pytest.fixture(scope="session")
def redis_cluster(redis_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-master Redis Cluster on free loopback ports, started for this test session."""
    base = tmp_path_factory.mktemp("cluster")
    nodes: list[RedisServer] = []
    try:
        for i in range(3):
            for attempt in range(5):  # a random port can be taken between probe and bind
                try:
                    nodes.append(RedisServer(base / f"n{i}-{attempt}", cluster=True))
                    break
                except RuntimeError:
                    if attempt == 4:
                        raise
        create = [
            "redis-cli",
            "--cluster",
            "create",
            *[f"127.0.0.1:{n.port}" for n in nodes],
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ]
        for attempt in range(3):  # a loaded machine can make a node answer late
            done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode == 0:
                break
            if attempt == 2:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")
            time.sleep(1.0)
        # Every node must agree before tests start: a node that has not converged answers
        # MOVED/CLUSTERDOWN, and the client then rebuilds its node map mid-test.
        deadline = time.monotonic() + 30
        while True:
            infos = [
                subprocess.run(
                    ["redis-cli", "-p", str(n.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
                for n in nodes
            ]
            if all(
                "cluster_state:ok" in i
                and "cluster_slots_ok:16384" in i
                and "cluster_known_nodes:3" in i
                for i in infos
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not become ready: {infos}")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{nodes[0].port}/0"
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


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
