"""Shared pieces for the LangChain adapter tests: stores, a failing agent, call counters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_support import cleanup_redis


@pytest.fixture(params=["sqlite", "redis"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file or a Redis namespace, fresh for each test."""
    namespace = f"lc-{uuid.uuid4().hex[:10]}"
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    url = request.getfixturevalue("redis_url")
    yield f"{url}?namespace={namespace}"
    cleanup_redis(url, namespace)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"
