from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph")


@pytest.fixture(params=["sqlite", "redis"])
def saver_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh RewindSaver URL on SQLite (a file) and on Redis (its own namespace)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'lg.db'}"
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
