"""The opt-in lease per LangGraph thread: one saver writes a thread at a time.

With `RewindSaver(..., lease=True)`, the first write of a thread takes its lease in the store
(`Store.acquire_lease`, under the name `langgraph:<thread_id>`), a keeper thread renews every
held lease each third of `lease_ttl`, and `close()` frees them. A second saver (another
process, or another saver object) writing the same thread meanwhile gets `RunLockedError`; a
saver whose lease lapsed (its process was paused or cut off longer than `lease_ttl`) gets
`LeaseLostError` on its next write, which is not applied. On SQLite and PostgreSQL the lease
is also checked inside each write's transaction; on Redis only just before the write (the
thread's keys and its lease live in different hash slots).

Deletes respect the lease, as the core's do: `delete_thread` of a thread another saver holds
is refused with `RunLockedError` (any saver, leased or not); with `force=True` it deletes the
thread and its lease, and the owner's next write fails with `DataLostError` (never a silently
dropped checkpoint).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from agentrewind.adapters import (
    DataLostError,
    LeaseLostError,
    RunLockedError,
    Store,
    make_lease_owner,
    retire_lease_owner,
)

__all__ = ["ThreadLeases", "aclaim_for_delete", "claim_for_delete", "delete_claim", "deleted_error"]

T = TypeVar("T")

VANISHED = "\x00vanished"
"""Marks a lease lost because it vanished under a live holder (a forced delete of the thread)."""

DELETE_TTL = 30.0
"""Seconds a delete holds the thread's lease (it releases it as soon as it is done)."""


def deleted_error(thread_id: str) -> DataLostError:
    """The error for a write of a leased saver whose thread was deleted under it."""
    return DataLostError(
        thread_id,
        "this LangGraph thread was deleted (with force=True, or its lease vanished) while "
        "this saver held its lease; the checkpoint was not written and the graph must stop "
        "(a new invocation starts the thread afresh)",
    )


def delete_claim(
    thread_id: str, owner: str, force: bool
) -> Generator[tuple[str, tuple[Any, ...], dict[str, Any]], Any, None]:
    """Take the thread's lease for a delete: the store calls to make (a flow, sync or async).

    Yields `(store method, args, kwargs)`; sends back each result. The delete runs while
    `owner` holds the lease (so a leased writer's writes are fenced off meanwhile), and
    releases it after; a forced one deletes the holder's lease instead.

    Raises:
        RunLockedError: Another live saver holds the thread's lease and `force` is false;
            nothing was deleted.
    """
    name = lease_name(thread_id)
    result = yield ("acquire_lease", (name, owner, DELETE_TTL), {})
    if result.acquired:
        return
    if not force:
        err = RunLockedError(thread_id, result[1], result[2])
        err.args = (f"{err.args[0]}; not deleted (pass force=True to delete it anyway)",)
        raise err
    # Forced: drop the holder's lease (and hold none), so its next write finds no lease
    # within its ttl and fails with `DataLostError`, not `LeaseLostError` naming this delete.
    yield ("delete_run", (name,), {"force": True})


def lease_name(thread_id: str) -> str:
    """The lease's run id in the store (apart from core runs named after the thread)."""
    return f"langgraph:{thread_id}"


def claim_for_delete(store: Store, thread_id: str, owner: str, force: bool) -> None:
    """`delete_claim` driven by the store's sync methods."""
    claim = delete_claim(thread_id, owner, force)
    with contextlib.suppress(StopIteration):
        call = next(claim)
        while True:
            name, args, kwargs = call
            call = claim.send(getattr(store, name)(*args, **kwargs))


async def aclaim_for_delete(store: Store, thread_id: str, owner: str, force: bool) -> None:
    """`delete_claim` driven by the store's async twins."""
    claim = delete_claim(thread_id, owner, force)
    with contextlib.suppress(StopIteration):
        call = next(claim)
        while True:
            name, args, kwargs = call
            call = claim.send(await getattr(store, f"a{name}")(*args, **kwargs))


