"""Durable queues' storage: one interface, the shared dequeue rule, an in-process implementation.

A queue entry names a run (recorded as `queued` in the store, its workflow and arguments in
its journal) and how it waits: priority (lower first, FIFO within), not-before time,
partition key and deduplication id. `take` moves entries to *in flight* under a worker's
owner token for `ttl` seconds, honouring the queue's limits across every worker of the store
in one atomic step of the backend (SQLite: one `BEGIN IMMEDIATE` transaction; PostgreSQL:
`FOR UPDATE SKIP LOCKED` under a per-queue transaction lock; Redis: one script over sorted
sets in the queue's hash slot). Workers renew their slots; a slot whose worker died lapses
and its entry is delivered again, so its run resumes elsewhere with replay. `finish` drops an
entry (its run ended), freeing its slot and its deduplication id.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from ..errors import QueueDeduplicatedError, QueueError
from ..records import RunMetrics, StepRecord

__all__ = [
    "MAX_PRIORITY",
    "MemoryQueues",
    "QueueBackend",
    "QueueEntry",
    "QueueLimits",
    "QueueStats",
    "check_queue_name",
    "pick",
    "stats_of",
]

T = TypeVar("T")
MAX_PRIORITY = 2**20 - 1
"""Highest priority number a queue takes (0 is the first served)."""


class Store(Protocol):
    """What a queue backend uses of its `Store` (which imports this module)."""

    async def _in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


def check_queue_name(name: object) -> str:
    """`name` if it can name a queue: 1 to 200 printable characters, no `{` `}` or `:`."""
    if not isinstance(name, str):
        raise QueueError(f"a queue name must be a string, not {type(name).__name__}")
    if not 0 < len(name) <= 200 or not name.isprintable() or any(c in name for c in "{}:"):
        raise QueueError(
            f"bad queue name {name!r}: use 1 to 200 printable characters without {{ }} or :"
        )
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's flow control, enforced across every worker of the store.

    `concurrency`: runs in flight at once (per partition when `partitioned`); `limiter`:
    at most `n` starts in any window of `seconds` (per partition when `partitioned`).
    """

    concurrency: int | None = None
    limiter: tuple[int, float] | None = None
    partitioned: bool = False

    def __post_init__(self) -> None:
        c = self.concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise QueueError(f"concurrency must be a whole number >= 1 or None, not {c!r}")
        if self.limiter is not None:
            try:
                n, seconds = self.limiter
            except (TypeError, ValueError):
                raise QueueError(f"limiter must be (n, seconds), not {self.limiter!r}") from None
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise QueueError(f"limiter: n must be a whole number >= 1, not {n!r}")
            if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
                raise QueueError(f"limiter: seconds must be a positive number, not {seconds!r}")
            object.__setattr__(self, "limiter", (n, float(seconds)))

    @property
    def window(self) -> float:
        """The limiter's window in seconds (0.0 without a limiter)."""
        return 0.0 if self.limiter is None else self.limiter[1]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueEntry:
    """One run waiting in (or taken from) a queue."""

    queue: str
    run_id: str
    priority: int = 0
    partition: str = ""
    """The partition key ("" in a queue without partitions)."""
    dedup_id: str | None = None
    not_before: float = 0.0
    """Epoch seconds before which no worker takes it (0: at once)."""
    enqueued_at: float = 0.0
    deliveries: int = 0
    """Times a worker took it (more than 1: its earlier worker died or drained)."""


@dataclasses.dataclass(slots=True)
class QueueStats:
    """What one queue holds (`agentrewind queues`)."""

    queue: str
    queued: int = 0
    """Entries waiting (delayed ones included)."""
    delayed: int = 0
    """Waiting entries whose not-before time is still ahead."""
    in_flight: int = 0
    """Entries a live worker holds."""
    oldest_enqueued_at: float | None = None
    """When the oldest waiting entry was enqueued (None: none waits)."""

    def as_dict(self) -> dict[str, Any]:
        """The statistics as a plain dict."""
        return dataclasses.asdict(self)


