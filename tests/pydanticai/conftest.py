"""Fixtures for the pydantic-ai adapter tests: durable store URLs and crash-test subprocesses."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_support import cleanup_redis

pytest.importorskip("agentrewind_pydantic_ai")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pai_flows import Side  # noqa: E402


@pytest.fixture(params=["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A store URL other processes can open: SQLite file, Redis or PostgreSQL, fresh namespace."""
    kind = request.param
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={namespace}"
    elif kind == "postgres":
        yield f"{request.getfixturevalue('postgres_url')}?namespace={namespace}"
    else:
        url = request.getfixturevalue("redis_url")
        yield f"{url}?namespace={namespace}"
        cleanup_redis(url, namespace)


@pytest.fixture
def side(tmp_path: Path) -> Side:
    return Side(tmp_path / "side.txt")
