"""The async pool our stores open: psycopg_pool's, with workers that end when cancelled.

psycopg_pool swallows an `asyncio.CancelledError` that reaches a maintenance task (its
`_add_connection` logs a connect it cut short as "error connecting" and its workers catch the
rest) and the worker goes back to waiting on its queue. `asyncio.run` cancels each leftover
task once at its end and then waits for all of them: a loop that ended while one of our pools
connected in the background never closed. Ours end when their task was cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from psycopg_pool import AsyncConnectionPool, pool_async

__all__ = ["OwnAsyncPool"]

log = logging.getLogger("psycopg.pool")  # where psycopg_pool says it (see `_quiet`)


class OwnAsyncPool(AsyncConnectionPool):
    """An `AsyncConnectionPool` whose maintenance workers end when their task is cancelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.thread = threading.get_ident()
        """The thread that made it: the only one that may drive its loop while it is stopped."""

    @classmethod
    async def worker(cls, q: Any) -> None:
        """Run the pool's maintenance tasks until told to stop or cancelled."""
        while True:
            task = await q.get()
            if isinstance(task, pool_async.StopWorker):
                return
            try:
                await task.run()
            except asyncio.CancelledError:
                raise  # the loop is ending (or the pool closing): so does this worker
            except Exception as exc:
                log.warning("task run %s failed: %s: %s", task, type(exc).__name__, exc)
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise asyncio.CancelledError  # one the task swallowed (a connect cut short)