def pick(
    ready: Iterable[T],
    partition_of: Callable[[T], str],
    limits: QueueLimits,
    n: int,
    in_flight: dict[str, int],
    starts: dict[str, int],
) -> list[T]:
    """The entries to take now: the first of `ready` (in dequeue order) the limits allow.

    `in_flight` and `starts` count per partition ("" in a queue without partitions) the
    entries in flight and the starts inside the limiter's window. Every backend but Redis
    (which runs the same rule in its script) calls this inside its atomic step.
    """
    taken: list[T] = []
    if n <= 0:
        return taken
    if not limits.partitioned:  # one set of limits for the whole queue
        in_flight = {"": sum(in_flight.values())}
        starts = {"": sum(starts.values())}
    room: dict[str, int] = {}
    for entry in ready:
        part = partition_of(entry) if limits.partitioned else ""
        if part not in room:
            free = n
            if limits.concurrency is not None:
                free = min(free, limits.concurrency - in_flight.get(part, 0))
            if limits.limiter is not None:
                free = min(free, limits.limiter[0] - starts.get(part, 0))
            room[part] = free
        if room[part] <= 0:
            if not limits.partitioned:
                break
            continue
        room[part] -= 1
        taken.append(entry)
        if len(taken) >= n:
            break
    return taken


def stats_of(
    rows: Iterable[tuple[str, Any, Any, int, float]], queue: str | None
) -> list[QueueStats]:
    """`QueueStats` from SQL rows `(queue, in flight, delayed, count, oldest enqueued_at)`."""
    out: dict[str, QueueStats] = {} if queue is None else {queue: QueueStats(queue)}
    for name, flying, delayed, count, oldest in rows:
        if queue is not None and name != queue:
            continue
        s = out.setdefault(name, QueueStats(name))
        if flying:
            s.in_flight += count
            continue
        s.queued += count
        s.delayed += count if delayed else 0
        if s.oldest_enqueued_at is None or oldest < s.oldest_enqueued_at:
            s.oldest_enqueued_at = float(oldest)
    return [out[name] for name in sorted(out)]


