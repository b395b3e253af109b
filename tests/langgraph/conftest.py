from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph")


_POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture(params=["sqlite", "redis", _POSTGRES])
def saver_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh RewindSaver URL on SQLite (a file) and on Redis (its own namespace)."""
    yield from _saver_url(request, tmp_path)


@pytest.fixture(params=["sqlite", "redis", "redis-cluster", _POSTGRES])
def saver_url_with_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """As `saver_url`, plus a 3-master Redis Cluster started by the test session."""
    yield from _saver_url(request, tmp_path)


def _saver_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'lg.db'}"
        return
    if request.param == "postgres":
        # The session's scratch database, dropped with it: each test gets its own namespace.
        url = request.getfixturevalue("postgres_url")
        yield f"{url}?namespace=lg-{uuid.uuid4().hex[:10]}"
        return
    if request.param == "redis-cluster":
        # The session's own cluster, torn down with it: nothing to clean up here.
        url = request.getfixturevalue("redis_cluster")
        yield f"{url}{'&' if '?' in url else '?'}namespace=lg-{uuid.uuid4().hex[:10]}"
        return
    url = request.getfixturevalue("redis_url")
    ns = f"lg-{uuid.uuid4().hex[:10]}"
    yield f"{url}?namespace={ns}"
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"ar:{ns}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
