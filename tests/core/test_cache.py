"""The cross-run cache (issue 28) on every store: memory, SQLite, Redis, Redis Cluster, Postgres.

Cross-process behaviour (counter files, SIGKILL after a hit) is in
tests/reliability/test_cache_processes.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest

import agentrewind
from agentrewind.journal import cache as journal_cache
from agentrewind.stores.cache import CacheEntry
from agentrewind.stores.cache import Tally as StoresTally


@pytest.fixture
def mw(store_url: str) -> Any:
    middleware = agentrewind.Middleware(store_url)
    yield middleware
    middleware.close()


def _counting() -> tuple[list[Any], Any]:
    calls: list[Any] = []

    def search(q: str) -> dict[str, Any]:
        calls.append(q)
        return {"answer": q.upper(), "n": len(calls)}

    return calls, search


def test_a_hit_is_journaled_and_marked_cached(mw: agentrewind.Middleware) -> None:
    calls, search = _counting()
    with mw.run("a") as run:
        assert run.step("search", search, "q", cache_ttl=60) == {"answer": "Q", "n": 1}
        assert run.metrics.cache_hits == 0
    with mw.run("b") as run:
        assert run.step("search", search, "q", cache_ttl=60) == {"answer": "Q", "n": 1}
        assert [e.outcome for e in run.events] == ["cached"]
        assert run.metrics.cache_hits == 1 and run.metrics.steps == 1
    assert calls == ["q"]
    (record,) = mw.store.load_steps("b")
    assert record.status == "completed" and record.meta["cached"] is True
    assert mw.metrics("b").cache_hits == 1
    # Resuming run b replays its journal, the cache is not asked again.
    with mw.run("b") as run:
        assert run.step("search", search, "q", cache_ttl=60) == {"answer": "Q", "n": 1}
        assert [e.outcome for e in run.events] == ["replayed"]
    (stats,) = mw.cache.stats()
    assert (stats.site, stats.entries, stats.hits, stats.misses) == ("custom:search", 1, 1, 1)
    assert stats.hit_rate == 0.5 and stats.bytes > 0


def test_another_input_pays_and_exceptions_are_not_cached(mw: agentrewind.Middleware) -> None:
    calls, search = _counting()
    failures = []

    def flaky(q: str) -> str:
        failures.append(q)
        raise RuntimeError("down")

    with mw.run("a") as run:
        run.step("search", search, "q", cache_ttl=60)
        run.step("search", search, "r", cache_ttl=60)
        for _ in range(2):
            with pytest.raises(RuntimeError):
                run.step("flaky", flaky, "q", cache_ttl=60)
    assert calls == ["q", "r"] and failures == ["q", "q"]
    assert [s.site for s in mw.cache.stats() if s.entries] == ["custom:search"]


def test_max_entries_evicts_the_least_recently_used(mw: agentrewind.Middleware) -> None:
    calls: list[int] = []

    @mw.step("square", cache_ttl=60, max_entries=2)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    for x in (1, 2, 1, 3):  # 1 is used again before 3 comes: 2 is the one evicted
        with mw.run(f"r{len(calls)}-{x}"):
            square(x)
    assert calls == [1, 2, 3]
    for x in (1, 3, 2):
        with mw.run(f"again-{x}"):
            square(x)
    assert calls == [1, 2, 3, 2]
    (stats,) = mw.cache.stats()
    assert stats.entries == 2


def test_outside_a_run_middleware_steps_still_cache(mw: agentrewind.Middleware) -> None:
    calls: list[str] = []

    @mw.step("search", cache_ttl=60, cache_key=lambda q, *, page=0: q.lower())
    def search(q: str, *, page: int = 0) -> str:
        calls.append(q)
        return q.lower()

    assert search("Q") == "q" and search("q", page=3) == "q"
    assert calls == ["Q"]
    with mw.run("a"):  # the same cache key inside a run
        assert search("q") == "q"
    assert calls == ["Q"]


def test_clear_by_site(mw: agentrewind.Middleware) -> None:
    calls, search = _counting()
    with mw.run("a") as run:
        run.step("search", search, "q", cache_ttl=60)
        run.step("other", search, "q", cache_ttl=60)
    assert mw.cache.clear(site="custom:search") == 1
    assert [s.site for s in mw.cache.stats()] == ["custom:other"]
    with mw.run("b") as run:
        run.step("search", search, "q", cache_ttl=60)
        run.step("other", search, "q", cache_ttl=60)
    assert calls == ["q", "q", "q"]
    assert mw.cache.clear() == 2 and mw.cache.stats() == []


def test_async_steps_cache(mw: agentrewind.Middleware) -> None:
    calls: list[str] = []

    @mw.step("fetch", cache_ttl=60)
    async def fetch(q: str) -> str:
        calls.append(q)
        return q * 2

    async def main() -> list[str]:
        out = []
        for run_id in ("a", "b"):
            async with mw.run(run_id):
                out.append(await fetch("x"))
        out.append(await fetch("x"))  # outside a run
        stats = await mw.cache.astats()
        assert stats[0].hits == 2
        assert await mw.cache.aclear() == 1
        return out

    assert asyncio.run(main()) == ["xx", "xx", "xx"]
    assert calls == ["x"]


def test_a_crafted_entry_naming_os_system_executes_nothing(
    mw: agentrewind.Middleware, tmp_path: Any
) -> None:
    marker = tmp_path / "pwned"
    calls, search = _counting()
    with mw.run("a") as run:
        run.step("search", search, "q", cache_ttl=60)
        key = f"custom:search:{run.digest({'args': ['q'], 'kwargs': {}})}"
    crafted = {"__ar__": "dataclass", "t": "os:system", "v": {"command": f"touch {marker}"}}
    mw.store.cache.put("custom:search", key, CacheEntry(json.dumps(crafted).encode()), ttl=60)
    with mw.run("b") as run, pytest.raises(agentrewind.SerializationError):
        run.step("search", search, "q", cache_ttl=60)
    assert not marker.exists() and calls == ["q"]
    assert mw.store.load_steps("b") == []  # nothing half-written


def test_a_value_the_journal_cannot_store_is_not_cached(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    mw = agentrewind.Middleware(store_url)
    calls: list[int] = []

    @mw.step("make", cache_ttl=60)
    def make(x: int) -> object:
        calls.append(x)
        return object()

    journal_cache._UNSTORABLE_LOGGED.discard("custom:make")  # logged once per process
    with caplog.at_level(logging.WARNING, logger="agentrewind.cache"):
        make(1)
        make(1)
    assert calls == [1, 1]
    assert all(s.entries == 0 for s in mw.cache.stats())
    assert sum("was not cached" in r.getMessage() for r in caplog.records) == 1
    mw.close()


def test_cached_values_are_encrypted_at_rest(store_url: str) -> None:
    pytest.importorskip("cryptography")
    from agentrewind.serde.encryption import Encryption

    key = os.urandom(32)
    mw = agentrewind.Middleware(store_url, encryption=Encryption(key))
    with mw.run("a") as run:
        run.step("secret", lambda q: {"card": "4111-1111"}, "q", cache_ttl=60)
        digest = run.digest({"args": ["q"], "kwargs": {}})
    entry = mw.store.cache.get("custom:secret", f"custom:secret:{digest}")
    assert entry is not None and b"4111" not in entry.value
    with mw.run("b") as run:
        assert run.step("secret", lambda q: {"card": "other"}, "q", cache_ttl=60) == {
            "card": "4111-1111"
        }
    mw.close()


def test_bad_cache_options_are_refused(mw: agentrewind.Middleware) -> None:
    with pytest.raises(ValueError, match="cache_ttl"):
        mw.step("x", cache_ttl=-1)
    with pytest.raises(ValueError, match="max_entries"):
        mw.step("x", cache_ttl=1, max_entries=0)


def test_the_viewer_marks_a_hit_cached(mw: agentrewind.Middleware) -> None:
    from agentrewind.ui.api import run_detail

    _, search = _counting()
    for run_id in ("a", "b"):
        with mw.run(run_id) as run:
            run.step("search", search, "q", cache_ttl=60)
    rows = run_detail(mw.store, "b")["waterfall"]
    assert [r["outcome"] for r in rows["rows"]] == ["cached"]
    assert rows["counts"]["cached"] == 1 and rows["counts"]["executed"] == 0
    assert [r["outcome"] for r in run_detail(mw.store, "a")["waterfall"]["rows"]] == ["executed"]


def test_hit_counts_are_written_in_batches_and_exact_in_stats(tmp_path: Any) -> None:
    """A hit on an uncapped site is a read: its count waits for the batch (`Tally.EVERY`
    lookups, `Tally.SECONDS`, `stats`, `clear` or `close`), then adds up exactly."""
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    reader, other = agentrewind.connect(url), agentrewind.connect(url)
    other.cache.put("tool:search", "k", CacheEntry(b"1", 0.5, 7), ttl=60)
    for _ in range(3):
        assert reader.cache.get("tool:search", "k") == CacheEntry(b"1", 0.5, 7)
    assert reader.cache.get("tool:search", "absent") is None
    assert [s.hits for s in other.cache.stats()] == [0]  # pending in `reader`
    (mine,) = reader.cache.stats()  # this process: exact
    assert (mine.hits, mine.misses, mine.seconds_saved, mine.tokens_saved) == (3, 1, 1.5, 21)
    assert [(s.hits, s.misses) for s in other.cache.stats()] == [(3, 1)]  # written by stats
    every = StoresTally.EVERY
    for _ in range(every):
        reader.cache.get("tool:search", "k")
    assert [s.hits for s in other.cache.stats()] == [3 + every]  # the batch wrote itself
    reader.cache.get("tool:search", "k")
    reader.close()  # close writes what is pending
    assert [s.hits for s in other.cache.stats()] == [4 + every]
    other.close()
