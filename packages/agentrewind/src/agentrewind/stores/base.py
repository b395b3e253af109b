"""The store interface: sync methods implemented by each backend, async twins written once."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from ..errors import StoreError
from ..ids import check_id
from ..records import RunInfo, RunMetrics, StepRecord
from . import _gate
from .cache import CacheBackend
from .leases import LeaseResult
from .prune import PruneResult
from .queue import QueueBackend

__all__ = [
    "LeaseResult",
    "PruneResult",
    "Store",
]

P = ParamSpec("P")
T = TypeVar("T")

SCHEMA_VERSION = 1
"""Version of the stores' layout; `connect` refuses a store written by a newer one."""

_RUN_ID_METHODS = (
    "begin_run", "end_run", "get_run", "delete_run", "set_ttl", "load_steps", "get_step",
    "set_head", "get_heads", "acquire_lease", "release_lease", "take_lease",
)  # fmt: skip
_GATED_METHODS = (
    "begin_run", "end_run", "get_run", "list_runs", "crashed_runs", "delete_run", "set_ttl",
    "prune", "put_steps", "put_step", "load_steps", "get_step", "set_head", "get_heads",
    "acquire_lease", "renew_lease", "release_lease",
)  # fmt: skip
"""The store interface: each (and its async twin) passes the close gate (see `_gate`)."""


