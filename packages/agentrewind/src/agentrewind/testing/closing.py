"""The closing part of the store contract (issue 23): `close()` never pulls a connection away.

Mixed into `agentrewind.testing.StoreConformance`: `close()` waits for the operations in
flight on other threads and event loops (sync ones and async twins), then every later call,
sync or async, raises `StoreClosedError` and writes nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from ..errors import StoreClosedError
from ..records import RunMetrics
from ..stores import Store

__all__ = ["ClosingContract"]


class ClosingContract:
    """Contract tests of `Store.close` with operations in flight and after it."""

    def open_store(self, namespace: str) -> Store:  # pragma: no cover - the suite's
        raise NotImplementedError

    def test_a_closed_store_refuses_every_call_with_a_named_error(
        self, store: Store, namespace: str
    ) -> None:
        store.begin_run("kept")
        store.close()
        store.close()  # closing twice is harmless
        calls: list[Callable[[], object]] = [
            lambda: store.begin_run("new"),
            lambda: store.get_run("kept"),
            lambda: store.list_runs(),
            lambda: store.load_steps("kept"),
            lambda: store.acquire_lease("kept", "A", 30),
            lambda: store.delete_run("kept", force=True),
        ]
        for call in calls:
            with pytest.raises(StoreClosedError, match="closed"):
                call()
        with pytest.raises(StoreClosedError):
            asyncio.run(store.aget_run("kept"))
        with pytest.raises(StoreClosedError):
            asyncio.run(store.abegin_run("new"))
        reopened = self.open_store(namespace)
        try:
            assert [r.run_id for r in reopened.list_runs()] == ["kept"]  # nothing moved
        finally:
            reopened.close()

    def test_close_waits_for_runs_ending_on_other_threads(
        self, store: Store, namespace: str
    ) -> None:
        """Async runs end on another thread while the store closes; nothing crashes.

        Each call either lands whole or is refused by name, and the process survives (closing
        SQLite under its worker thread was a segmentation fault).
        """
        ended: list[str] = []
        other: list[BaseException] = []

        async def drive(i: int) -> None:
            for j in range(200):
                run_id = f"r{i}-{j}"
                try:
                    await store.abegin_run(run_id)
                    await store.aend_run(run_id, "completed", RunMetrics(steps=1))
                except StoreClosedError:
                    return
                except BaseException as exc:
                    other.append(exc)
                    return
                ended.append(run_id)

        async def main() -> None:
            await asyncio.gather(*(drive(i) for i in range(6)))

        def sync_reader() -> None:
            while True:
                try:
                    store.list_runs(limit=5)
                except StoreClosedError:
                    return
                except BaseException as exc:
                    other.append(exc)
                    return

        threads = [threading.Thread(target=asyncio.run, args=(main(),)),
                   threading.Thread(target=sync_reader)]  # fmt: skip
        for thread in threads:
            thread.start()
        while len(ended) < 5 and not other and threads[0].is_alive():
            threading.Event().wait(0.005)
        store.close()
        for thread in threads:
            thread.join(60)
        assert not other, other
        assert ended, "no run ended before close"
        reopened = self.open_store(namespace)
        try:
            for run_id in ended:  # every call that returned is in the store, whole
                info = reopened.get_run(run_id)
                assert info is not None and info.status == "completed", run_id
        finally:
            reopened.close()
