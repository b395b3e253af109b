"""Durable queues' storage (issue 27) on every store: memory, SQLite, Redis (Cluster), Postgres.

These drive `Store.queues` directly: the dequeue rule (priority, FIFO, delay, partitions),
the limits across takers, lapsed slots and deduplication. The journal-level API and the
cross-process workers are tested in tests/core/test_queues.py and
tests/reliability/test_queue_workers.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from agentrewind.errors import QueueDeduplicatedError, QueueError
from agentrewind.stores import Store, connect
from agentrewind.stores.queue import QueueEntry, QueueLimits

NONE = QueueLimits()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = connect(store_url)
    yield s
    s.close()


def _push(store: Store, queue: str, *run_ids: str, **kw: object) -> None:
    for run_id in run_ids:
        store.queues.push(QueueEntry(queue, run_id, **kw))  # type: ignore[arg-type]


def _ids(entries: list[QueueEntry]) -> list[str]:
    return [e.run_id for e in entries]


def test_fifo_and_priority_order(store: Store) -> None:
    _push(store, "q", "a", "b")
    _push(store, "q", "urgent", priority=0)
    _push(store, "q", "late", priority=5)
    _push(store, "q", "c")
    assert _ids(store.queues.take("q", NONE, "w1", 2, 30.0)) == ["a", "b"]
    assert _ids(store.queues.take("q", NONE, "w1", 10, 30.0)) == ["urgent", "c", "late"]
    assert store.queues.take("q", NONE, "w1", 10, 30.0) == []


def test_priority_lower_first_fifo_within(store: Store) -> None:
    for i, p in enumerate([3, 1, 2, 1, 0, 3]):
        _push(store, "p", f"r{i}", priority=p)
    assert _ids(store.queues.take("p", NONE, "w", 6, 30.0)) == ["r4", "r1", "r3", "r2", "r0", "r5"]


def test_entry_fields_and_stats(store: Store) -> None:
    before = time.time()
    _push(store, "s", "a", dedup_id="d1", partition="u1", priority=2)
    _push(store, "s", "b", not_before=time.time() + 60)
    got = store.queues.entry("s", "a")
    assert got is not None and (got.dedup_id, got.partition, got.priority) == ("d1", "u1", 2)
    assert got.enqueued_at >= before - 1 and got.deliveries == 0
    assert store.queues.entry("s", "nope") is None and store.queues.entry("other", "a") is None
    (stats,) = store.queues.stats("s")
    assert (stats.queued, stats.delayed, stats.in_flight) == (2, 1, 0)
    assert stats.oldest_enqueued_at is not None and stats.oldest_enqueued_at >= before - 1
    (taken,) = store.queues.take("s", NONE, "w", 5, 30.0)
    assert taken.run_id == "a" and taken.deliveries == 1
    (stats,) = store.queues.stats("s")
    assert (stats.queued, stats.delayed, stats.in_flight) == (1, 1, 1)
    assert [s.queue for s in store.queues.stats()] == ["s"]
    assert store.queues.stats("empty")[0].queued == 0


def test_delay_holds_an_entry_until_its_time(store: Store) -> None:
    _push(store, "d", "later", not_before=time.time() + 0.4)
    _push(store, "d", "now")
    assert _ids(store.queues.take("d", NONE, "w", 5, 30.0)) == ["now"]
    assert store.queues.take("d", NONE, "w", 5, 30.0) == []
    time.sleep(0.5)
    assert _ids(store.queues.take("d", NONE, "w", 5, 30.0)) == ["later"]


def test_concurrency_counts_every_taker(store: Store) -> None:
    limits = QueueLimits(concurrency=3)
    _push(store, "c", *[f"r{i}" for i in range(6)])
    assert len(store.queues.take("c", limits, "w1", 2, 30.0)) == 2
    assert len(store.queues.take("c", limits, "w2", 5, 30.0)) == 1
    assert store.queues.take("c", limits, "w3", 5, 30.0) == []
    assert store.queues.finish("c", "r0") is True and store.queues.finish("c", "r0") is False
    assert _ids(store.queues.take("c", limits, "w3", 5, 30.0)) == ["r3"]


def test_a_lapsed_slot_is_delivered_again_in_its_place(store: Store) -> None:
    limits = QueueLimits(concurrency=1)
    _push(store, "l", "first", "second")
    assert _ids(store.queues.take("l", limits, "dead", 1, 0.3)) == ["first"]
    assert store.queues.take("l", limits, "w2", 1, 30.0) == []  # the slot is held
    time.sleep(0.4)
    (again,) = store.queues.take("l", limits, "w2", 1, 30.0)
    assert again.run_id == "first" and again.deliveries == 2
    assert store.queues.renew("l", "dead", ["first"], 30.0) == []  # the dead owner lost it
    assert store.queues.renew("l", "w2", ["first", "gone"], 30.0) == ["first"]


def test_renewed_slots_do_not_lapse(store: Store) -> None:
    limits = QueueLimits(concurrency=1)
    _push(store, "r", "a", "b")
    store.queues.take("r", limits, "w", 1, 0.4)
    for _ in range(3):
        time.sleep(0.2)
        assert store.queues.renew("r", "w", ["a"], 0.4) == ["a"]
    assert store.queues.take("r", limits, "w2", 1, 30.0) == []


def test_release_puts_entries_back_in_their_place(store: Store) -> None:
    _push(store, "rel", "a", "b", "c")
    assert _ids(store.queues.take("rel", NONE, "w", 2, 30.0)) == ["a", "b"]
    store.queues.release("rel", "other", ["a"])  # not its owner: nothing changes
    store.queues.release("rel", "w", ["a", "b"])
    assert _ids(store.queues.take("rel", NONE, "w2", 3, 30.0)) == ["a", "b", "c"]


def test_limiter_caps_starts_in_a_window(store: Store) -> None:
    limits = QueueLimits(limiter=(2, 0.5))
    _push(store, "lim", *[f"r{i}" for i in range(5)])
    assert len(store.queues.take("lim", limits, "w", 5, 30.0)) == 2
    store.queues.finish("lim", "r0")
    store.queues.finish("lim", "r1")
    assert store.queues.take("lim", limits, "w", 5, 30.0) == []  # finished, still counted
    time.sleep(0.6)
    assert _ids(store.queues.take("lim", limits, "w", 5, 30.0)) == ["r2", "r3"]


def test_partitions_have_limits_of_their_own(store: Store) -> None:
    limits = QueueLimits(concurrency=1, partitioned=True)
    for i, user in enumerate(["ann", "ann", "bob", "ann", "cid", "bob"]):
        _push(store, "part", f"r{i}", partition=user)
    assert _ids(store.queues.take("part", limits, "w", 10, 30.0)) == ["r0", "r2", "r4"]
    assert store.queues.take("part", limits, "w", 10, 30.0) == []
    store.queues.finish("part", "r0")
    assert _ids(store.queues.take("part", limits, "w", 10, 30.0)) == ["r1"]


def test_partitioned_limiter(store: Store) -> None:
    limits = QueueLimits(limiter=(1, 30.0), partitioned=True)
    _push(store, "pl", "a1", partition="a")
    _push(store, "pl", "a2", partition="a")
    _push(store, "pl", "b1", partition="b")
    assert _ids(store.queues.take("pl", limits, "w", 10, 30.0)) == ["a1", "b1"]
    assert store.queues.take("pl", limits, "w", 10, 30.0) == []


def test_dedup_refuses_while_held_and_frees_on_finish(store: Store) -> None:
    _push(store, "dd", "a", dedup_id="user-7")
    with pytest.raises(QueueDeduplicatedError) as caught:
        _push(store, "dd", "b", dedup_id="user-7")
    assert caught.value.run_id == "a" and "user-7" in str(caught.value)
    assert store.queues.entry("dd", "b") is None
    _push(store, "other", "c", dedup_id="user-7")  # per queue
    store.queues.take("dd", NONE, "w", 1, 30.0)
    with pytest.raises(QueueDeduplicatedError):
        _push(store, "dd", "b", dedup_id="user-7")  # running still holds it
    store.queues.finish("dd", "a")
    _push(store, "dd", "b", dedup_id="user-7")
    assert _ids(store.queues.take("dd", NONE, "w", 5, 30.0)) == ["b"]


def test_a_run_is_in_a_queue_once(store: Store) -> None:
    _push(store, "once", "a")
    with pytest.raises(QueueError, match="already"):
        _push(store, "once", "a")


def test_queues_and_namespaces_do_not_mix(store: Store, store_url: str) -> None:
    _push(store, "x", "a")
    _push(store, "y", "b")
    assert _ids(store.queues.take("x", NONE, "w", 5, 30.0)) == ["a"]
    other = connect(store_url, namespace=f"elsewhere-{store.namespace}")
    try:
        assert other.queues.take("y", NONE, "w", 5, 30.0) == []
        assert other.queues.stats() == [] and other.queues.entry("x", "a") is None
    finally:
        other.close()
    assert _ids(store.queues.take("y", NONE, "w", 5, 30.0)) == ["b"]


def test_async_twins(store: Store) -> None:
    async def go() -> list[str]:
        await store.queues.apush(QueueEntry("aq", "a"))
        got = await store.queues.atake("aq", NONE, "w", 5, 30.0)
        assert (await store.queues.aentry("aq", "a")) is not None
        assert await store.queues.afinish("aq", "a")
        return _ids(got)

    assert asyncio.run(go()) == ["a"]


@pytest.mark.parametrize(
    "kw",
    [
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": 1.5},
        {"limiter": (0, 1.0)},
        {"limiter": (5, 0)},
        {"limiter": (5, -2.0)},
        {"limiter": 5},
    ],
)
def test_bad_limits_are_named(kw: dict[str, object]) -> None:
    with pytest.raises(QueueError):
        QueueLimits(**kw)  # type: ignore[arg-type]
