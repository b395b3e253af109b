"""Opening a long run from an index of keys, on every store: outputs decoded on a replay hit only.

Every store of the core reads an index (`_load_index`); a replay hit reads its one record.
"""

from __future__ import annotations

import sqlite3
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind import CorruptRecordError, Middleware
from agentrewind.journal.call import EVENTS_KEPT
from agentrewind.records import INDEX_FROM, StepIndex
from redis_support import cleanup_redis

STEPS = 3_000  # above the stores' index threshold


def _record(url: str | Path, n: int = STEPS) -> Middleware:
    mw = Middleware(url if isinstance(url, str) else f"sqlite:///{url}")
    with mw.run("long") as run:
        for i in range(n):
            run.step("work", lambda i: {"answer": i}, i)
    return mw


def test_the_threshold_is_below_the_runs_here() -> None:
    assert INDEX_FROM < STEPS


def test_a_long_run_opens_from_an_index_and_replays_every_step(store_url: str) -> None:
    mw = _record(store_url)
    assert isinstance(mw.store._load_index("long"), StepIndex)  # type: ignore[attr-defined]
    ran: list[int] = []
    with mw.run("long") as run:
        assert run._indexed
        assert all(type(v) is tuple for v in run._records.values())
        for i in range(STEPS):
            assert run.step("work", lambda i: ran.append(i) or {"answer": -1}, i) == {"answer": i}
        assert run.step("work", lambda i: {"answer": i}, STEPS) == {"answer": STEPS}  # new
        records = run.records()
        assert len(run.events) == EVENTS_KEPT  # the last calls only: memory stays bounded
        assert run.events[-1].outcome == "executed" and run.events[-2].outcome == "replayed"
    assert ran == [] and run.metrics.replay_hits == STEPS and run.metrics.steps == 1
    assert len(records) == STEPS + 1 and [r.seq for r in records] == sorted(r.seq for r in records)
    # The new step follows the last recorded one.
    assert records[-1].parent_id == records[-2].step_id and records[-1].seq == records[-2].seq + 1
    mw.close()


