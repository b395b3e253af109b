"""In-process store: the reference backend and the fastest for tests."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..records import RunInfo, RunMetrics, StepIndex, StepRecord, open_journal
from .base import LeaseResult, Store
from .cache import CacheBackend, MemoryCache
from .leases import (
    cancel_meta,
    check_fence,
    lease_is_live,
    lease_owner_is_dead,
    leased_error,
    run_status,
)
from .queue import MemoryQueues, QueueBackend

__all__ = ["MemoryStore"]


class _Run:
    __slots__ = ("heads", "info", "lease", "seqs", "steps", "ttl")

    def __init__(self, info: RunInfo) -> None:
        self.info = info
        self.steps: dict[str, bytes] = {}
        self.seqs: dict[str, tuple[int, str]] = {}  # key -> (seq, step_id), for `_load_index`
        self.heads: dict[str, str] = {}
        self.lease: tuple[str, float] | None = None
        self.ttl: float | None = None


class _Space:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.namespaces: dict[str, dict[str, _Run]] = {}
        self.caches: dict[str, dict[str, Any]] = {}  # namespace -> `MemoryCache` data
        self.queues: dict[str, dict[str, Any]] = {}  # namespace -> `MemoryQueues` data


_NAMED: dict[str, _Space] = {}
_NAMED_LOCK = threading.Lock()


class MemoryStore(Store):
    """Keeps everything in this process. `memory://NAME` shares data between stores by name.

    Records are kept encoded, exactly as the other backends keep them, so serialization and
    checksum behaviour is identical.
    """

    scheme = "memory"

    def __init__(self, name: str = "", *, namespace: str = "default") -> None:
        super().__init__(url=f"memory://{name}", namespace=namespace)
        if name:
            with _NAMED_LOCK:
                self._space = _NAMED.setdefault(name, _Space())
        else:
            self._space = _Space()
        self._lock = self._space.lock

    @property
    def _runs(self) -> dict[str, _Run]:
        return self._space.namespaces.setdefault(self.namespace, {})

    def _live(self, run_id: str) -> _Run | None:
        run = self._runs.get(run_id)
        if (
            run is not None
            and run.info.expires_at is not None
            and run.info.expires_at < time.time()
        ):
            del self._runs[run_id]
            return None
        return run

    def _touch(self, run: _Run, now: float) -> None:
        run.info.updated_at = now
        run.info.expires_at = None if run.ttl is None else now + run.ttl

    def _ensure(self, run_id: str, now: float) -> _Run:
        run = self._live(run_id)
        if run is None:
            run = self._runs[run_id] = _Run(RunInfo(run_id, "running", now, now))
        return run

    def _fenced(self, run_id: str, owner: str | None, now: float, needs_run: bool = True) -> _Run:
        """The run to write, after the fence check of a write by `owner` (under the lock)."""
        if owner is not None:
            run = self._live(run_id)
            lease = None if run is None else run.lease
            check_fence(run_id, owner, lease, now, run_exists=run is not None, needs_run=needs_run)
        return self._ensure(run_id, now)

    def begin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        now = time.time()
        with self._lock:
            run = self._fenced(run_id, owner, now, needs_run=False)
            if ttl is not None:
                run.ttl = ttl
            run.info.status = "running"
            if owner is not None:  # an execution opening the run
                run.info.metrics.executions += 1
            self._touch(run, now)
            return _copy(run, None)

    def end_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        now = time.time()
        with self._lock:
            run = self._fenced(run_id, owner, now)
            run.info.status = status
            run.info.metrics.add(metrics)
            self._touch(run, now)

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._live(run_id)
            return None if run is None else _copy(run, time.time())

    def list_runs(self, *, limit: int = 100) -> list[RunInfo]:
        now = time.time()
        with self._lock:
            runs = [r for r in (self._live(k) for k in list(self._runs)) if r is not None]
            runs.sort(key=lambda r: r.info.updated_at, reverse=True)
            return [_copy(r, now) for r in runs[:limit]]

    def delete_run(self, run_id: str, *, force: bool = False) -> bool:
        now = time.time()
        with self._lock:
            run = self._runs.get(run_id)
            if not force and run is not None and lease_is_live(run.lease, now):
                assert run.lease is not None
                raise leased_error(run_id, run.lease, now)
            return self._runs.pop(run_id, None) is not None

    def set_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        with self._lock:
            run = self._fenced(run_id, owner, time.time())
            run.ttl = ttl
            self._touch(run, time.time())

    def _purge_expired(self) -> int:
        with self._lock:
            before = len(self._runs)
            for run_id in list(self._runs):
                self._live(run_id)
            return before - len(self._runs)

    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,  # nothing to wait for
    ) -> None:
        head_run = self._heads_run(records, heads)
        encoded = [(r.run_id, r.key, r.encode(), (r.seq, r.step_id)) for r in records]
        now = time.time()
        with self._lock:
            for run_id in {r.run_id for r in records}:
                self._fenced(run_id, owner, now)
            for run_id, key, data, seq in encoded:
                run = self._ensure(run_id, now)
                run.steps[key] = data
                run.seqs[key] = seq
                self._touch(run, now)
            if head_run is not None and heads:
                self._ensure(head_run, now).heads.update(heads)

    def load_steps(self, run_id: str) -> list[StepRecord]:
        with self._lock:
            run = self._live(run_id)
            items = [] if run is None else list(run.steps.items())
        records = [StepRecord.decode(d, where=f"run {run_id!r} key {k!r}") for k, d in items]
        records.sort(key=lambda r: r.seq)
        return records

    def _load_index(self, run_id: str) -> StepIndex | list[StepRecord]:
        with self._lock:
            run = self._live(run_id)
            rows = [] if run is None else list(run.steps.items())
            seqs = [] if run is None else list(run.seqs.values())
        return open_journal(rows, run_id=run_id, last=lambda: max(seqs, default=None))

    def _load_step(self, run_id: str, key: str) -> StepRecord | None:
        with self._lock:
            run = self._live(run_id)
            data = None if run is None else run.steps.get(key)
        return None if data is None else StepRecord.decode(data, where=f"run {run_id!r} {key!r}")

    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        for record in self.load_steps(run_id):
            if record.step_id == step_id:
                return record
        return None

    def set_head(
        self, run_id: str, branch: str, step_id: str | None, *, owner: str | None = None
    ) -> None:
        with self._lock:
            run = self._fenced(run_id, owner, time.time())
            if step_id is None:
                run.heads.pop(branch, None)
            else:
                run.heads[branch] = step_id
                self._touch(run, time.time())  # as every store does: the run moves up

    def get_heads(self, run_id: str) -> dict[str, str]:
        with self._lock:
            run = self._live(run_id)
            return {} if run is None else dict(run.heads)

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        now = time.time()
        with self._lock:
            run = self._ensure(run_id, now)
            if run.lease is not None:
                holder, expires = run.lease
                if holder != owner and expires > now and not lease_owner_is_dead(holder):
                    return LeaseResult((False, holder, expires - now))
            run.lease = (owner, now + ttl)
            return LeaseResult((True, owner, ttl))

    def renew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        now = time.time()
        with self._lock:
            run = self._live(run_id)
            lease = None if run is None else run.lease
            if run is None or lease is None or lease[0] != owner or lease[1] <= now:
                if lease is None or lease[1] <= now:
                    return LeaseResult((False, "", 0.0))
                return LeaseResult((False, lease[0], lease[1] - now))
            run.lease = (owner, now + ttl)
            return LeaseResult((True, owner, ttl))

    def take_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        now = time.time()
        with self._lock:
            run = self._ensure(run_id, now)
            cur = run.lease
            if cur is not None and cur[1] > now and cur[0] not in (owner, holder):
                return LeaseResult((False, cur[0], cur[1] - now))
            run.lease = (owner, now + ttl)
            return LeaseResult((True, owner, ttl))

    def release_lease(self, run_id: str, owner: str) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None and run.lease is not None and run.lease[0] == owner:
                run.lease = None

    def _open_cache(self) -> CacheBackend:
        with self._lock:
            space = self._space.caches.setdefault(self.namespace, {})
        return MemoryCache(self, space, self._lock)

    def _open_queues(self) -> QueueBackend:
        with self._lock:
            space = self._space.queues.setdefault(self.namespace, {})
        return MemoryQueues(self, space)


def _copy(run: _Run, now: float | None) -> RunInfo:
    """A snapshot of the run's info; with `now`, a dead owner's `running` shows as `crashed`."""
    info = run.info
    metrics = RunMetrics()
    metrics.add(info.metrics)
    status = info.status if now is None else run_status(info.status, run.lease, now)
    meta = dict(info.meta) | (cancel_meta(run.lease) if status == "cancelled" else {})
    return RunInfo(
        info.run_id, status, info.created_at, info.updated_at, info.expires_at, metrics, meta
    )