class ThreadLeases:
    """The leases one saver holds, by thread id, and the thread that renews them.

    Args:
        store: The store holding the leases.
        ttl: Seconds a lease lasts without renewal.
    """

    def __init__(self, store: Store, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self.owner = make_lease_owner()
        self._held: dict[str, float] = {}  # thread id -> monotonic time of the last renewal
        self._lost: dict[str, str] = {}  # thread id -> who took it ('' when it lapsed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        weakref.finalize(self, retire_lease_owner, self.owner)

    def hold(self, thread_id: str) -> None:
        """Make sure this saver holds the thread's lease before a write.

        Raises:
            RunLockedError: Another live saver holds it.
            LeaseLostError: This saver held it, and it lapsed or was taken over since; the
                write must not happen (the graph's next invocation takes it again).
        """
        with self._lock:
            lost = self._lost.get(thread_id)
            renewed = self._held.get(thread_id)
        if lost == VANISHED:
            raise deleted_error(thread_id)
        if lost is not None:
            raise LeaseLostError(lease_name(thread_id), lost, 0.0, writer=self.owner)
        now = time.monotonic()
        if renewed is not None:
            if now - renewed < self.ttl:
                return
            self._mark_lost(thread_id, "")
            raise LeaseLostError(lease_name(thread_id), "", 0.0, writer=self.owner)
        result = self.store.acquire_lease(lease_name(thread_id), self.owner, self.ttl)
        if not result.acquired:
            raise RunLockedError(thread_id, result[1], result[2])
        with self._lock:
            self._held[thread_id] = now
            if self._keeper is None:
                self._keeper = threading.Thread(
                    target=self._renew_all, name="agentrewind-lg-leases", daemon=True
                )
                self._keeper.start()

    def fenced(self, thread_id: str, op: Callable[..., T]) -> Callable[..., T]:
        """`op` checking the lease atomically with its write, where the store allows it.

        On SQLite the saver's transaction checks the lease row in the same transaction
        (`SQLiteStore.check_lease_in`); on PostgreSQL each transaction of `op` (a flow)
        starts with the lease fence (`PostgresStore.fenced_flow`); elsewhere `hold` before
        the write is the check.
        """
        fenced_flow = getattr(self.store, "fenced_flow", None)
        if fenced_flow is not None:
            name, owner = lease_name(thread_id), self.owner

            def flow() -> Any:
                try:
                    return (yield from fenced_flow(name, owner, op()))
                except LeaseLostError as exc:
                    raise self._fenced_off(thread_id, exc) from exc

            return flow
        fenced_in = getattr(self.store, "fenced_in", None)
        check = getattr(self.store, "check_lease_in", None)
        if fenced_in is None and check is None:
            return op
        name, owner = lease_name(thread_id), self.owner

        def txn(conn: Any) -> T:
            try:
                if fenced_in is not None:
                    return fenced_in(conn, name, owner, op)  # type: ignore[no-any-return]
                if check is not None:
                    check(conn, name, owner)
            except LeaseLostError as exc:
                raise self._fenced_off(thread_id, exc) from exc
            return op(conn)

        return txn

    def _fenced_off(self, thread_id: str, exc: LeaseLostError) -> Exception:
        """What a write the store fenced off raises: the lease vanished, or another took it.

        `hold` checked just before that this saver's lease was within its ttl, so a lease
        nobody holds was deleted under it (a forced delete), not expired.
        """
        if exc.owner:
            self._mark_lost(thread_id, exc.owner)
            return exc
        self._mark_lost(thread_id, VANISHED)
        return deleted_error(thread_id)

    def deleted(self, thread_id: str) -> None:
        """This saver deleted the thread itself: forget its lease (the delete released it)."""
        with self._lock:
            self._held.pop(thread_id, None)
            self._lost.pop(thread_id, None)

    def reset(self, thread_id: str) -> None:
        """Forget a lapsed lease when a new invocation reads the thread (it takes it again)."""
        with self._lock:
            if self._lost.pop(thread_id, None) is not None:
                self._held.pop(thread_id, None)

    def _mark_lost(self, thread_id: str, holder: str) -> None:
        with self._lock:
            self._held.pop(thread_id, None)
            self._lost[thread_id] = holder

    def _renew_all(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            with self._lock:
                held = list(self._held.items())
            for thread_id, renewed in held:
                sent = time.monotonic()
                if sent - renewed >= self.ttl:  # this process stalled: never re-take it
                    self._mark_lost(thread_id, "")
                    continue
                try:
                    result = self.store.renew_lease(lease_name(thread_id), self.owner, self.ttl)
                except Exception:
                    continue
                if result.acquired:
                    with self._lock:
                        if thread_id in self._held:
                            self._held[thread_id] = sent
                else:  # nobody holds it within its ttl: it was deleted under this saver
                    self._mark_lost(thread_id, result[1] or VANISHED)

    def close(self) -> None:
        """Stop renewing and free every lease this saver holds."""
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=2.0)
        with self._lock:
            held, self._held = list(self._held), {}
        try:
            for thread_id in held:
                self.store.release_lease(lease_name(thread_id), self.owner)
        finally:
            retire_lease_owner(self.owner)
