"""Redis queues' keys and cost: one Cluster slot per queue, inside its namespace; a dequeue
reads a bounded number of waiting entries whatever the queue's depth.

The behaviour shared with every store is tested in tests/core/test_queue_store.py.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("redis")

import redis
from redis.crc import key_slot

import agentrewind
from agentrewind.errors import QueueError
from agentrewind.stores import Store
from agentrewind.stores.queue import MAX_PRIORITY, QueueEntry, QueueLimits
from agentrewind.stores.redis._keys import encode_part
from agentrewind.stores.redis._queue import QueueKeys, RedisQueues

NONE = QueueLimits()
_tricky = st.text(alphabet=st.sampled_from("{}:%a_-\x00é中\U0001f600 "), max_size=8)
texts = st.one_of(_tricky, st.text(max_size=8))


def _slot(key: str) -> int:
    return int(key_slot(key.encode("utf-8", "surrogatepass")))


@settings(max_examples=300, deadline=None)
@given(ns=texts, queue=texts, run_ids=st.lists(texts, max_size=4))
def test_every_key_of_a_queue_has_one_slot(ns: str, queue: str, run_ids: list[str]) -> None:
    k = QueueKeys("ar", ns, queue)
    keys = [*k.fixed(), *(k.entry(r) for r in run_ids)]
    assert len({_slot(key) for key in keys}) == 1
    for key in keys:  # inside the namespace, where `cleanup_redis` (ar:NS:*) finds them
        assert key.startswith(f"ar:{encode_part(ns)}:q:{{")


@settings(max_examples=300, deadline=None)
@given(a=st.tuples(texts, texts), b=st.tuples(texts, texts))
def test_distinct_queues_never_share_a_key(a: tuple[str, str], b: tuple[str, str]) -> None:
    keys_a, keys_b = set(QueueKeys("ar", *a).fixed()), set(QueueKeys("ar", *b).fixed())
    assert (keys_a == keys_b) if a == b else not keys_a & keys_b


def _queues(store: Store) -> RedisQueues:
    queues = store.queues
    assert isinstance(queues, RedisQueues)
    return queues


@pytest.fixture(params=["redis", "redis-cluster"])
def server(request: pytest.FixtureRequest) -> str:
    return str(
        request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster")
    )


def _all_keys(url: str, match: str) -> list[str]:
    """Every key matching `match` on every node (a Cluster's nodes each hold their slots)."""
    from redis.cluster import RedisCluster

    probe = redis.Redis.from_url(url)
    try:
        clustered = bool(probe.info("cluster").get("cluster_enabled"))
    finally:
        probe.close()
    client = RedisCluster.from_url(url) if clustered else redis.Redis.from_url(url)
    try:
        return sorted(k.decode() for k in client.scan_iter(match=match, count=1000))
    finally:
        client.close()


def _drop(url: str, keys: list[str]) -> None:
    from redis.cluster import RedisCluster

    probe = redis.Redis.from_url(url)
    try:
        clustered = bool(probe.info("cluster").get("cluster_enabled"))
    finally:
        probe.close()
    client = RedisCluster.from_url(url) if clustered else redis.Redis.from_url(url)
    try:
        for key in keys:  # one by one: keys of several slots
            client.delete(key)
    finally:
        client.close()


def test_a_queue_keeps_its_keys_in_its_namespace_and_slot(server: str) -> None:
    prefix = f"rq{uuid.uuid4().hex[:8]}"
    ns = "acme:q:{x}"  # encoded into the key: it can neither escape nor open a hash tag
    store = agentrewind.connect(f"{server}?prefix={prefix}&namespace={ns}")
    try:
        q = store.queues
        q.push(QueueEntry("jobs", "r1", dedup_id="d", partition="p"))
        q.push(QueueEntry("jobs", "r2", not_before=time.time() + 60))
        q.push(QueueEntry("jobs", "r3"))
        q.take("jobs", QueueLimits(concurrency=5, limiter=(5, 30.0), partitioned=True), "w", 1, 30)
        q.release("jobs", "w", ["r1"])
        q.take("jobs", QueueLimits(limiter=(5, 30.0)), "w", 1, 30)
        q.renew("jobs", "w", ["r1"], 30)
        ns_part = f"{prefix}:{encode_part(ns)}:"
        store_keys = {f"{prefix}:schema_version", f"{ns_part}layout"}  # written by connect
        keys = [key for key in _all_keys(server, f"{prefix}:*") if key not in store_keys]
        assert keys and all(key.startswith(ns_part) for key in keys)
        index = f"{ns_part}queues"
        assert index in keys
        queue_keys = [key for key in keys if key != index]
        assert len({_slot(key) for key in queue_keys}) == 1
        expected = QueueKeys(prefix, ns, "jobs")
        assert set(queue_keys) <= {
            *expected.fixed(),
            *(expected.entry(r) for r in ["r1", "r2", "r3"]),
        }
        other = agentrewind.connect(f"{server}?prefix={prefix}&namespace=acme")
        try:
            assert other.queues.stats() == [] and other.queues.entry("jobs", "r1") is None
            assert other.queues.take("jobs", NONE, "w", 5, 30) == []
        finally:
            other.close()
        for run_id in ("r1", "r2", "r3"):
            assert q.finish("jobs", run_id)
        left = {key for key in _all_keys(server, f"{prefix}:*") if key.startswith(ns_part)}
        left -= {index, *store_keys}
        # What a finished queue leaves: its counter and the limiter's recent starts.
        assert left <= {expected.seq, expected.starts}
    finally:
        store.close()
        _drop(server, _all_keys(server, f"{prefix}:*"))


@pytest.fixture
def deep(redis_url: str, namespace: str) -> Iterator[Store]:
    store = agentrewind.connect(f"{redis_url}?namespace={namespace}")
    try:
        yield store
    finally:
        store.close()


def _fill(store: Store, queue: str, depth: int) -> None:
    """`depth` entries pushed in pipelines of the push script (a loop of pushes is slow)."""
    queues = _queues(store)
    k = queues.keys(queue)
    _, sha = store._scripts["QUEUE_PUSH"]  # type: ignore[attr-defined]
    client = store.client  # type: ignore[attr-defined]
    for start in range(0, depth, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 1000, depth)):
            run_id = f"r{i:06d}"
            keys = [k.wait, k.delay, k.age, k.dedup, k.seq, k.entry(run_id), queues.index]
            args = [k.entry_prefix, run_id, i % 3, "", "0", "", "0.0", queue]
            pipe.evalsha(sha, len(keys), *keys, *args)
        pipe.execute()


