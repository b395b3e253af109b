"""Closing a store from an event loop's thread while that loop's operation runs in a worker.

The async twins of stores without native async run their sync method in a worker thread; a
sync `close()` called on the loop's thread must wait for that thread (it can progress while
the loop is blocked) instead of closing the connection under it (with SQLite: a segfault).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import agentrewind


async def test_a_sync_close_on_the_loop_waits_for_its_operation_in_a_worker_thread(
    tmp_path: Path,
) -> None:
    store: Any = agentrewind.connect(f"sqlite:///{tmp_path / 'close.db'}")
    store.begin_run("r")
    started, go_on = threading.Event(), threading.Event()
    real = store.get_run

    def slow(run_id: str) -> Any:  # what `aget_run` runs in its worker thread
        started.set()
        go_on.wait(5)
        return real(run_id)

    store.get_run = slow
    reading = asyncio.ensure_future(store.aget_run("r"))
    assert await asyncio.to_thread(started.wait, 5)
    threading.Timer(0.3, go_on.set).start()
    t0 = time.monotonic()
    store.close()  # on the loop's own thread, the read still in its worker
    waited = time.monotonic() - t0
    info = await reading
    assert waited >= 0.25, waited  # it waited for the worker's read
    assert info is not None and info.run_id == "r"  # which read a store still open
