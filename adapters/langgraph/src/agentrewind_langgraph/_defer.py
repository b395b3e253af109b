"""Deferred pending writes: one store write per LangGraph superstep.

Inside a graph run, LangGraph calls `put_writes` when a task finishes and `put` once the
superstep's tasks are done, each on an executor thread. A superstep with a single task thus
costs two writes (two transactions, round trips and thread hand-offs). `WriteBuffer` holds the
task's writes in memory and hands them to the next `put` of the same thread and namespace,
which stores them in its own transaction (SQLite, PostgreSQL) or pipeline (Redis).

Writes are written at once (never held) when:

* the call is not inside a graph run, or the run's durability is `"exit"` (LangGraph then
  saves pending writes after its last `put`: nothing would follow to carry them);
* a write goes to a special channel (an error, interrupt, resume or scheduled write, or the
  error handler's source marker) or comes from the null task (`update_state`, resumes);
* the task was pushed rather than triggered (a `Send`, or a functional-API `@task` whose
  caller is still running: its result must be durable before the caller goes on);
* a second task writes for the same checkpoint (parallel branches), which also writes what
  the first task left held, so a branch that finished survives a failing sibling;
* the writes are for a checkpoint older than the last one this saver put for the thread
  (the superstep's `put` ran first; holding them would only delay them).

Held writes are also written before the saver reads, lists, copies or prunes, when `put`
names another parent, on `close()` (and at interpreter exit), and by a timer thread once held
`MAX_HOLD` seconds (0.1 s; `defer_writes=` a number sets it), so a finished parallel branch
whose sibling runs on is stored within that time. The crash window: a process killed outright
(SIGKILL, power loss) while a task's writes are held loses them, and that task runs again on
resume, exactly as if it had not finished. With `durability="sync"` the next step never starts
before they are stored (its `put` carries them).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langgraph.checkpoint.base import WRITES_IDX_MAP

from ._codec import WriteRow

__all__ = ["MAX_HOLD", "HeldWrites", "WriteBuffer", "may_hold", "write_held"]

log = logging.getLogger("agentrewind.langgraph")

_RUNTIME = "__pregel_runtime"
"""`configurable` key LangGraph sets on every call made by a running graph."""
_DURABILITY = "__pregel_durability"
"""`configurable` key holding the run's durability when the caller chose one."""
_NULL_TASK = "00000000-0000-0000-0000-000000000000"
_PULL = "~__pregel_pull"
"""How the path of a task LangGraph runs for a triggered node starts."""
_URGENT = frozenset(WRITES_IDX_MAP) | {"__error_source_node__"}
"""Channels written at once: errors, interrupts, resumes, schedules, error-handler markers."""
_MAX_SLOTS = 10_000
MAX_HOLD = 0.1
"""Seconds a write is held at most by default: a timer thread stores it if no `put` came."""


class HeldWrites(NamedTuple):
    """One task's pending writes, serialized, waiting to be stored (a tuple: made per task)."""

    thread_id: str
    cns: str
    checkpoint_id: str
    rows: Sequence[WriteRow]
    now: float


@dataclasses.dataclass(slots=True)
class _Slot:
    """What the buffer knows of one (thread, namespace)."""

    head: str | None = None  # the last checkpoint this saver put
    cid: str | None = None  # the checkpoint `tasks` and `held` belong to
    tasks: set[str] = dataclasses.field(default_factory=set)
    held: list[HeldWrites] = dataclasses.field(default_factory=list)


def may_hold(
    conf: Mapping[str, Any], task_id: str, task_path: str, rows: Sequence[WriteRow]
) -> bool:
    """Whether these writes may wait for the next `put` (see the module docstring)."""
    if _RUNTIME not in conf or conf.get(_DURABILITY) == "exit" or task_id == _NULL_TASK:
        return False
    if not task_path.startswith(_PULL):  # a pushed task (`Send`, a functional-API `@task`)
        return False
    return not any(w.channel in _URGENT for w in rows)


