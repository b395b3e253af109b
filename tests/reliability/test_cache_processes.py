"""The cross-run cache across processes, on SQLite, Redis and PostgreSQL (issue 28).

Each run is its own process (`_cache_worker.py`); a counter file counts the calls paid for.
Run A pays for `search("q")`; run B within the TTL does not; after the TTL a run pays again;
another input pays; an exception is never cached; a process SIGKILLed right after a cache hit
resumes with the same value, from its journal (the cache was cleared meanwhile).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import backend_url, unique

import agentrewind

WORKER = str(Path(__file__).with_name("_cache_worker.py"))


@pytest.fixture(params=["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    pg_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with backend_url(request.param, tmp_path, redis_url, pg_url) as u:
        yield u


def _run(
    url: str, run_id: str, counter: Path, q: str, mode: str = "ok", ttl: float = 60.0
) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, WORKER, url, run_id, str(counter), q, mode, str(ttl)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if mode == "kill":
        assert proc.returncode == -9, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[0])
    return out


def _paid(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def test_a_call_is_paid_once_across_processes(url: str, tmp_path: Path) -> None:
    counter = tmp_path / "paid.txt"
    a = _run(url, unique("a"), counter, "q")
    assert a == {"value": {"answer": "Q", "paid": 1}, "cache_hits": 0}
    b = _run(url, unique("b"), counter, "q")
    assert b == {"value": {"answer": "Q", "paid": 1}, "cache_hits": 1}  # served, not paid
    assert _paid(counter) == ["q"]

    other = _run(url, unique("c"), counter, "r")  # another input pays
    assert other["value"] == {"answer": "R", "paid": 2}

    assert _paid(counter) == ["q", "r"]
    # Each process wrote its counts (written in batches) by the time it closed.
    mw = agentrewind.Middleware(url)
    try:
        (stats,) = mw.cache.stats()
        assert (stats.site, stats.entries, stats.hits, stats.misses) == ("custom:search", 2, 1, 2)
    finally:
        mw.close()


def test_after_the_ttl_a_call_is_paid_again(url: str, tmp_path: Path) -> None:
    counter = tmp_path / "paid.txt"
    first = _run(url, unique("a"), counter, "q", ttl=0.5)
    assert first == {"value": {"answer": "Q", "paid": 1}, "cache_hits": 0}
    time.sleep(0.6)  # past the TTL (a run within it is served: the test above)
    again = _run(url, unique("b"), counter, "q", ttl=0.5)
    assert again == {"value": {"answer": "Q", "paid": 2}, "cache_hits": 0}
    assert _paid(counter) == ["q", "q"]


def test_an_exception_is_not_cached(url: str, tmp_path: Path) -> None:
    counter = tmp_path / "paid.txt"
    assert _run(url, unique("a"), counter, "boom", "raise") == {"error": "search failed"}
    assert _run(url, unique("b"), counter, "boom", "raise") == {"error": "search failed"}
    assert _paid(counter) == ["boom", "boom"]
    ok = _run(url, unique("c"), counter, "boom")
    assert ok == {"value": {"answer": "BOOM", "paid": 3}, "cache_hits": 0}


def test_a_crash_right_after_a_cache_hit_replays_the_same_value(url: str, tmp_path: Path) -> None:
    counter = tmp_path / "paid.txt"
    first = _run(url, unique("a"), counter, "q")
    crashed = unique("b")
    hit = _run(url, crashed, counter, "q", "kill")  # served from the cache, then SIGKILLed
    assert hit == {"value": first["value"], "cache_hits": 1}
    mw = agentrewind.Middleware(url)  # no cache left: only the journal can answer
    try:
        assert mw.cache.clear() == 1
    finally:
        mw.close()
    resumed = _run(url, crashed, counter, "q")
    assert resumed == {"value": first["value"], "cache_hits": 0}
    assert _paid(counter) == ["q"]
