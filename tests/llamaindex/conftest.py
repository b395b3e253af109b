"""Fixtures for the LlamaIndex adapter tests: durable store URLs and crash-test subprocesses."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_support import cleanup_redis

pytest.importorskip("agentrewind_llamaindex")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from li_helpers import Side  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # llama-index itself touches deprecated pydantic attributes (inspect.getmembers on agents).
    for item in items:
        if str(item.fspath).startswith(str(HERE)):
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
            )


def _durable(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    kind = request.param
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={namespace}"
    elif kind == "redis-cluster":
        # a session-wide 3-master cluster of our own, killed at the end of the session
        yield f"{request.getfixturevalue('redis_cluster')}?namespace={namespace}"
    else:
        url = request.getfixturevalue("redis_url")
        yield f"{url}?namespace={namespace}"
        cleanup_redis(url, namespace)


@pytest.fixture(params=["sqlite", "redis"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A store URL other processes can open: a SQLite file, or Redis in a fresh namespace."""
    yield from _durable(request, tmp_path, namespace)


@pytest.fixture(params=["sqlite", "redis-cluster"])
def cluster_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A SQLite file, or a 3-master Redis Cluster (single-node Redis: `durable_url`)."""
    yield from _durable(request, tmp_path, namespace)


@pytest.fixture
def side(tmp_path: Path) -> Side:
    return Side(tmp_path / "side.txt")
