"""Writer marks: which live process is writing a LangGraph thread, so a dead one reads `crashed`.

A LangGraph thread stopped mid-run looks the same in the store whether its process was killed
or it stopped at a static interrupt (`interrupt_before`): a checkpoint with nodes still to run
and nothing after it. What differs is the writer: a saver marks each thread it writes (once
per thread, at its first checkpoint, from a background thread) under the store's lease table
as `langgraph-writer:<thread_id>`, owned by `host:pid:token`; it removes a mark when the
thread's graph finishes, and every mark when it closes or its interpreter exits. An
unfinished thread then reads

- `running` while its mark names a live process (or a `lease=True` saver holds its lease),
- `crashed` when the mark names a process that is gone: on this host at once (its pid is
  gone); on another host once its heartbeat lapses (`BEAT_TTL` after the last one),
- `paused` when there is no mark (the saver stopped on purpose, as at a static interrupt).

The heartbeat is a second entry, `langgraph-writer-beat:<thread_id>`, that the marks' thread
renews every `BEAT_TTL / 3` seconds while the process holds the mark; the mark itself lasts
`MARK_TTL` (renewed with the thread's checkpoints), so a writer that died on another host
reads `crashed` for that long, then `paused`.

A mark is not a lock: a second saver writing the thread meanwhile leaves the first one's mark
in place. With `lease=True` the thread's lease is the mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import weakref
from typing import Any

from agentrewind.adapters import (
    Store,
    lease_owner_is_dead,
    lease_owner_is_local,
    make_lease_owner,
    retire_lease_owner,
)

from ._lease import lease_name

__all__ = [
    "BEAT_TTL", "MARKS", "MARK_TTL", "WriterMarks", "beat_name", "mark_name", "thread_writer",
    "writer_of",
]  # fmt: skip

MARKS = "agentrewind-lg-marks"
"""The name of the marks' thread (the sync API) and of the marks' task (the async API)."""
MARK_TTL = 7 * 86400.0
"""Seconds a mark lasts after the checkpoint that last renewed it (renewed at most each half)."""
BEAT_TTL = 60.0
"""Seconds a writer's heartbeat lasts; its marks' thread renews it every third of that."""


def mark_name(thread_id: str) -> str:
    """The mark's name in the store's lease table."""
    return f"langgraph-writer:{thread_id}"


def beat_name(thread_id: str) -> str:
    """The heartbeat's name in the store's lease table."""
    return f"langgraph-writer-beat:{thread_id}"


def writer_of(store: Store, name: str) -> str:
    """Who holds lease or mark `name` unexpired ('' when nobody): a read, nothing is taken.

    Reads the store's lease record directly (the CLI opens stores read-only); a store
    without a known layout is asked through `renew_lease` for an owner that holds nothing,
    which never writes and reports the holder.
    """
    now = time.time()
    row: Any = None
    if store.scheme == "sqlite":
        with store.db.read() as conn:  # type: ignore[attr-defined]
            row = conn.execute(_SQLITE_LEASE, (store.namespace, name)).fetchone()
    elif store.scheme == "postgresql":
        row = store.db.fetchone(store.sql("GET_LEASE"), (store.namespace, name))  # type: ignore[attr-defined]
        now = float(row[2]) if row is not None else now  # the server's clock
    elif store.scheme == "redis":
        key = store._keys(name).lease  # type: ignore[attr-defined]
        with store.translate_errors():  # type: ignore[attr-defined]
            owner = store.client.get(key)  # type: ignore[attr-defined]
        return owner.decode() if isinstance(owner, bytes) else str(owner or "")
    else:
        return str(store.renew_lease(name, "agentrewind-probe", 1.0)[1])
    return str(row[0]) if row is not None and float(row[1]) > now else ""


_SQLITE_LEASE = "SELECT owner, expires_at FROM ar_leases WHERE ns = ? AND run_id = ?"


class WriterMarks:
    """The marks one saver holds, by thread id; released by `close` or at interpreter exit.

    Marks are written and removed off the checkpoint's path (a thread's first checkpoint
    costs no extra store round trip): by a background thread for the sync API (`mark`), by a
    task on the running loop for the async API (`amark`); a process killed within
    milliseconds of a thread's first checkpoint may leave it unmarked (`paused`). Only the
    background thread takes over a mark left by a writer that died on another host.

    Args:
        store: The store whose lease table holds the marks.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.owner = make_lease_owner()
        self._marked: dict[str, float] = {}  # thread id -> monotonic time of the last mark
        self._lock = threading.Lock()
        self._todo: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []  # the marks' thread, once started
        # The async API's marks' task: (its loop, its queue, the task), one loop at a time.
        self._tasks: tuple[Any, asyncio.Queue[tuple[str, str] | None], asyncio.Task[None]] | None
        self._tasks = None
        self._at_exit = weakref.finalize(
            self, _release, store, self.owner, self._marked, self._todo, self._workers
        )

    def mark(self, thread_id: str, finished: bool = False) -> None:
        """Note a checkpoint of `thread_id` by this process.

        The thread is marked at its first checkpoint (and again each half `MARK_TTL`); a
        checkpoint with nothing left to run (`finished`) removes the mark, so only threads
        in flight hold one. Never fails the checkpoint: a store that cannot take the mark
        leaves the thread unmarked (it reads `paused`, not `crashed`, if this process dies).
        """
        with self._lock:
            op = self._decide(thread_id, finished)
            if op is None:
                return
            if not self._workers:
                worker = threading.Thread(target=self._work, name=MARKS, daemon=True)
                worker.start()
                self._workers.append(worker)
        self._todo.put((op, thread_id))

    def _decide(self, thread_id: str, finished: bool) -> str | None:
        """`mark`, `release` or nothing to write for a checkpoint (under `_lock`)."""
        now = time.monotonic()
        last = self._marked.get(thread_id)
        if finished:
            if last is None:
                return None
            del self._marked[thread_id]
            return "release"
        if last is not None and now - last < MARK_TTL / 2:
            return None
        self._marked[thread_id] = now
        return "mark"

    def amark(self, thread_id: str, finished: bool = False) -> None:
        """`mark` for the async API: the marks' task writes it on the running loop.

        No thread is started: a task named like the marks' thread, one per event loop, writes
        the marks in order, off the checkpoint's path, and renews their heartbeats every
        `BEAT_TTL / 3` while the loop runs (a writer on another host whose loop stopped then
        reads `crashed` once they lapse; on this host its pid tells).
        """
        with self._lock:
            op = self._decide(thread_id, finished)
        if op is None:
            return
        loop = asyncio.get_running_loop()
        if self._tasks is None or self._tasks[0] is not loop or self._tasks[2].done():
            todo: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
            task = loop.create_task(self._atasks(todo), name=MARKS)
            self._tasks = (loop, todo, task)
        self._tasks[1].put_nowait((op, thread_id))

    async def _atasks(self, todo: asyncio.Queue[tuple[str, str] | None]) -> None:
        every = BEAT_TTL / 3
        beat_at = time.monotonic() + every
        while True:
            try:
                wait = max(beat_at - time.monotonic(), 0.0)
                item = await asyncio.wait_for(todo.get(), timeout=wait)
            except TimeoutError:
                item = ("beat", "")
            if item is None:
                return
            op, thread_id = item
            if op == "beat" or time.monotonic() >= beat_at:
                with self._lock:
                    threads = list(self._marked)
                for marked in threads:
                    with contextlib.suppress(Exception):
                        await self.store.aacquire_lease(beat_name(marked), self.owner, BEAT_TTL)
                beat_at = time.monotonic() + every
            if op != "beat":
                await self._aapply(op, thread_id)

    async def _aapply(self, op: str, thread_id: str) -> None:
        store, owner = self.store, self.owner
        try:
            if op == "mark":
                await store.aacquire_lease(beat_name(thread_id), owner, BEAT_TTL)
                await store.aacquire_lease(mark_name(thread_id), owner, MARK_TTL)
            else:
                await store.arelease_lease(mark_name(thread_id), owner)
                await store.arelease_lease(beat_name(thread_id), owner)
        except Exception:
            if op == "mark":
                with self._lock:
                    self._marked.pop(thread_id, None)

    async def aclose(self) -> None:
        """Async twin of `close`: the marks' task ends, then every mark goes (on the loop)."""
        tasks, self._tasks = self._tasks, None
        if tasks is not None and tasks[0] is asyncio.get_running_loop() and not tasks[2].done():
            tasks[1].put_nowait(None)
            with contextlib.suppress(Exception):
                await tasks[2]
        if not self._workers:
            with self._lock:
                threads = list(self._marked)
                self._marked.clear()
            for thread_id in threads:
                with contextlib.suppress(Exception):
                    await self.store.arelease_lease(mark_name(thread_id), self.owner)
                    await self.store.arelease_lease(beat_name(thread_id), self.owner)
        self.close()

    def _work(self) -> None:
        every = BEAT_TTL / 3
        beat_at = time.monotonic() + every
        while True:
            try:
                item = self._todo.get(timeout=max(beat_at - time.monotonic(), 0.0))
            except queue.Empty:
                item = ("beat", "")
            if item is None:
                return
            op, thread_id = item
            if op == "beat" or time.monotonic() >= beat_at:
                self._beat()
                beat_at = time.monotonic() + every
            if op != "beat":
                self._apply(op, thread_id)

    def _apply(self, op: str, thread_id: str) -> None:
        store, owner = self.store, self.owner
        try:
            if op == "mark":
                beat, mark = beat_name(thread_id), mark_name(thread_id)
                beating = writer_of(store, beat)
                store.acquire_lease(beat, owner, BEAT_TTL)  # first: a marked writer beats
                taken, holder, _ = store.acquire_lease(mark, owner, MARK_TTL)
                if not taken and holder and beating != holder:  # its writer died elsewhere
                    store.take_lease(mark, owner, MARK_TTL, holder=holder)
            else:
                store.release_lease(mark_name(thread_id), owner)
                store.release_lease(beat_name(thread_id), owner)
        except Exception:
            if op == "mark":
                with self._lock:
                    self._marked.pop(thread_id, None)

    def _beat(self) -> None:
        """Renew the heartbeat of every thread this process marks (a failed one is retried)."""
        with self._lock:
            threads = list(self._marked)
        for thread_id in threads:
            with contextlib.suppress(Exception):
                self.store.acquire_lease(beat_name(thread_id), self.owner, BEAT_TTL)

    def close(self) -> None:
        """Remove every mark of this saver: its threads stopped on purpose."""
        self._at_exit()