def test_a_dequeue_reads_as_many_entries_at_any_depth(deep: Store) -> None:
    queues = _queues(deep)
    queues.push(QueueEntry("shallow", "only"))  # loads the push script on the server
    _fill(deep, "deep", 20_000)
    (stats,) = queues.stats("deep")
    assert stats.queued == 20_000
    scanned = {}
    for name in ("shallow", "deep"):
        queues.take(name, NONE, "w", 1, 30.0)
        scanned[name] = queues.scanned
    assert scanned == {"shallow": 1, "deep": 1}
    got = queues.take("deep", QueueLimits(concurrency=6), "w", 50, 30.0)
    assert len(got) == 5 and queues.scanned == 5  # concurrency: 1 in flight + 5
    assert [e.priority for e in got] == [0] * 5  # priority 0 first, FIFO within
    assert [e.run_id for e in got] == ["r000003", "r000006", "r000009", "r000012", "r000015"]
    assert queues.take("deep", QueueLimits(concurrency=6), "w", 50, 30.0) == []
    assert queues.scanned == 0  # no room: nothing read


def test_priority_out_of_range_is_refused(deep: Store) -> None:
    for p in (-1, MAX_PRIORITY + 1, True):
        with pytest.raises(QueueError, match="priority"):
            deep.queues.push(QueueEntry("p", "r", priority=p))
    assert deep.queues.entry("p", "r") is None
    deep.queues.push(QueueEntry("p", "low", priority=MAX_PRIORITY))
    deep.queues.push(QueueEntry("p", "high", priority=0))
    assert [e.run_id for e in deep.queues.take("p", NONE, "w", 5, 30.0)] == ["high", "low"]


