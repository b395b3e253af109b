"""The store conformance suite: the contract every `Store` must keep, as pytest tests.

Any store, ours or a third party's, proves itself by subclassing `StoreConformance` in a test
module and saying how to open it in a namespace; pytest then collects every contract test for
it. Needs `pytest` (a test dependency, not a runtime one of agentrewind).

Example:
    ```python
    import pytest
    from agentrewind.testing import StoreConformance
    from my_package import MyStore


    class TestMyStore(StoreConformance):
        def open_store(self, namespace: str) -> MyStore:
            return MyStore("my://localhost", namespace=namespace)
    ```
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Literal

import pytest

from ..errors import LeaseLostError
from ..records import INDEX_FROM, RunMetrics, StepIndex, StepRecord
from ..stores import Store
from .closing import ClosingContract
from .fencing import FencingContract
from .lifecycle import LifecycleContract

__all__ = ["StoreConformance", "make_record"]


def make_record(
    run_id: str,
    key: str,
    seq: int,
    *,
    status: Literal["started", "completed", "failed"] = "completed",
    output: object = None,
) -> StepRecord:
    """A step record with `step_id` `id-<key>`, for store tests."""
    now = time.time()
    return StepRecord(
        run_id=run_id,
        step_id=f"id-{key}",
        key=key,
        kind="custom",
        name=key,
        status=status,
        seq=seq,
        output=output,
        meta={"n": seq},
        created_at=now,
        updated_at=now,
    )


rec = make_record


class StoreConformance(FencingContract, LifecycleContract, ClosingContract):
    """Contract tests for a `Store`; subclass it and override `open_store`.

    It includes the fencing contract (`FencingContract`): writes carrying an owner land only
    while that owner holds the run's lease, deletes skip leased runs unless forced, and a
    `running` run whose owner died lists as `crashed`; the run-lifecycle contract
    (`LifecycleContract`: `take_lease`, cancel marks, recovery, resume); and the closing
    contract (`ClosingContract`): `close()` waits for the operations in flight, then refuses
    new ones.

    Each test opens the store in a fresh namespace (`open_store`) and closes it after
    (`close_store`, which may also delete what the test left behind).
    """

    def open_store(self, namespace: str) -> Store:
        """Open the store under test in `namespace` (override this)."""
        raise NotImplementedError("override open_store(namespace) in your conformance subclass")

    def close_store(self, store: Store, namespace: str) -> None:
        """Close a store `open_store` returned; override to also remove its data."""
        store.close()

    @pytest.fixture
    def namespace(self) -> str:
        """A namespace no other test uses."""
        return f"conformance-{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def store(self, namespace: str) -> Iterator[Store]:
        """The store under test, opened in a fresh namespace."""
        opened = self.open_store(namespace)
        try:
            yield opened
        finally:
            self.close_store(opened, namespace)

    # -- steps ------------------------------------------------------------------------------
    def test_steps_round_trip_in_seq_order(self, store: Store) -> None:
        store.put_steps([rec("r", "b", 2, output={"x": [1, 2]}), rec("r", "a", 1, output="one")])
        store.put_step(rec("r", "c", 3, status="started"))
        steps = store.load_steps("r")
        assert [s.key for s in steps] == ["a", "b", "c"]
        assert steps[1].output == {"x": [1, 2]}
        assert steps[2].status == "started"
        assert store.get_step("r", "id-b") == steps[1]
        assert store.get_step("r", "missing") is None
        assert store.load_steps("other") == []

    def test_an_index_of_a_long_run_says_what_its_records_say(self, store: Store) -> None:
        """A store that opens runs from an index (`_load_index`, optional) keeps it exact."""
        load_index = getattr(store, "_load_index", None)
        if load_index is None:
            pytest.skip("the store opens runs from their records (no _load_index)")
        store.begin_run("r")
        statuses: list[Literal["started", "completed", "failed"]] = [
            "completed",
            "started",
            "failed",
        ]
        records = [rec("r", f"k{i}", i + 1, status=statuses[i % 3]) for i in range(INDEX_FROM)]
        records[1] = dataclasses.replace(records[1], meta={"recorded": True})
        store.put_steps(records)
        store.put_step(dataclasses.replace(records[5], output="replaced"))  # an upsert
        index = load_index("r")
        assert isinstance(index, StepIndex)
        stored = {r.key: r for r in store.load_steps("r")}
        assert index.sites == {k: r.site for k, r in stored.items()}
        assert index.sites["k1"][2] and not index.sites["k4"][2]  # recorded, started
        assert (index.seq, index.last_step_id) == (INDEX_FROM, f"id-k{INDEX_FROM - 1}")
        assert store._load_step("r", "k5") == stored["k5"]  # type: ignore[attr-defined]
        assert store._load_step("r", "nope") is None  # type: ignore[attr-defined]
        assert load_index("missing") == []
        store.begin_run("few")
        store.put_steps([rec("few", "b", 2), rec("few", "a", 1)])
        assert load_index("few") == store.load_steps("few")  # short runs: every record

    def test_upsert_replaces_by_key(self, store: Store) -> None:
        store.put_step(rec("r", "a", 1, status="started"))
        store.put_step(rec("r", "a", 1, status="completed", output=42))
        steps = store.load_steps("r")
        assert len(steps) == 1 and steps[0].status == "completed" and steps[0].output == 42

    def test_a_write_that_need_not_be_durable_is_still_a_whole_write(self, store: Store) -> None:
        """`durable=False` only skips the wait for the disk: same records, same fence."""
        store.begin_run("r")
        store.put_step(rec("r", "a", 1, status="started"), durable=False)
        assert [(s.key, s.status) for s in store.load_steps("r")] == [("a", "started")]
        store.put_steps([rec("r", "a", 1, output=7), rec("r", "b", 2)], durable=False)
        store.put_step(rec("r", "c", 3))  # and a durable write after it
        steps = store.load_steps("r")
        assert [(s.key, s.status, s.output) for s in steps] == [
            ("a", "completed", 7),
            ("b", "completed", None),
            ("c", "completed", None),
        ]
        assert store.acquire_lease("r", "owner-1", 30).acquired
        with pytest.raises(LeaseLostError):
            store.put_step(rec("r", "d", 4), owner="owner-2", durable=False)
        assert "d" not in {s.key for s in store.load_steps("r")}

    def test_get_step_by_a_replaced_step_id_finds_nothing(self, store: Store) -> None:
        store.put_step(rec("r", "a", 1))
        second = rec("r", "a", 1)
        second.step_id = "id-new"
        store.put_step(second)  # same key, new step id
        assert store.get_step("r", "id-a") is None
        found = store.get_step("r", "id-new")
        assert found is not None and found.step_id == "id-new"

    # -- runs -------------------------------------------------------------------------------
    def test_runs_listing_status_and_metrics(self, store: Store) -> None:
        store.begin_run("r1")
        time.sleep(0.01)
        store.begin_run("r2")
        store.end_run("r1", "failed", RunMetrics(steps=2, failures=1, seconds_saved=0.5))
        store.begin_run("r1")
        store.end_run("r1", "completed", RunMetrics(steps=1, replay_hits=2, tokens_saved=30))
        runs = store.list_runs()
        assert [r.run_id for r in runs] == ["r1", "r2"]  # r1 updated last
        r1 = store.get_run("r1")
        assert r1 is not None and r1.status == "completed"
        assert r1.metrics == RunMetrics(
            steps=3, replay_hits=2, seconds_saved=0.5, tokens_saved=30, failures=1
        )
        assert store.list_runs(limit=1)[0].run_id == "r1"
        assert store.get_run("nope") is None

    def test_list_runs_order_and_limit_follow_every_kind_of_write(self, store: Store) -> None:
        writes: list[Callable[[str], object]] = [
            lambda r: store.put_step(rec(r, "b", 2)),
            lambda r: store.end_run(r, "completed", RunMetrics(steps=1)),
            lambda r: store.set_head(r, "main", "id-a"),
            lambda r: store.set_ttl(r, 3600),
            lambda r: store.begin_run(r),
        ]
        for i in range(6):
            store.begin_run(f"r{i}")
            store.put_step(rec(f"r{i}", "a", 1))
            time.sleep(0.003)
        newest = [f"r{i}" for i in reversed(range(6))]
        assert [r.run_id for r in store.list_runs(limit=3)] == newest[:3]
        for i, write in enumerate(writes):  # each write moves its run to the top
            time.sleep(0.003)
            write(f"r{i}")
            newest.remove(f"r{i}")
            newest.insert(0, f"r{i}")
            assert [r.run_id for r in store.list_runs(limit=2)] == newest[:2]
        runs = store.list_runs()
        assert [r.run_id for r in runs] == newest
        assert all(a.updated_at >= b.updated_at for a, b in itertools.pairwise(runs))
        store.delete_run("r4")
        assert [r.run_id for r in store.list_runs(limit=2)] == [r for r in newest if r != "r4"][:2]
        assert store.list_runs(limit=0) == []

    def test_prune_deletes_many_runs_and_keeps_the_newest(self, store: Store) -> None:
        for i in range(40):
            store.begin_run(f"r{i:02d}")
            store.put_step(rec(f"r{i:02d}", "a", 1))
        time.sleep(0.003)
        for i in (3, 39, 38):  # written last: the three newest
            store.put_step(rec(f"r{i:02d}", "b", 2))
            time.sleep(0.003)
        assert store.acquire_lease("r10", "owner-live", 30).acquired
        result = store.prune(keep_last=3)
        assert result == 36 and result.skipped == ("r10",)
        assert [r.run_id for r in store.list_runs()] == ["r38", "r39", "r03", "r10"]
        assert store.load_steps("r00") == [] and store.get_run("r00") is None
        assert [r.key for r in store.load_steps("r03")] == ["a", "b"]
        assert store.prune(keep_last=0, force=True) == 4 and store.list_runs() == []

    def test_delete_run_removes_everything(self, store: Store) -> None:
        store.begin_run("r")
        store.put_step(rec("r", "a", 1))
        store.set_head("r", "main", "id-a")
        assert store.delete_run("r") is True
        assert store.get_run("r") is None
        assert store.load_steps("r") == []
        assert store.get_heads("r") == {}
        assert store.delete_run("r") is False

    # -- heads ------------------------------------------------------------------------------
    def test_heads(self, store: Store) -> None:
        store.set_head("r", "main", "s1")
        store.set_head("r", "alt", "s2")
        store.set_head("r", "main", "s3")
        assert store.get_heads("r") == {"main": "s3", "alt": "s2"}
        store.set_head("r", "alt", None)
        assert store.get_heads("r") == {"main": "s3"}

    def test_put_steps_moves_heads_atomically(self, store: Store) -> None:
        store.put_steps([rec("r", "a", 1), rec("r", "b", 2)], heads={"main": "id-b", "alt": "id-a"})
        assert store.get_heads("r") == {"main": "id-b", "alt": "id-a"}
        assert [s.key for s in store.load_steps("r")] == ["a", "b"]
        with pytest.raises(ValueError, match="exactly one run"):
            store.put_steps([rec("r", "c", 3), rec("other", "d", 1)], heads={"main": "id-c"})

    # -- namespaces -------------------------------------------------------------------------
    def test_namespaces_are_isolated(self, namespace: str) -> None:
        a = self.open_store(f"{namespace}-a")
        b = self.open_store(f"{namespace}-b")
        try:
            a.begin_run("shared-id")
            a.put_step(rec("shared-id", "k", 1, output="from a"))
            a.set_head("shared-id", "main", "id-k")
            assert b.get_run("shared-id") is None
            assert b.load_steps("shared-id") == []
            assert b.get_heads("shared-id") == {}
            assert b.list_runs() == []
            assert b.acquire_lease("shared-id", "other", 5).acquired
            assert a.acquire_lease("shared-id", "mine", 5).acquired
            b.release_lease("shared-id", "other")
            a.release_lease("shared-id", "mine")
            assert a.delete_run("shared-id") is True
            b.delete_run("shared-id")
        finally:
            self.close_store(a, f"{namespace}-a")
            self.close_store(b, f"{namespace}-b")

    # -- retention --------------------------------------------------------------------------
    def test_ttl_expires_run_and_is_refreshed_by_writes(self, store: Store) -> None:
        store.begin_run("r", ttl=0.6)
        store.put_step(rec("r", "a", 1))
        info = store.get_run("r")
        assert info is not None and info.expires_at is not None
        time.sleep(0.4)
        store.put_step(rec("r", "b", 2))  # refreshes the TTL
        time.sleep(0.4)
        assert [s.key for s in store.load_steps("r")] == ["a", "b"]
        time.sleep(0.5)
        assert store.get_run("r") is None
        assert store.load_steps("r") == []
        assert "r" not in [r.run_id for r in store.list_runs()]

    def test_set_ttl_none_keeps_run(self, store: Store) -> None:
        store.begin_run("r", ttl=0.3)
        store.set_ttl("r", None)
        time.sleep(0.5)
        info = store.get_run("r")
        assert info is not None and info.expires_at is None

    def test_prune_keep_last_and_older_than(self, store: Store) -> None:
        for i in range(5):
            store.begin_run(f"r{i}")
            store.put_step(rec(f"r{i}", "a", 1))
            time.sleep(0.01)
        assert store.prune(keep_last=3) == 2
        assert sorted(r.run_id for r in store.list_runs()) == ["r2", "r3", "r4"]
        time.sleep(0.3)
        store.put_step(rec("r4", "b", 2))
        assert store.prune(older_than=0.2) == 2
        assert [r.run_id for r in store.list_runs()] == ["r4"]

    # -- leases -----------------------------------------------------------------------------
    def test_lease_exclusive_reentrant_release(self, store: Store) -> None:
        assert store.acquire_lease("r", "owner-a", 5).acquired
        assert store.acquire_lease("r", "owner-a", 5).acquired  # renewal
        refused = store.acquire_lease("r", "owner-b", 5)
        assert not refused.acquired and refused[1] == "owner-a" and 0 < refused[2] <= 5
        store.release_lease("r", "owner-b")  # not the holder: no effect
        assert not store.acquire_lease("r", "owner-b", 5).acquired
        store.release_lease("r", "owner-a")
        assert store.acquire_lease("r", "owner-b", 5).acquired

    def test_lease_expiry_allows_takeover(self, store: Store) -> None:
        assert store.acquire_lease("r", "owner-a", 0.2).acquired
        assert not store.acquire_lease("r", "owner-b", 5).acquired
        time.sleep(0.3)
        assert store.acquire_lease("r", "owner-b", 5).acquired

    def test_lease_of_dead_local_process_is_taken_over(self, store: Store) -> None:
        proc = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        dead_owner = f"{socket.gethostname()}:{proc.stdout.strip()}:abcd"
        assert store.acquire_lease("r", dead_owner, 60).acquired
        assert store.acquire_lease("r", "owner-b", 5).acquired
        live_owner = f"{socket.gethostname()}:{os.getppid()}:abcd"  # alive: our parent
        assert store.acquire_lease("r2", live_owner, 60).acquired
        assert not store.acquire_lease("r2", "owner-b", 5).acquired

    # -- async ------------------------------------------------------------------------------
    def test_async_twins(self, store: Store) -> None:
        asyncio.run(self._async_twins(store))

    async def _async_twins(self, store: Store) -> None:
        info = await store.abegin_run("r")
        assert info.status == "running"
        await store.aput_steps([rec("r", "a", 1, output=[1]), rec("r", "b", 2)])
        await store.aput_step(rec("r", "c", 3))
        assert [s.key for s in await store.aload_steps("r")] == ["a", "b", "c"]
        found = await store.aget_step("r", "id-a")
        assert found is not None and found.output == [1]
        await store.aset_head("r", "main", "id-c")
        assert await store.aget_heads("r") == {"main": "id-c"}
        assert (await store.aacquire_lease("r", "o", 5)).acquired
        await store.arelease_lease("r", "o")
        await store.aend_run("r", "completed", RunMetrics(steps=3))
        run = await store.aget_run("r")
        assert run is not None and run.metrics.steps == 3
        assert [r.run_id for r in await store.alist_runs()] == ["r"]
        await store.aset_ttl("r", None)
        # many concurrent writers through the async API do not serialise into errors
        await asyncio.gather(*(store.aput_step(rec("r", f"k{i}", 10 + i)) for i in range(20)))
        assert len(await store.aload_steps("r")) == 23
        assert await store.aprune(keep_last=0) == 1
        assert await store.adelete_run("r") is False
