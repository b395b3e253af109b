"""A sync call made inside a running event loop (issue 25): what the docs say it does.

`docs/concepts.md` ("Sync calls inside a running event loop"): a wrapped object's sync API
journals on the calling thread before it returns, so called on the loop's own thread it
blocks the loop for that I/O, as the sync call itself does; the async API, or the sync call
moved to a worker thread (`asyncio.to_thread`), keeps the loop free. These tests hold the
library to exactly that, on SQLite and Redis.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel


def _spy(middleware: Middleware) -> list[int]:
    """The threads the store's step writes run on."""
    threads: list[int] = []
    store: Any = middleware.store
    original = store.put_steps

    def put_steps(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    store.put_steps = put_steps
    return threads


async def test_a_sync_call_in_a_running_loop_stores_its_step_on_the_loop_thread(
    durable_url: str,
) -> None:
    middleware = Middleware(durable_url)
    threads = _spy(middleware)
    model = middleware.wrap(ScriptedChatModel(responses=["hi"]))
    loop_thread = threading.get_ident()
    assert model.invoke("hello").content == "hi"  # a sync call, inside the running loop
    assert threads and set(threads) == {loop_thread}  # the documented cost: the loop waits
    run_id = model.last_run_id
    assert run_id is not None
    assert len(middleware.store.load_steps(run_id)) == 1  # stored before invoke returned
    middleware.close()


async def test_the_same_call_on_a_worker_thread_leaves_the_loop_free(durable_url: str) -> None:
    middleware = Middleware(durable_url)
    threads = _spy(middleware)
    model = middleware.wrap(ScriptedChatModel(responses=["hi"]))
    loop_thread = threading.get_ident()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    out = await asyncio.to_thread(model.invoke, "hello")
    ticker.cancel()
    assert out.content == "hi"
    assert threads and loop_thread not in threads  # the step was written off the loop
    assert ticks > 1  # and the loop ran other tasks meanwhile
    run_id = model.last_run_id
    assert run_id is not None
    assert len(middleware.store.load_steps(run_id)) == 1
    middleware.close()