class WriteBuffer:
    """Held writes per thread and namespace; every method is thread-safe.

    Args:
        defer: True holds writes at most `MAX_HOLD` seconds; a number, at most that long.
        store: Called (through a weak reference) to store writes held too long, from a
            daemon thread started when the first write is held.
    """

    def __init__(self, defer: bool | float, store: weakref.WeakMethod[Any]) -> None:
        self.max_hold = MAX_HOLD if defer is True else float(defer)
        self._store = store
        self._lock = threading.Lock()
        self._slots: dict[str, dict[str, _Slot]] = {}  # thread id -> namespace -> slot
        # The slots holding writes, so the timer never walks every thread the saver has seen.
        self._holding: dict[tuple[str, str], _Slot] = {}
        self._held = 0  # writes held across all slots (reads skip the lock when 0)
        self._timer: threading.Thread | None = None
        self._idle = False
        self._wake = threading.Event()
        self._stop = threading.Event()

    def _poke(self) -> None:
        """Make sure the timer thread will store the writes just held in time."""
        if self._timer is None:
            with self._lock:
                if self._timer is None:
                    self._timer = threading.Thread(
                        target=self._expire, name="agentrewind-lg-held", daemon=True
                    )
                    self._timer.start()
        elif self._idle:
            self._wake.set()

    def _oldest(self) -> float | None:
        with self._lock:
            times = [s.held[0].now for s in self._holding.values()]
        return min(times) if times else None

    def _expire(self) -> None:
        """The timer thread: store writes held longer than `max_hold`."""
        while not self._stop.is_set():
            oldest = self._oldest() if self._held else None
            if oldest is None:
                self._idle = True
                if not self._held:  # a write held after `_idle` was set pokes `_wake`
                    self._wake.wait()
                self._wake.clear()
                self._idle = False
                continue
            wait = oldest + self.max_hold - time.time()
            if wait > 0:
                self._stop.wait(wait)
                continue
            store = self._store()
            if store is None:
                return
            for w in self._take_older(time.time() - self.max_hold):
                try:
                    store(w)
                except Exception:
                    log.exception("agentrewind: held LangGraph writes of %r lost", w.thread_id)
            del store

    def _take_older(self, than: float) -> list[HeldWrites]:
        with self._lock:
            out = []
            for key, slot in list(self._holding.items()):
                if slot.held[0].now <= than:
                    out += slot.held
                    slot.held = []
                    del self._holding[key]
            self._held -= len(out)
            return out

    def stop(self) -> None:
        """Tell the timer thread to stop, without waiting for it."""
        self._stop.set()
        self._wake.set()

    def close(self) -> None:
        """Stop the timer thread (the caller stores what is still held)."""
        self.stop()
        if self._timer is not None:
            self._timer.join(timeout=5)

    def _slot(self, thread_id: str, cns: str) -> _Slot:
        """The slot of a thread's namespace, made on first use (holding `_lock`)."""
        by_ns = self._slots.get(thread_id)
        if by_ns is None:
            if len(self._slots) >= _MAX_SLOTS:  # bound memory: forget idle threads
                for t in [t for t, d in self._slots.items() if not any(s.held for s in d.values())]:
                    del self._slots[t]
            by_ns = self._slots[thread_id] = {}
        slot = by_ns.get(cns)
        if slot is None:
            slot = by_ns[cns] = _Slot()
        return slot

    def offer(self, w: HeldWrites, task_id: str, holdable: bool) -> list[HeldWrites]:
        """Hold `w` if it may wait; returns what must be written now, in order (maybe `[w]`)."""
        with self._lock:
            slot = self._slot(w.thread_id, w.cns)
            counted, poke = len(slot.held), False
            out: list[HeldWrites] = []
            if slot.cid != w.checkpoint_id:
                out, slot.held = slot.held, []
                slot.cid, slot.tasks = w.checkpoint_id, set()
            alone = not slot.tasks or slot.tasks == {task_id}
            slot.tasks.add(task_id)
            if holdable and alone and slot.head in (None, w.checkpoint_id) and self.max_hold > 0:
                slot.held.append(w)
                poke = True
            else:
                out += slot.held
                slot.held = []
                out.append(w)
            self._held += len(slot.held) - counted
            if slot.held:
                self._holding[w.thread_id, w.cns] = slot
            else:
                self._holding.pop((w.thread_id, w.cns), None)
        if poke:
            self._poke()
        return out

    def for_put(
        self, thread_id: str, cns: str, parent_id: str | None, checkpoint_id: str
    ) -> tuple[list[HeldWrites], list[HeldWrites]]:
        """Note a `put`; returns `(before, joined)`: writes to store first, and with it."""
        with self._lock:
            slot = self._slot(thread_id, cns)
            held = slot.held
            self._held -= len(held)
            self._holding.pop((thread_id, cns), None)
            joined = slot.cid is not None and slot.cid == parent_id
            slot.head, slot.cid, slot.tasks, slot.held = checkpoint_id, None, set(), []
            return ([], held) if joined else (held, [])

    def take(self, thread_id: str | None = None, *, forget: bool = False) -> list[HeldWrites]:
        """Remove and return the held writes of a thread (None: of every thread).

        With `forget`, also forget what the buffer knew of the thread (it was deleted).
        """
        if not self._held and not forget:
            return []
        with self._lock:
            keys = [k for k in self._holding if thread_id is None or k[0] == thread_id]
            out = []
            for key in keys:
                slot = self._holding.pop(key)
                out += slot.held
                slot.held = []
            self._held -= len(out)
            if forget:
                if thread_id is None:
                    self._slots.clear()
                else:
                    self._slots.pop(thread_id, None)
            return out


def write_held(buffer: WriteBuffer | None, backend: Any, ttl: float | None) -> None:
    """Store every held write (a saver dropped or the interpreter exiting without `close`)."""
    if buffer is None:
        return
    buffer.stop()
    for w in buffer.take():
        try:
            backend.execute(
                backend.put_writes_op(w.thread_id, w.cns, w.checkpoint_id, w.rows, w.now, ttl)
            )
        except Exception:  # at exit nothing can be raised to: say what was lost
            log.exception("agentrewind: held LangGraph writes of thread %r lost", w.thread_id)