def _release(
    store: Store,
    owner: str,
    marked: dict[str, float],
    todo: queue.SimpleQueue[tuple[str, str] | None],
    workers: list[threading.Thread],
) -> None:
    # The marks' thread first writes what it was given (a mark written after its release
    # would outlive this process), then every mark is removed.
    for worker in workers:
        todo.put(None)
        worker.join(timeout=5.0)
    threads = list(marked)
    marked.clear()
    try:
        for thread_id in threads:
            with contextlib.suppress(Exception):
                store.release_lease(mark_name(thread_id), owner)
                store.release_lease(beat_name(thread_id), owner)
    finally:
        retire_lease_owner(owner)


def thread_writer(store: Store, thread_id: str) -> tuple[str, bool]:
    """`(holder, live)` of the thread's lease, else of its writer mark; `('', False)`: none.

    A mark's holder on this host is live while its process exists (its pid tells); one on
    another host, whose pid cannot be checked, while it renews its heartbeat.
    """
    holder = writer_of(store, lease_name(thread_id))
    if holder:
        return holder, not lease_owner_is_dead(holder)
    holder = writer_of(store, mark_name(thread_id))
    if not holder:
        return "", False
    if lease_owner_is_local(holder):  # its pid tells
        return holder, not lease_owner_is_dead(holder)
    return holder, writer_of(store, beat_name(thread_id)) == holder