def _checking_run_id(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def method(self: Any, run_id: str, *args: Any, **kwargs: Any) -> T:
        if not (isinstance(run_id, str) and run_id.isascii()):
            check_id(run_id)
        return fn(self, run_id, *args, **kwargs)

    method._checks_run_id = True  # type: ignore[attr-defined]
    return method


class Store(abc.ABC):
    """Where runs, steps, branch heads and leases live.

    Every method is sync; each has an `a`-prefixed async twin that runs it on the
    store's worker threads, so sync and async share one implementation.

    Fencing: every write of a run takes an `owner`, the lease owner token of its writer (see
    `acquire_lease`). A write with an owner is applied only if that owner holds the run's
    unexpired lease, checked atomically with the write; otherwise nothing is written and it
    raises `LeaseLostError` (another process holds the lease, or it expired or was deleted)
    or `DataLostError` (the run's record and lease vanished: a Redis restart without
    persistence, a flush, an eviction, a forced delete). `owner=None` writes unfenced (tools
    that write runs nobody drives, such as `import`).
    """

    scheme: str = ""
    close_wait: float = 10.0
    """Seconds `close()` waits for operations in flight on other threads before it returns
    (the last of them then releases the connections)."""
    """URL scheme of the backend (`memory`, `sqlite`, `redis`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Every method taking a run id checks it on entry, in every backend, so an id no
        # store can hold fails with a ValueError naming it, never a UnicodeEncodeError.
        # (Inherited ones too: a backend may take its lease methods from a mixin.)
        for name in _RUN_ID_METHODS:
            fn = getattr(cls, name, None)
            if fn is not None and not getattr(fn, "_checks_run_id", False):
                setattr(cls, name, _checking_run_id(fn))
        # Every operation is counted while it runs and refused once `close()` started;
        # `close()` waits for those in flight (see `_gate`).
        for name in _GATED_METHODS:
            for wrap, attr in ((_gate.gated, name), (_gate.gated_async, f"a{name}")):
                fn = getattr(cls, attr)
                if not getattr(fn, "_gated", False):
                    setattr(cls, attr, wrap(fn))
        for wrap_close, attr in ((_gate.gated_close, "close"), (_gate.gated_aclose, "aclose")):
            fn = getattr(cls, attr)
            if not getattr(fn, "_gated", False):
                setattr(cls, attr, wrap_close(fn))

    def __init__(self, *, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = check_id(namespace, "namespace")
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._gate = _gate.Gate(f"{type(self).__name__} (namespace {namespace!r})")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, namespace={self.namespace!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- runs -------------------------------------------------------------------------------
    @abc.abstractmethod
    def begin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        """Create the run if needed, mark it `running` and return it.

        Args:
            run_id: The run.
            ttl: Seconds the run lives after its last write; `None` keeps the current setting.
            owner: The writer's lease owner token: fences the write (see the class docstring).
                An execution of the run opens it with its owner, which counts one more in
                `metrics.executions`.
        """

    @abc.abstractmethod
    def end_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        """Set the run's status and add `metrics` to its totals (fenced by `owner`)."""

    @abc.abstractmethod
    def get_run(self, run_id: str) -> RunInfo | None:
        """Return the run, or None when it does not exist or has expired."""

    @abc.abstractmethod
    def list_runs(self, *, limit: int = 100) -> list[RunInfo]:
        """Return up to `limit` runs, most recently updated first.

        A `running` run whose owner died (its lease expired, or its process on this host is
        gone) is listed with status `crashed`.
        """

    def crashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Runs whose owner died while they were `running`: resume them (e.g. at start-up).

        Returns:
            Up to `limit` runs with status `crashed`, most recently updated first.
        """
        return [r for r in self.list_runs(limit=1_000_000) if r.status == "crashed"][:limit]

    @abc.abstractmethod
    def delete_run(self, run_id: str, *, force: bool = False) -> bool:
        """Delete the run with all its steps, heads and lease; True if it existed.

        Args:
            run_id: The run.
            force: Delete it even while another process holds its lease; that process's
                next write then fails (`DataLostError`) instead of writing half a run back.

        Raises:
            RunLockedError: A live process holds the run's lease and `force` is False.
        """

    @abc.abstractmethod
    def set_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        """Expire the run `ttl` seconds after its last write (refreshed by writes); None: never."""

    def prune(
        self,
        *,
        keep_last: int | None = None,
        older_than: float | None = None,
        force: bool = False,
    ) -> PruneResult:
        """Delete expired runs, runs beyond the `keep_last` newest, and runs idle `older_than` s.

        A due run that a live process is driving (it holds the run's lease) is skipped and
        listed in the result's `skipped`, unless `force` is True.

        Returns:
            How many runs were deleted (an `int`), with `skipped` run ids.

        Raises:
            ValueError: `keep_last` or `older_than` is negative (it would delete every run).
        """
        from .prune import due_runs

        doomed = due_runs(self, keep_last, older_than)
        deleted = self._purge_expired()
        removed, skipped = self._delete_many(doomed, force=force) if doomed else (0, [])
        return PruneResult(deleted + removed, tuple(skipped))

    def _delete_many(self, run_ids: list[str], *, force: bool) -> tuple[int, list[str]]:
        """Delete runs as `delete_run` does, in batches where the backend can.

        Returns:
            How many were deleted, and the ones skipped because a live process leases them.
        """
        from .prune import delete_each

        return delete_each(self, run_ids, force)

    def _purge_expired(self) -> int:
        return 0

    # -- steps ------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,
    ) -> None:
        """Insert or replace steps (keyed by run and key) in one atomic write.

        Args:
            records: Steps, all of one run when `heads` is given.
            heads: Branch heads of that run to move in the same write (`{branch: step_id}`).
            owner: The writer's lease owner token: fences the write (see the class docstring).
            durable: False: the write need not wait for the disk (a crash of the machine or
                server may lose it whole, never half of it; a later durable write of the
                same store makes it durable too). For records whose loss changes nothing a
                resume does, such as a `started` marker under `on_incomplete="rerun"`.
                Stores that never wait for the disk per write ignore it.
        """

    def put_step(
        self, record: StepRecord, *, owner: str | None = None, durable: bool = True
    ) -> None:
        """Insert or replace one step atomically (fenced by `owner`; see `put_steps`)."""
        self.put_steps([record], owner=owner, durable=durable)

    @staticmethod
    def _heads_run(records: list[StepRecord], heads: dict[str, str] | None) -> str | None:
        if not heads:
            return None
        run_ids = {r.run_id for r in records}
        if len(run_ids) != 1:
            raise ValueError("put_steps(heads=...) needs records of exactly one run")
        return run_ids.pop()

    @abc.abstractmethod
    def load_steps(self, run_id: str) -> list[StepRecord]:
        """Return all steps of a run ordered by `seq`, verifying each record's checksum."""

    @abc.abstractmethod
    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        """Return one step by id, or None."""

    # -- branch heads -----------------------------------------------------------------------
    @abc.abstractmethod
    def set_head(
        self, run_id: str, branch: str, step_id: str | None, *, owner: str | None = None
    ) -> None:
        """Point `branch` of the run at `step_id` (None deletes the branch; fenced by `owner`)."""

    @abc.abstractmethod
    def get_heads(self, run_id: str) -> dict[str, str]:
        """Return `{branch: step_id}` for the run."""

    # -- leases -----------------------------------------------------------------------------
    @abc.abstractmethod
    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Take or renew the run's lease for `ttl` seconds.

        Succeeds when the lease is free, expired, already `owner`'s, or held by a dead
        process on this host. Otherwise returns the current owner and its remaining time.
        """

    @abc.abstractmethod
    def renew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Extend the lease for `ttl` seconds only if `owner` still holds it, unexpired.

        Unlike `acquire_lease`, never takes a free lease: a lease that vanished (expired,
        deleted, lost with the store's data) stays lost, so its owner stops. A failed renewal
        returns the current holder ('' when nobody) and its remaining time.
        """

    @abc.abstractmethod
    def release_lease(self, run_id: str, owner: str) -> None:
        """Release the lease if `owner` still holds it."""

    def take_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        """Compare and set: give the lease to `owner` for `ttl` seconds if `holder` holds it.

        Also succeeds when nobody holds a live lease or `owner` already does. `cancel` sets a
        cancel mark over a live owner's lease this way, and `resume` takes the mark back; a
        holder that changed meanwhile makes it fail, returning the current holder.

        Raises:
            NotImplementedError: A store written before 0.2 that does not implement it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement take_lease")

    # -- the cross-run cache (stores/cache.py) -----------------------------------------------
    @functools.cached_property
    def cache(self) -> CacheBackend:
        """The cross-run cache of this store's namespace, opened on first use."""
        return self._open_cache()

    def _open_cache(self) -> CacheBackend:
        raise StoreError(f"{type(self).__name__} has no cross-run cache")

    def _flush_cache(self) -> None:
        """Write the cache's pending counts (if it was opened): first thing of `close`."""
        flush = getattr(self.__dict__.get("cache"), "flush", None)
        if flush is not None:
            with contextlib.suppress(Exception):  # counts only: never fail a close
                flush()

    # -- durable queues (stores/queue.py) ---------------------------------------------------
    @functools.cached_property
    def queues(self) -> QueueBackend:
        """The durable queues of this store's namespace, opened on first use."""
        return self._open_queues()

    def _open_queues(self) -> QueueBackend:
        raise StoreError(f"{type(self).__name__} has no durable queues")

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Release connections and worker threads."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    # -- async twins ------------------------------------------------------------------------
    async def _in_thread(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._executor is None:
            with self._executor_lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(8, thread_name_prefix="agentrewind")
        loop = asyncio.get_running_loop()
        call = _gate.in_context(functools.partial(fn, *args, **kwargs))
        return await loop.run_in_executor(self._executor, call)

    async def abegin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        """Async twin of `begin_run`."""
        return await self._in_thread(self.begin_run, run_id, ttl=ttl, owner=owner)

    async def aend_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        """Async twin of `end_run`."""
        await self._in_thread(self.end_run, run_id, status, metrics, owner=owner)

    async def aget_run(self, run_id: str) -> RunInfo | None:
        """Async twin of `get_run`."""
        return await self._in_thread(self.get_run, run_id)

    async def alist_runs(self, *, limit: int = 100) -> list[RunInfo]:
        """Async twin of `list_runs`."""
        return await self._in_thread(self.list_runs, limit=limit)

    async def acrashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Async twin of `crashed_runs`."""
        return await self._in_thread(self.crashed_runs, limit=limit)

    async def adelete_run(self, run_id: str, *, force: bool = False) -> bool:
        """Async twin of `delete_run`."""
        return await self._in_thread(self.delete_run, run_id, force=force)

    async def aset_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        """Async twin of `set_ttl`."""
        await self._in_thread(self.set_ttl, run_id, ttl, owner=owner)

    async def aprune(
        self,
        *,
        keep_last: int | None = None,
        older_than: float | None = None,
        force: bool = False,
    ) -> PruneResult:
        """Async twin of `prune`."""
        return await self._in_thread(
            self.prune, keep_last=keep_last, older_than=older_than, force=force
        )

    async def aput_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,
    ) -> None:
        """Async twin of `put_steps`."""
        await self._in_thread(self.put_steps, records, heads=heads, owner=owner, durable=durable)

    async def aput_step(
        self, record: StepRecord, *, owner: str | None = None, durable: bool = True
    ) -> None:
        """Async twin of `put_step`."""
        await self.aput_steps([record], owner=owner, durable=durable)

    async def aload_steps(self, run_id: str) -> list[StepRecord]:
        """Async twin of `load_steps`."""
        return await self._in_thread(self.load_steps, run_id)

    async def aget_step(self, run_id: str, step_id: str) -> StepRecord | None:
        """Async twin of `get_step`."""
        return await self._in_thread(self.get_step, run_id, step_id)

    async def aset_head(
        self, run_id: str, branch: str, step_id: str | None, *, owner: str | None = None
    ) -> None:
        """Async twin of `set_head`."""
        await self._in_thread(self.set_head, run_id, branch, step_id, owner=owner)

    async def aget_heads(self, run_id: str) -> dict[str, str]:
        """Async twin of `get_heads`."""
        return await self._in_thread(self.get_heads, run_id)

    async def aacquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Async twin of `acquire_lease`."""
        return await self._in_thread(self.acquire_lease, run_id, owner, ttl)

    async def arenew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Async twin of `renew_lease`."""
        return await self._in_thread(self.renew_lease, run_id, owner, ttl)

    async def arelease_lease(self, run_id: str, owner: str) -> None:
        """Async twin of `release_lease`."""
        await self._in_thread(self.release_lease, run_id, owner)

    async def atake_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        """Async twin of `take_lease`."""
        return await self._in_thread(self.take_lease, run_id, owner, ttl, holder=holder)

    async def aclose(self) -> None:
        """Async twin of `close`."""
        self.close()
