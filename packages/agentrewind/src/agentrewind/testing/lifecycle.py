"""The run-lifecycle part of the store contract: workflows, recovery, cancel and resume.

Mixed into `agentrewind.testing.StoreConformance`, so every store, including third-party
ones, proves it: `take_lease` is a compare-and-set; a cancel mark fences the owner off
(`RunCancelledError`), shows as `cancelled` and is never recovered; a crashed workflow run is
recovered once with its recorded arguments, and `resume` takes a cancelled one back.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import pytest

from ..errors import RunCancelledError, RunFinishedError, RunNotFoundError, WorkflowNotFoundError
from ..journal import Middleware
from ..stores import Store

__all__ = ["LifecycleContract"]


def _dead_owner() -> str:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return f"{socket.gethostname()}:{int(proc.stdout)}:dead"


class LifecycleContract:
    """Contract tests of `take_lease`, cancel marks, recovery and resume."""

    def test_take_lease_is_a_compare_and_set(self, store: Store) -> None:
        assert store.take_lease("r", "A", 30, holder="").acquired  # free: taken
        refused = store.take_lease("r", "B", 30, holder="")
        assert not refused.acquired and refused[1] == "A"
        assert not store.take_lease("r", "B", 30, holder="C").acquired  # not the holder
        assert store.take_lease("r", "B", 30, holder="A").acquired  # the holder it names
        assert not store.acquire_lease("r", "A", 30).acquired
        assert store.take_lease("r", "B", 30, holder="X").acquired  # already B's

    def test_a_cancel_fences_the_owner_and_is_never_recovered(self, store: Store) -> None:
        mw = Middleware(store)
        with pytest.raises(RunCancelledError), mw.run("r") as run:
            run.step("first", lambda: 1)
            assert Middleware(store).cancel("r") is True
            assert Middleware(store).cancel("r") is False  # already cancelled
            assert store.get_run("r").status == "cancelled"  # type: ignore[union-attr]
            run.step("second", lambda: 2)  # its started marker is refused
        assert [s.name for s in store.load_steps("r")] == ["first"]
        assert {r.run_id: r.status for r in store.list_runs()} == {"r": "cancelled"}
        marked = store.get_run("r")
        assert marked is not None and abs(marked.meta["cancelled_at"] - time.time()) < 60
        assert store.crashed_runs() == []
        with pytest.raises(RunCancelledError), mw.run("r"):
            pass  # nobody takes a cancelled run
        assert mw.recover().outcomes == []

    def test_cancel_refuses_unknown_and_finished_runs(self, store: Store) -> None:
        mw = Middleware(store)
        with pytest.raises(RunNotFoundError):
            mw.cancel("nope")
        with mw.run("done") as run:
            run.step("x", lambda: 1)
        with pytest.raises(RunFinishedError):
            mw.cancel("done")
        assert store.get_run("done").status == "completed"  # type: ignore[union-attr]
        assert store.get_run("nope") is None

    def test_a_crashed_workflow_run_is_recovered_once_with_its_arguments(
        self, store: Store
    ) -> None:
        mw = Middleware(store)
        calls: list[str] = []

        @mw.workflow("order")
        def order(customer: str, *, amount: int) -> str:
            mw.step("charge")(lambda: calls.append(f"charge {customer} {amount}"))()
            return f"{customer}:{amount}"

        assert order.run("acme", amount=3, run_id="r") == "acme:3"
        # as if its process died right after: a dead owner holds a `running` run
        store.begin_run("r", owner=None)
        assert store.acquire_lease("r", _dead_owner(), 30).acquired
        assert [r.run_id for r in store.crashed_runs()] == ["r"]
        other = Middleware(store)  # the same workflow registered by another process
        other.workflow("order", order.fn)
        report = other.recover()
        assert [(o.run_id, o.workflow, o.outcome, o.result) for o in report.outcomes] == [
            ("r", "order", "completed", "acme:3")
        ]
        assert calls == ["charge acme 3"]  # replayed, not run again
        assert store.get_run("r").status == "completed"  # type: ignore[union-attr]
        assert other.recover().outcomes == []  # nothing left

    def test_runs_of_unknown_workflows_are_left_alone(self, store: Store) -> None:
        mw = Middleware(store)
        mw.workflow("known", lambda: 1)
        ghost = Middleware(store)
        ghost.workflow("ghost", lambda: 2).run(run_id="g")
        store.begin_run("g", owner=None)
        assert store.acquire_lease("g", _dead_owner(), 30).acquired
        report = mw.recover()
        assert [(o.run_id, o.outcome) for o in report.unknown] == [("g", "unknown_workflow")]
        assert store.get_run("g").status == "crashed"  # type: ignore[union-attr]
        with pytest.raises(WorkflowNotFoundError):
            mw.resume("g")
        assert store.get_run("g").status == "crashed"  # type: ignore[union-attr]

    def test_resume_takes_a_cancelled_run_back_with_its_steps_replayed(self, store: Store) -> None:
        mw = Middleware(store)
        calls: list[int] = []
        cancels: list[bool] = []

        @mw.workflow("count")
        def count(n: int) -> int:
            for i in range(n):
                mw.step(f"s{i}")(lambda i=i: calls.append(i))()
                if not cancels:  # another process cancels it once, after its first step
                    cancels.append(Middleware(store).cancel("c"))
            return n

        with pytest.raises(RunCancelledError):
            count.run(3, run_id="c")
        assert calls == [0] and cancels == [True]
        assert store.get_run("c").status == "cancelled"  # type: ignore[union-attr]
        assert asyncio.run(mw.aresume("c")) == 3
        assert calls == [0, 1, 2] and store.get_run("c").status == "completed"  # type: ignore[union-attr]
        with pytest.raises(RunFinishedError):
            mw.resume("c")

    def test_async_cancel_and_take_lease(self, store: Store) -> None:
        async def go() -> None:
            mw = Middleware(store)
            async with mw.run("a"):
                pass
            store.begin_run("a", owner=None)
            assert await mw.acancel("a") is True
            got = await store.atake_lease("a", "Z", 30, holder="")
            assert not got.acquired and got[1].startswith("cancelled:")

        asyncio.run(go())
        assert store.get_run("a").status == "cancelled"  # type: ignore[union-attr]