def test_an_altered_record_still_refuses_the_open(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    _record(path).close()
    with sqlite3.connect(path) as conn:
        key, data = conn.execute("SELECT key, data FROM ar_steps ORDER BY seq LIMIT 1").fetchone()
        conn.execute(
            "UPDATE ar_steps SET data = ? WHERE key = ?",
            (data.replace(b'"answer":0', b'"answer":9'), key),
        )
    mw = Middleware(f"sqlite:///{path}")
    with pytest.raises(CorruptRecordError, match="checksum"), mw.run("long"):
        pytest.fail("a run with an altered record must not open")
    assert mw.store.get_run("long").status == "failed"  # type: ignore[union-attr]
    mw.close()


def test_started_failed_and_recorded_steps_keep_their_meaning(store_url: str) -> None:
    mw = _record(store_url)
    with mw.run("long") as run:  # one started-never-completed step, as after a crash
        call = run.begin("tool", "charge", {"amount": 1}, side_effects=True)
        call.start()
    mw.store.end_run("long", "failed", agentrewind.RunMetrics())
    with mw.run("long", on_incomplete="skip") as run:
        assert run._indexed
        call = run.begin("tool", "charge", {"amount": 1}, side_effects=True)
        assert call.hit and call.value() is None  # skipped, as before
    with (
        mw.run("long", on_incomplete="raise") as run,
        pytest.raises(agentrewind.IncompleteStepError),
    ):
        run.begin("tool", "charge", {"amount": 1}, side_effects=True)
    with mw.run("long") as run, pytest.warns(agentrewind.RerunWarning):  # rerun: it executes
        call = run.begin("tool", "charge", {"amount": 1}, side_effects=True)
        assert not call.hit
        call.complete({"ok": True})
    with mw.run("long") as run:
        call = run.begin("tool", "charge", {"amount": 1}, side_effects=True)
        assert call.hit and call.value() == {"ok": True}
    mw.close()


def test_divergence_is_still_seen_and_mark_consumed_works(store_url: str) -> None:
    mw = _record(store_url)
    with mw.run("long", strict=True) as run:
        run.mark_consumed([k for k in run._records if k.startswith("custom:work:")][:-1])
        with pytest.raises(agentrewind.DivergenceError):
            run.step("work", lambda i: i, -1)
    mw.close()


@pytest.mark.solo
def test_opening_holds_a_fraction_of_the_decoded_journal(store_url: str) -> None:
    mw = _record(store_url)

    def held(load: Any) -> int:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        kept = load()
        size = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del kept
        return size

    # Once before measuring: the first load also allocates the client's lazily made parts
    # (connection, parser buffers), which stay for every later run.
    mw.store._load_index("long")  # type: ignore[attr-defined]
    indexed = held(lambda: mw.store._load_index("long"))  # type: ignore[attr-defined]
    decoded = held(lambda: mw.store.load_steps("long"))
    assert indexed < decoded / 3, (indexed, decoded)
    assert indexed / STEPS < 256, indexed / STEPS  # bytes per step
    t0 = time.perf_counter()
    mw.store._load_index("long")  # type: ignore[attr-defined]
    assert time.perf_counter() - t0 < 1.0
    mw.close()


def test_redis_opens_a_long_run_from_its_sites_without_reading_a_record(redis_url: str) -> None:
    """The sites hash is the index; a record is read (and its checksum checked) on its hit."""
    import redis

    from agentrewind.stores.redis._keys import RunKeys

    ns = f"sites-{time.monotonic_ns()}"
    mw = _record(f"{redis_url}?namespace={ns}")
    keys = RunKeys.of("ar", ns, "long")
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.hlen(keys.sites) == client.hlen(keys.steps) == STEPS
        raw = client.hgetall(keys.steps)
        (bad,) = [k for k, v in raw.items() if b'"answer":7}' in v]
        sites = client.hgetall(keys.sites)
        client.hset(keys.sites, bad, b'["tool"]')  # a malformed entry is named, not a crash
        malformed = r"index entry .* is malformed"
        with pytest.raises(CorruptRecordError, match=malformed), mw.run("long"):
            pytest.fail("a malformed index entry must refuse the open")
        client.hset(keys.sites, bad, sites[bad])
        client.hset(keys.steps, bad, raw[bad].replace(b'"answer":7}', b'"answer":8}'))
        with mw.run("long") as run:  # opens: no record was read
            assert run._indexed
            assert run.step("work", lambda i: {"answer": -1}, 0) == {"answer": 0}
            with pytest.raises(CorruptRecordError, match="checksum"):
                run.step("work", lambda i: {"answer": -1}, 7)
        # A run whose sites hash is incomplete (written before it existed) is indexed from
        # its records: every checksum is checked at the open then.
        client.hdel(keys.sites, next(k for k in raw if k != bad))
        with pytest.raises(CorruptRecordError, match="checksum"), mw.run("long"):
            pytest.fail("an altered record must refuse an open indexed from the records")
        client.hset(keys.steps, bad, raw[bad])  # repaired: the records' index opens it
        with mw.run("long") as run:
            assert run._indexed
            assert run.step("work", lambda i: {"answer": -1}, 7) == {"answer": 7}
    finally:
        client.close()
        mw.close()
        cleanup_redis(redis_url, ns)


def test_a_redis_replay_reads_its_records_ahead_in_few_round_trips(redis_url: str) -> None:
    import redis

    ns = f"ahead-{time.monotonic_ns()}"
    mw = _record(f"{redis_url}?namespace={ns}")
    client = redis.Redis.from_url(redis_url)

    def calls() -> dict[str, int]:
        stats = client.info("commandstats")
        return {c: stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "hget")}

    try:
        before = calls()
        with mw.run("long") as run:
            for i in range(STEPS):
                assert run.step("work", lambda i: {"answer": -1}, i) == {"answer": i}
        after = calls()
        assert after["hget"] - before["hget"] < 10  # not a read per hit
        assert after["evalsha"] - before["evalsha"] < 40  # 3,000 hits, ~12 read-aheads
    finally:
        client.close()
        mw.close()
        cleanup_redis(redis_url, ns)