class QueueBackend(abc.ABC):
    """The queues of one store namespace. Sync methods per backend; async twins in threads."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @abc.abstractmethod
    def push(self, entry: QueueEntry) -> None:
        """Add `entry` (its `enqueued_at` and `deliveries` are set here).

        Raises:
            QueueDeduplicatedError: Its `dedup_id` is held by an entry of the queue.
        """

    def enqueue(self, record: StepRecord, entry: QueueEntry) -> None:
        """Create run `record.run_id` as `queued`, holding `record`, with `entry` pushed.

        All or nothing: a refused push (a held deduplication id) leaves no run behind.
        SQLite and PostgreSQL do it in one transaction; this default writes unfenced (the
        run has no owner yet) and deletes the run if the push is refused.
        """
        store: Any = self.store
        store.begin_run(record.run_id)
        try:
            store.put_steps([record])
            store.end_run(record.run_id, "queued", RunMetrics())
            self.push(entry)
        except BaseException:
            store.delete_run(record.run_id, force=True)
            raise

    async def aenqueue(self, record: StepRecord, entry: QueueEntry) -> None:
        """Async twin of `enqueue`."""
        await self.store._in_thread(self.enqueue, record, entry)

    @abc.abstractmethod
    def take(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        """Take up to `n` entries the limits allow, in flight under `owner` for `ttl` s.

        Entries whose slot lapsed (their worker died) are waiting again, in their place.
        """

    @abc.abstractmethod
    def renew(self, queue: str, owner: str, run_ids: list[str], ttl: float) -> list[str]:
        """Extend `owner`'s slots of `run_ids` by `ttl` s; return the run ids it still holds."""

    @abc.abstractmethod
    def release(self, queue: str, owner: str, run_ids: list[str]) -> None:
        """Put `owner`'s entries of `run_ids` back to waiting, in their place (a drain)."""

    @abc.abstractmethod
    def finish(self, queue: str, run_id: str) -> bool:
        """Drop the run's entry (its run ended); False if it had none."""

    @abc.abstractmethod
    def entry(self, queue: str, run_id: str) -> QueueEntry | None:
        """The run's entry in `queue`, waiting or in flight (None: none)."""

    @abc.abstractmethod
    def stats(self, queue: str | None = None) -> list[QueueStats]:
        """Statistics of `queue` (None: every queue holding entries), sorted by name."""

    async def apush(self, entry: QueueEntry) -> None:
        """Async twin of `push`."""
        await self.store._in_thread(self.push, entry)

    async def atake(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        """Async twin of `take`."""
        return await self.store._in_thread(self.take, queue, limits, owner, n, ttl)

    async def afinish(self, queue: str, run_id: str) -> bool:
        """Async twin of `finish`."""
        return await self.store._in_thread(self.finish, queue, run_id)

    async def aentry(self, queue: str, run_id: str) -> QueueEntry | None:
        """Async twin of `entry`."""
        return await self.store._in_thread(self.entry, queue, run_id)


@dataclasses.dataclass(slots=True)
class _Slot:
    entry: QueueEntry
    seq: int
    owner: str | None = None
    expires_at: float = 0.0


class MemoryQueues(QueueBackend):
    """Queues of a `MemoryStore` namespace (in-process: shared by its threads only)."""

    def __init__(self, store: Store, data: dict[str, Any]) -> None:
        super().__init__(store)
        self.lock: threading.Lock = data.setdefault("lock", threading.Lock())
        self.queues: dict[str, dict[str, _Slot]] = data.setdefault("queues", {})
        self.starts: dict[str, list[tuple[float, str]]] = data.setdefault("starts", {})
        self.seq: list[int] = data.setdefault("seq", [0])

    def push(self, entry: QueueEntry) -> None:
        with self.lock:
            slots = self.queues.setdefault(entry.queue, {})
            for slot in slots.values():
                if entry.dedup_id is not None and slot.entry.dedup_id == entry.dedup_id:
                    raise QueueDeduplicatedError(entry.queue, entry.dedup_id, slot.entry.run_id)
            if entry.run_id in slots:
                raise QueueError(f"run {entry.run_id!r} is already in queue {entry.queue!r}")
            self.seq[0] += 1
            now = time.time()
            stamped = dataclasses.replace(entry, enqueued_at=now, deliveries=0)
            slots[entry.run_id] = _Slot(stamped, self.seq[0])

    def take(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        with self.lock:
            now = time.time()
            slots = self.queues.get(queue, {})
            for slot in slots.values():
                if slot.owner is not None and slot.expires_at < now:
                    slot.owner = None
            starts = [s for s in self.starts.get(queue, []) if s[0] > now - limits.window]
            self.starts[queue] = starts
            in_flight: dict[str, int] = {}
            for slot in slots.values():
                if slot.owner is not None:
                    in_flight[slot.entry.partition] = in_flight.get(slot.entry.partition, 0) + 1
            counts: dict[str, int] = {}
            for _, part in starts:
                counts[part] = counts.get(part, 0) + 1
            ready = sorted(
                (s for s in slots.values() if s.owner is None and s.entry.not_before <= now),
                key=lambda s: (s.entry.priority, s.seq),
            )
            out = []
            for slot in pick(ready, lambda s: s.entry.partition, limits, n, in_flight, counts):
                slot.owner, slot.expires_at = owner, now + ttl
                slot.entry = dataclasses.replace(slot.entry, deliveries=slot.entry.deliveries + 1)
                if limits.limiter is not None:
                    starts.append((now, slot.entry.partition))
                out.append(slot.entry)
            return out

    def renew(self, queue: str, owner: str, run_ids: list[str], ttl: float) -> list[str]:
        with self.lock:
            now, held = time.time(), []
            for run_id in run_ids:
                slot = self.queues.get(queue, {}).get(run_id)
                if slot is not None and slot.owner == owner:
                    slot.expires_at = now + ttl
                    held.append(run_id)
            return held

    def release(self, queue: str, owner: str, run_ids: list[str]) -> None:
        with self.lock:
            for run_id in run_ids:
                slot = self.queues.get(queue, {}).get(run_id)
                if slot is not None and slot.owner == owner:
                    slot.owner = None

    def finish(self, queue: str, run_id: str) -> bool:
        with self.lock:
            return self.queues.get(queue, {}).pop(run_id, None) is not None

    def entry(self, queue: str, run_id: str) -> QueueEntry | None:
        with self.lock:
            slot = self.queues.get(queue, {}).get(run_id)
            return None if slot is None else slot.entry

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        with self.lock:
            now = time.time()
            rows = [
                (name, slot.owner is not None and slot.expires_at >= now,
                 slot.entry.not_before > now, 1, slot.entry.enqueued_at)
                for name, slots in self.queues.items()
                for slot in slots.values()
            ]  # fmt: skip
        return stats_of(rows, queue)