def test_times_come_from_the_server_in_seconds(deep: Store) -> None:
    before = time.time()
    deep.queues.push(QueueEntry("t", "a", not_before=before - 5))
    got = deep.queues.entry("t", "a")
    assert got is not None
    assert abs(got.enqueued_at - before) < 5 and got.not_before == before - 5
    (stats,) = deep.queues.stats("t")
    assert stats.oldest_enqueued_at == got.enqueued_at


@pytest.mark.parametrize("seed", range(12))
def test_takes_match_the_in_process_queues(deep: Store, seed: int) -> None:
    """Random pushes, takes, releases and finishes give what `MemoryQueues` gives (pick())."""
    rng = random.Random(seed)
    memory = agentrewind.connect(f"memory://rq-{uuid.uuid4().hex}")
    try:
        partitioned = rng.random() < 0.5
        limits = QueueLimits(
            concurrency=rng.choice([None, 1, 2, 4]),
            limiter=rng.choice([None, (3, 600.0), (6, 600.0)]),
            partitioned=partitioned,
        )
        held: dict[str, list[str]] = {}
        pushed = 0
        for _ in range(60):
            op = rng.random()
            if op < 0.45:
                entry = QueueEntry(
                    "d",
                    f"r{pushed}",
                    priority=rng.choice([0, 1, 2, MAX_PRIORITY]),
                    partition=rng.choice("abc") if partitioned else "",
                )
                pushed += 1
                for store in (deep, memory):
                    store.queues.push(entry)
            elif op < 0.75:
                owner, n = rng.choice(["w1", "w2"]), rng.randint(0, 4)
                got = [_ids(s.queues.take("d", limits, owner, n, 600.0)) for s in (deep, memory)]
                assert got[0] == got[1]
                held.setdefault(owner, []).extend(got[0])
            elif op < 0.85 and held.get("w1"):
                run_id = held["w1"].pop(rng.randrange(len(held["w1"])))
                for store in (deep, memory):
                    store.queues.release("d", "w1", [run_id])
            else:
                run_id = f"r{rng.randrange(max(pushed, 1))}"
                assert deep.queues.finish("d", run_id) == memory.queues.finish("d", run_id)
                for ids in held.values():
                    if run_id in ids:
                        ids.remove(run_id)
        (a,), (b,) = deep.queues.stats("d"), memory.queues.stats("d")
        assert (a.queued, a.delayed, a.in_flight) == (b.queued, b.delayed, b.in_flight)
    finally:
        memory.close()


def _ids(entries: list[QueueEntry]) -> list[str]:
    return [e.run_id for e in entries]


def test_a_queue_past_its_sequence_refuses_entries(deep: Store) -> None:
    """Scores stay exact doubles: priority * 2**33 + sequence, so 2**33 entries per queue."""
    queues = _queues(deep)
    queues.push(QueueEntry("full", "last", priority=MAX_PRIORITY))
    client = deep.client  # type: ignore[attr-defined]
    client.set(queues.keys("full").seq, 2**33 - 2)
    queues.push(QueueEntry("full", "edge", priority=MAX_PRIORITY))
    with pytest.raises(QueueError, match="2\\*\\*33"):
        queues.push(QueueEntry("full", "over"))
    assert queues.entry("full", "over") is None
    got = queues.take("full", NONE, "w", 5, 30.0)
    assert [e.run_id for e in got] == ["last", "edge"]
    assert client.zscore(queues.keys("full").fly, "edge") is not None
