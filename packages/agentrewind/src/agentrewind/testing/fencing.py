"""The fencing part of the store contract (issue 11): leases guard every write and delete.

Mixed into `agentrewind.testing.StoreConformance`, so every store, including third-party
ones, proves it: a write carrying an owner lands only while that owner holds the run's lease;
a delete skips a leased run unless forced; a `running` run whose owner died lists as `crashed`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from ..errors import DataLostError, LeaseLostError, RunLockedError
from ..journal import Middleware
from ..records import RunMetrics, StepRecord
from ..stores import Store

__all__ = ["FencingContract"]


def make_record(run_id: str, key: str, seq: int, output: object = None) -> StepRecord:
    """A completed step record with `step_id` `id-<key>`."""
    return StepRecord(run_id, f"id-{key}", key, "custom", key, "completed", seq, output=output)


class FencingContract:
    """Contract tests of fenced writes, lease-safe deletes and crashed runs."""

    @staticmethod
    def _dead_owner() -> str:
        """A lease owner token naming a process on this host that has exited."""
        proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return f"{socket.gethostname()}:{int(proc.stdout)}:dead"

    @staticmethod
    def _expire(store: Store, run_id: str, owner: str) -> None:
        """Let `owner`'s lease run out, as when its process is paused past `lease_ttl`."""
        assert store.acquire_lease(run_id, owner, 0.25).acquired
        time.sleep(0.35)

    def test_a_stale_owner_cannot_write_and_the_new_owners_journal_is_untouched(
        self, store: Store
    ) -> None:
        assert store.acquire_lease("r", "A", 30).acquired
        store.begin_run("r", owner="A")
        store.put_step(make_record("r", "start", 1, "A"), owner="A")
        self._expire(store, "r", "A")
        assert store.acquire_lease("r", "B", 30).acquired
        store.begin_run("r", owner="B")
        store.put_steps(
            [make_record("r", "slow", 2, "B"), make_record("r", "next", 3, "B")], owner="B"
        )
        store.set_head("r", "main", "id-next", owner="B")
        writes: list[Callable[[], object]] = [
            lambda: store.put_step(make_record("r", "slow", 2, "A"), owner="A"),
            lambda: store.put_steps([make_record("r", "x", 9)], heads={"main": "id-x"}, owner="A"),
            lambda: store.set_head("r", "main", "id-start", owner="A"),
            lambda: store.end_run("r", "completed", RunMetrics(steps=1), owner="A"),
            lambda: store.set_ttl("r", 5, owner="A"),
            lambda: store.begin_run("r", owner="A"),
        ]
        for write in writes:
            with pytest.raises(LeaseLostError) as info:
                write()
            assert info.value.owner == "B" and "lost its lease" in str(info.value)
            assert isinstance(info.value, RunLockedError)
        assert {r.key: r.output for r in store.load_steps("r")} == {
            "start": "A",
            "slow": "B",
            "next": "B",
        }
        assert store.get_heads("r") == {"main": "id-next"}
        info_b = store.get_run("r")
        assert info_b is not None and info_b.status == "running" and info_b.metrics.steps == 0

    def test_an_expired_lease_nobody_took_still_fences(self, store: Store) -> None:
        assert store.acquire_lease("r", "A", 30).acquired
        store.begin_run("r", owner="A")
        self._expire(store, "r", "A")
        with pytest.raises(LeaseLostError, match="nobody holds it"):
            store.put_step(make_record("r", "late", 1), owner="A")
        assert store.load_steps("r") == []

    def test_renew_never_takes_a_lease_back(self, store: Store) -> None:
        assert not store.renew_lease("r", "A", 5).acquired  # never held
        assert store.acquire_lease("r", "A", 30).acquired
        assert store.renew_lease("r", "A", 30).acquired
        self._expire(store, "r", "A")
        renewed = store.renew_lease("r", "A", 30)
        assert not renewed.acquired and renewed[1] == ""
        assert store.acquire_lease("r", "B", 30).acquired
        assert tuple(store.renew_lease("r", "A", 30))[:2] == (False, "B")

    def test_unfenced_writes_still_work(self, store: Store) -> None:
        store.begin_run("r")
        store.put_step(make_record("r", "a", 1))
        store.set_head("r", "main", "id-a")
        store.end_run("r", "completed", RunMetrics())
        assert [r.key for r in store.load_steps("r")] == ["a"]

    def test_journal_split_brain_is_fenced(self, store: Store) -> None:
        """Issue 11 item 1: A pauses inside `slow` past its lease, B takes over and finishes."""
        mw = Middleware(store, lease_ttl=0.3)
        calls: list[str] = []
        who = threading.local()

        def work(name: str) -> str:
            calls.append(f"{name}:{who.name}")
            return f"{name} by {who.name}"

        b_saw: list[str] = []

        def drive_b() -> None:
            who.name = "B"
            with mw.run("job") as b:
                b_saw.append(b.step("first", work, "first"))
                b.begin("custom", "slow", {"n": 1}).complete(work("slow"))
                b.step("next", work, "next")

        who.name = "A"
        with pytest.raises(LeaseLostError) as lost, mw.run("job") as a:
            a.step("first", work, "first")
            call = a.begin("custom", "slow", {"n": 1})
            assert a._keeper is not None
            a._keeper.stop.set()  # A's process stops: its lease is no longer renewed
            a._keeper.join()
            time.sleep(0.4)
            # B (another thread here, another process in production) takes the expired run
            # over and finishes it.
            worker = threading.Thread(target=drive_b)
            worker.start()
            worker.join()
            assert b_saw == ["first by A"]
            call.complete(work("slow"))  # A wakes up: its record must not land
        assert lost.value.run_id == "job"
        outputs = {r.name: r.output for r in store.load_steps("job")}
        assert (outputs["slow"], outputs["next"]) == ("slow by B", "next by B")
        calls.clear()
        who.name = "C"
        with mw.run("job") as c:  # a third resume replays B's steps and runs nothing again
            c.step("first", work, "first")
            assert c.begin("custom", "slow", {"n": 1}).value() == "slow by B"
            assert c.step("next", work, "next") == "next by B"
        assert calls == []
        info = store.get_run("job")
        assert info is not None and info.status == "completed"

    def test_delete_and_prune_skip_a_leased_run_unless_forced(self, store: Store) -> None:
        for run_id in ("idle", "busy"):
            store.begin_run(run_id)
            store.put_step(make_record(run_id, "a", 1))
        assert store.acquire_lease("busy", "owner-1", 30).acquired
        with pytest.raises(RunLockedError, match="not deleted"):
            store.delete_run("busy")
        result = store.prune(keep_last=0)
        assert result == 1 and result.skipped == ("busy",)
        assert [r.run_id for r in store.list_runs()] == ["busy"]
        assert store.delete_run("busy", force=True)
        assert store.get_run("busy") is None and store.list_runs() == []

    def test_prune_deletes_a_run_whose_owner_died(self, store: Store) -> None:
        dead = self._dead_owner()
        assert store.acquire_lease("orphan", dead, 30).acquired
        store.begin_run("orphan", owner=dead)
        assert store.prune(keep_last=0) == 1

    def test_a_forced_delete_fences_the_owner_instead_of_resurrecting_half_a_run(
        self, store: Store
    ) -> None:
        mw = Middleware(store)
        with pytest.raises(DataLostError, match="vanished") as lost, mw.run("doomed") as run:
            run.step("one", lambda: 1)
            assert store.delete_run("doomed", force=True)
            run.step("two", lambda: 2)
        assert "force=True" in str(lost.value) and "Redis restart" in str(lost.value)
        assert store.get_run("doomed") is None
        assert store.load_steps("doomed") == [] and store.list_runs() == []
        assert store.prune() == 0

    def test_a_run_whose_owner_died_is_listed_as_crashed(self, store: Store) -> None:
        dead = self._dead_owner()
        assert store.acquire_lease("killed", dead, 30).acquired
        store.begin_run("killed", owner=dead)
        assert store.acquire_lease("paused", "P", 0.25).acquired
        store.begin_run("paused", owner="P")
        mw = Middleware(store)
        with mw.run("live"):
            with mw.run("done"):
                pass
            time.sleep(0.35)
            statuses = {r.run_id: r.status for r in store.list_runs()}
            assert statuses == {
                "killed": "crashed",
                "paused": "crashed",
                "live": "running",
                "done": "completed",
            }
            got = store.get_run("killed")
            assert got is not None and got.status == "crashed"
            crashed = {r.run_id for r in mw.crashed_runs()}
            assert crashed == {"killed", "paused"} == {r.run_id for r in store.crashed_runs()}
        with mw.run("killed") as resumed:  # a service resumes it at start-up
            assert resumed.run_id == "killed"
        assert {r.run_id for r in store.crashed_runs()} == {"paused"}

    async def test_async_twins_fence_and_list_crashed(self, store: Store) -> None:
        assert (await store.aacquire_lease("r", "A", 30)).acquired
        await store.abegin_run("r", owner="A")
        assert (await store.arenew_lease("r", "A", 0.25)).acquired
        time.sleep(0.35)
        with pytest.raises(LeaseLostError):
            await store.aput_step(make_record("r", "a", 1), owner="A")
        assert [r.run_id for r in await store.acrashed_runs()] == ["r"]
        assert (await store.aprune(keep_last=0)) == 1
