"""The Redis runs index (layout 3): a sorted set scored by each run's last write.

`list_runs(limit=n)` reads a page of it, so what it holds decides what is listed: every write
moves its run, deletes remove it, members of expired runs are skipped and dropped (never an
error), and a layout-2 namespace (scored by creation) is rescored when a writer connects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("redis")

import redis
from redis.cluster import RedisCluster

import agentrewind
from agentrewind.cli.readonly import connect_read_only
from agentrewind.stores.redis._keys import namespace_key, runs_index
from agentrewind.testing import make_record
from redis_support import cleanup_redis


@pytest.fixture(params=["redis", "redis-cluster"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A Redis URL (single server or Cluster) and a raw client to look at its keys."""
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster")
    client: Any = (
        redis.Redis.from_url(url) if request.param == "redis" else RedisCluster.from_url(url)
    )
    try:
        yield url, client
    finally:
        client.close()


def _index(client: Any, prefix: str, ns: str) -> dict[str, float]:
    return {m.decode(): s for m, s in client.zrange(runs_index(prefix, ns), 0, -1, withscores=True)}


def test_each_write_scores_its_run_by_the_time_it_wrote(server: tuple[str, Any]) -> None:
    url, client = server
    ns = f"ix-{uuid.uuid4().hex[:8]}"
    store = agentrewind.connect(f"{url}?namespace={ns}")
    try:
        for run_id in ("a", "b", "c"):
            store.begin_run(run_id)
            time.sleep(0.002)
        store.put_step(make_record("a", "k", 1))
        index = _index(client, "ar", ns)
        runs = {r.run_id: r.updated_at for r in store.list_runs()}
        assert index == runs  # the score is the run's own updated_at, for every run
        assert max(index, key=index.__getitem__) == "a"
        assert store.delete_run("b")
        assert set(_index(client, "ar", ns)) == {"a", "c"}
        assert store.prune(keep_last=0) == 2 and _index(client, "ar", ns) == {}
    finally:
        store.close()
        cleanup_redis(url, ns)


def test_expired_runs_are_skipped_and_their_members_dropped(server: tuple[str, Any]) -> None:
    url, client = server
    ns = f"ix-{uuid.uuid4().hex[:8]}"
    store = agentrewind.connect(f"{url}?namespace={ns}")
    try:
        for run_id in ("old1", "old2", "old3"):
            store.begin_run(run_id)
        time.sleep(0.005)
        for run_id in ("new1", "new2", "new3", "new4"):  # the newest: on the first page
            store.begin_run(run_id, ttl=0.2)
        time.sleep(0.5)
        assert len(_index(client, "ar", ns)) == 7  # expiry leaves the members behind
        reader = connect_read_only(f"{url}?namespace={ns}", None)  # skips them, writes nothing
        assert sorted(r.run_id for r in reader.list_runs(limit=2)) == ["old2", "old3"]
        reader.close()
        assert len(_index(client, "ar", ns)) == 7
        listed = store.list_runs(limit=2)
        assert sorted(r.run_id for r in listed) == ["old2", "old3"]  # the page was refilled
        assert set(_index(client, "ar", ns)) == {"old1", "old2", "old3"}
        assert [r.run_id for r in store.list_runs()] == ["old3", "old2", "old1"]
    finally:
        store.close()
        cleanup_redis(url, ns)


def test_a_member_is_dropped_only_if_its_run_was_not_written_again(redis_url: str) -> None:
    ns = f"ix-{uuid.uuid4().hex[:8]}"
    store: Any = agentrewind.connect(f"{redis_url}?namespace={ns}")
    client = redis.Redis.from_url(redis_url)
    try:
        store.begin_run("r")
        seen = _index(client, "ar", ns)["r"]
        time.sleep(0.002)
        store.begin_run("r")  # written again after a reader saw it gone
        assert store.run_script("DROP_GONE", [store.runs_index], ["r", repr(seen)]) == 0
        assert "r" in _index(client, "ar", ns)
        score = _index(client, "ar", ns)["r"]
        assert store.run_script("DROP_GONE", [store.runs_index], ["r", repr(score)]) == 1
    finally:
        store.close()
        client.close()
        cleanup_redis(redis_url, ns)


def _to_layout_2(client: Any, prefix: str, ns: str, scores: dict[str, float]) -> None:
    """Make a namespace look as layout 2 left it: indexed by creation, marked 2."""
    client.zadd(runs_index(prefix, ns), scores)
    client.set(namespace_key(prefix, ns, "layout"), 2)
    client.set(f"{prefix}:schema_version", 2)


def test_a_layout_2_index_is_rescored_when_a_writer_connects(redis_url: str) -> None:
    prefix, ns = f"bf{uuid.uuid4().hex[:8]}", "team"
    url = f"{redis_url}?prefix={prefix}&namespace={ns}"
    client = redis.Redis.from_url(redis_url)
    try:
        store = agentrewind.connect(url)
        for run_id in ("first", "second", "third"):
            store.begin_run(run_id)
            time.sleep(0.002)
        store.put_step(make_record("first", "k", 1))  # updated last, created first
        truth = [r.run_id for r in store.list_runs()]
        store.close()
        assert truth == ["first", "third", "second"]
        # Layout 2 scored by creation, and kept a member whose run is gone.
        _to_layout_2(client, prefix, ns, {"first": 1.0, "second": 2.0, "third": 3.0, "gone": 4.0})

        reader = connect_read_only(url, None)  # reads right, writes nothing
        assert [r.run_id for r in reader.list_runs(limit=2)] == truth[:2]
        reader.close()
        assert client.get(namespace_key(prefix, ns, "layout")) == b"2"

        store = agentrewind.connect(url)
        index = _index(client, prefix, ns)
        runs = {r.run_id: r.updated_at for r in store.list_runs()}
        assert index == runs and "gone" not in index
        assert [r.run_id for r in store.list_runs(limit=2)] == truth[:2]
        assert client.get(namespace_key(prefix, ns, "layout")) == b"3"
        assert client.get(f"{prefix}:schema_version") == b"3"  # layout-2 writers now refuse
        store.close()
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_a_fresh_namespace_leaves_older_processes_running(redis_url: str) -> None:
    prefix = f"bf{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    try:
        store = agentrewind.connect(f"{redis_url}?prefix={prefix}&namespace=new")
        store.begin_run("r")
        store.close()
        assert client.get(namespace_key(prefix, "new", "layout")) == b"3"
        assert client.get(f"{prefix}:schema_version") == b"1"  # nothing to upgrade: no bump
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_run_keys_and_index_keep_cluster_slots(redis_cluster: str) -> None:
    """Each run's keys share one slot; the index is its own key (written after the script)."""
    ns = f"ix-{uuid.uuid4().hex[:8]}"
    store = agentrewind.connect(f"{redis_cluster}?namespace={ns}")
    try:
        ids = [f"run-{i}" for i in range(30)]  # spread over the three nodes
        for run_id in ids:
            store.begin_run(run_id, ttl=0.3 if run_id.endswith("7") else None)
        time.sleep(0.5)
        live = [r for r in reversed(ids) if not r.endswith("7")]
        assert [r.run_id for r in store.list_runs(limit=5)] == live[:5]
        assert store.prune(keep_last=3) == len(live) - 3
        assert [r.run_id for r in store.list_runs()] == live[:3]
    finally:
        store.close()
