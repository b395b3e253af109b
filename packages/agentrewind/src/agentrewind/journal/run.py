"""Record and replay: the decisions of DESIGN §3 in one place, used by every adapter.

A call is identified by `kind:name:digest#occurrence` (`digest` hashes the normalised input,
`occurrence` counts identical calls in the run). A resumed run making the same call gets the
recorded output; a changed input gets a new key and runs, never another call's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypeVar, overload

from ..errors import DivergenceError, IncompleteStepError
from ..ids import check_id, new_id
from ..records import RunMetrics, Site, StepIndex, StepRecord
from ..stores.leases import make_lease_owner, retire_lease_owner
from ..telemetry import observers
from .cache import CacheSites, begin_cached, run_step
from .call import EVENTS_KEPT, Call, CallEvent, IncompletePolicy, JournalSettings, Outcome, P
from .index import all_records, aread_journal, journal_state, read_journal, site_of, stored
from .inputs import KEY, InputMemory, Prepared
from .lease import Ending, LeaseKeeper, check_draining, lost_error, refused_error
from .notes import Notes, divergence_message, taken_over, warn_divergence, warn_rerun
from .plain import astep_call, step_call
from .totals import RunTotals

__all__ = ["Call", "CallEvent", "IncompletePolicy", "Run"]

T = TypeVar("T")


class Run(RunTotals):
    """One execution of a run: loads its journal, answers replays, records new calls.

    Get one from `Middleware.run(run_id)`; adapters find the active one with
    `agentrewind.current_run()`.
    """

    def __init__(
        self,
        middleware: JournalSettings,
        run_id: str | None = None,
        *,
        strict: bool = False,
        on_incomplete: IncompletePolicy = "rerun",
        ttl: float | None = None,
        lease_ttl: float = 30.0,
    ) -> None:
        self.middleware = middleware
        self.run_id = check_id(run_id) if run_id else new_id()
        self.strict = strict
        self.on_incomplete = on_incomplete
        self.ttl = ttl
        self.lease_ttl = lease_ttl
        self.owner = make_lease_owner()
        self.metrics = RunMetrics(executions=1)
        """What this execution did (the store keeps the totals over all executions)."""
        self._written = RunMetrics(executions=1)  # what the store holds of it (totals.py)
        self.events: deque[CallEvent] = deque(maxlen=EVENTS_KEPT)
        """The last `EVENTS_KEPT` (1,000) calls of this execution, in order, with outcomes."""
        self.status = "completed"
        self._lock = threading.Lock()
        self._records: dict[str, StepRecord | Site] = {}  # a `Site`: the record is in the store
        self._indexed = False
        self._unconsumed: dict[tuple[str, str], set[str]] = {}
        self._next_occ: dict[str, int] = {}
        self._free_occ: dict[str, list[int]] = {}
        self._seq = 0
        self._last_step_id: str | None = None
        self._keeper: LeaseKeeper | None = None
        self._lease_at = 0.0
        self._observers = observers()  # OpenTelemetry spans when installed (telemetry.py)
        self.totals: RunMetrics | None = None  # `numbers()` at its end, for observers only
        self._notes = Notes()  # replays and divergence, noted on records for viewers
        self.input_memory = InputMemory()  # where this execution stored its chat messages

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, recorded={len(self._records)})"

    # -- lifecycle (driven by RunContext) ---------------------------------------------------
    def _check_lease(self, result: tuple[bool, str, float]) -> None:
        if not result[0]:
            raise refused_error(self.run_id, result)
        self._lease_at = time.monotonic()

    def _emit(self, event: str, *args: Any) -> None:
        for observer in self._observers:
            observer.notify(event, self, *args)

    def _load(self, records: list[StepRecord] | StepIndex, taken_over: bool = False) -> None:
        self._indexed = isinstance(records, StepIndex)
        self._records, self._unconsumed, self._seq, self._last_step_id = journal_state(records)
        store, run_id, owner, ttl = self.middleware.store, self.run_id, self.owner, self.lease_ttl
        self._keeper = LeaseKeeper(
            run_id, lambda: store.renew_lease(run_id, owner, ttl), ttl, self._lease_at
        )
        self._keeper.start()
        self._emit("run_started", taken_over)

    def _open(self) -> None:
        store = self.middleware.store
        self._check_lease(store.acquire_lease(self.run_id, self.owner, self.lease_ttl))
        begun = False
        try:
            prior = store.get_run(self.run_id) if self._observers else None
            store.begin_run(self.run_id, ttl=self.ttl, owner=self.owner)
            begun = True
            self._load(read_journal(store, self.run_id), taken_over(prior))
        except BaseException:
            if begun:  # e.g. a corrupt record: say so in the run's status, best effort
                with contextlib.suppress(Exception):
                    store.end_run(self.run_id, "failed", RunMetrics(), owner=self.owner)
            self._drop_lease()
            raise

    async def _aopen(self) -> None:
        store = self.middleware.store
        self._check_lease(await store.aacquire_lease(self.run_id, self.owner, self.lease_ttl))
        begun = False
        try:
            prior = await store.aget_run(self.run_id) if self._observers else None
            await store.abegin_run(self.run_id, ttl=self.ttl, owner=self.owner)
            begun = True
            self._load(await aread_journal(store, self.run_id), taken_over(prior))
        except BaseException:
            if begun:
                with contextlib.suppress(Exception):
                    await store.aend_run(self.run_id, "failed", RunMetrics(), owner=self.owner)
            await self._adrop_lease()
            raise

    def _drop_lease(self) -> None:  # retired even if the store is down: a retry here takes over
        try:
            self.middleware.store.release_lease(self.run_id, self.owner)
        finally:
            retire_lease_owner(self.owner)

    async def _adrop_lease(self) -> None:
        try:
            await self.middleware.store.arelease_lease(self.run_id, self.owner)
        finally:
            retire_lease_owner(self.owner)

    def _lease_lost(self) -> bool:
        # A stale owner must not overwrite the status of a run another process took over.
        return self._keeper is not None and self._keeper.expired

    def _stop_keeper(self, failed: bool, *, wait: bool = True) -> None:
        if self._keeper is not None:
            self._keeper.stop.set()
            if wait:
                # Wakes at once unless a renewal is in flight; let that finish first so no
                # connection goes back to a pool the caller may close next.
                self._keeper.join(timeout=2.0)
        if failed and self.status == "completed":
            self.status = "failed"
        if self._lease_lost():
            self._emit("lease_lost")

    def _close(self, failed: bool, *, ending: Ending = "normal") -> None:
        # unreachable: write nothing (each would wait again; `crashed`); interrupted: lease only
        self._stop_keeper(failed)
        if ending == "unreachable":
            retire_lease_owner(self.owner)
            self._ended(False)
            return
        wrote = False
        try:
            if not (self._lease_lost() or ending == "interrupted"):
                self._write_end(failed)
                wrote = True
        finally:
            self._drop_lease()
            self._ended(wrote)

    async def _aclose(self, failed: bool, *, ending: Ending = "normal") -> None:
        self._stop_keeper(failed, wait=False)
        if ending == "unreachable":  # as in `_close`
            retire_lease_owner(self.owner)
            self._ended(False)
            return
        if self._keeper is not None and self._keeper.is_alive():
            # A renewal may be in flight: wait for it off the event loop, so it cannot write
            # the lease back after the release below.
            await asyncio.get_running_loop().run_in_executor(None, self._keeper.join, 2.0)
        wrote = False
        try:
            if not (self._lease_lost() or ending == "interrupted"):
                await self._awrite_end(failed)
                wrote = True
        finally:
            await self._adrop_lease()
            await self._aended(wrote)

    # -- helpers for adapters that write their own records -----------------------------------
    def records(self) -> list[StepRecord]:
        """The run's records as this execution knows them (for adapters that rebuild state)."""
        with self._lock:
            known = dict(self._records)
        return all_records(self.middleware.store, self.run_id, known, self._indexed)

    def next_seq(self) -> int:
        """Reserve the next sequence number of this run (for records an adapter writes itself)."""
        with self._lock:
            self._seq += 1
            return self._seq

    def observe(self, record: StepRecord, outcome: str = "executed") -> None:
        """Report a record an adapter wrote itself to the run's observers (OpenTelemetry)."""
        self._emit("call", record, outcome, None)

    def mark_consumed(self, keys: Iterable[str]) -> None:
        """Treat recorded calls as replayed for divergence checks.

        An adapter that restores a framework's own state (for example a workflow resumed past
        finished steps) calls this for the calls of those steps, which will never be asked for.
        """
        with self._lock:
            for key in keys:
                site = site_of(self._records.get(key))
                if site is not None:
                    self._unconsumed.get(site, set()).discard(key)

    # -- the replay decision ----------------------------------------------------------------
    def digest(self, key_input: Any, tree: Any = KEY) -> str:
        """Hash normalised input; raises `SerializationError` naming an unhashable path."""
        if tree is KEY:
            tree = self.middleware.serializer.to_tree(key_input)
        text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=10).hexdigest()

    def begin(
        self,
        kind: str,
        name: str,
        key_input: Any,
        *,
        side_effects: bool = False,
        on_incomplete: IncompletePolicy | None = None,
        record_failures: bool | None = None,
        inputs: Any = KEY,
        record_inputs: bool | None = None,
        cache: CacheSites | None = None,
    ) -> Call:
        """Decide whether a call replays (`call.hit`) or executes.

        Args:
            kind: `llm`, `tool`, `node`, `custom`...
            name: The call site (model, tool or step name).
            key_input: The normalised input that identifies the call.
            side_effects: Write a `started` record first; a started-never-completed call then
                follows `on_incomplete` on resume.
            on_incomplete: `rerun`, `skip` (returns None) or `raise` (`IncompleteStepError`).
            record_failures: Journal a failure so it is raised again on replay.
            inputs: What the call was given, recorded with it (default: `key_input`); a
                `journal.inputs.Chat` stores each chat message once per run.
            record_inputs: Record `inputs` (default: the middleware's `record_inputs`).
            cache: The wrapped object's `wrap(cache=...)` rules (the cross-run cache).

        Raises:
            DivergenceError: With `strict=True`, when this call is new while recorded calls of
                the same site remain unconsumed.
            LeaseLostError: The lease lapsed or was taken over; the run must stop.
            DataLostError: The run vanished from the store (see `DataLostError`).
        """
        if self._keeper is not None and self._keeper.expired:
            raise lost_error(self.middleware.store, self.run_id, self.owner, self._keeper.lost_to)
        check_draining(self.middleware, self.run_id)
        settings = self.middleware
        tree = settings.serializer.to_tree(key_input)
        base = f"{kind}:{name}:{self.digest(key_input, tree)}"
        if settings.record_inputs if record_inputs is None else record_inputs:
            if inputs is KEY:
                inputs = key_input if settings.serializer.redact else Prepared(tree)
        else:
            inputs = KEY
        policy = on_incomplete or self.on_incomplete
        record_failures = (
            self.middleware.record_failures if record_failures is None else record_failures
        )
        with self._lock:
            free = self._free_occ.get(base)
            if free:
                occurrence = free.pop(0)
            else:
                occurrence = self._next_occ.get(base, 0)
                self._next_occ[base] = occurrence + 1
            key = f"{base}#{occurrence}"
            found = self._records.get(key)
        record = stored(self.middleware.store, self.run_id, key, found)  # outside the lock
        replayable = record is not None and (
            record.status == "completed" or bool(record.meta.get("recorded"))
        )
        if replayable:
            with self._lock:
                self._unconsumed.get((kind, name), set()).discard(key)
                self._notes.replayed.append(key)
        call = Call(
            self,
            kind,
            name,
            base,
            occurrence,
            record,
            hit=replayable,
            side_effects=side_effects,
            record_failures=record_failures,
            policy=policy,
        )
        if inputs is not KEY:
            call.inputs = inputs
        if replayable:
            assert record is not None
            self._note(call, "replayed")
            with self._lock:
                self.metrics.replay_hits += 1
                self.metrics.seconds_saved += float(record.meta.get("duration", 0.0))
                self.metrics.tokens_saved += int(record.meta.get("tokens", 0) or 0)
            return call
        self._check_divergence(kind, name, key)
        if record is not None and record.status == "started":
            if policy == "raise":
                self._release(call)
                raise IncompleteStepError(self.run_id, key)
            if policy == "skip":
                call.hit = call.skipped = True
                call.record = dataclasses.replace(record, status="completed", output=None)
                self._note(call, "skipped")
                return call
            with self._lock:
                self.metrics.reruns += 1
            warn_rerun(self.run_id, key)
        if call.prior is not None:  # a failed or killed attempt runs again
            with self._lock:
                self.metrics.attempts += 1
        begin_cached(self, call, key_input, cache)  # a `wrap(cache=[...])` site
        return call

    def _check_divergence(self, kind: str, name: str, key: str) -> None:
        pending = self._unconsumed.get((kind, name))
        if not pending:
            return
        message = divergence_message(self.run_id, kind, name, key, len(pending))
        self._notes.diverge(self.run_id, key, strict=self.strict)  # logs it at DEBUG
        self._emit("diverged", kind, name, key, message)
        if self.strict:
            raise DivergenceError(message)
        warn_divergence(message)

    # -- bookkeeping used by Call -----------------------------------------------------------
    def _record(
        self,
        call: Call,
        status: Literal["started", "completed", "failed"],
        output: Any,
        meta: dict[str, Any],
    ) -> StepRecord:
        now = time.time()
        with self._lock:
            own = call.record if call.record is not call.prior else None  # not a kept attempt
            if own is not None and own.status == "started" and status != "started":
                seq = own.seq
            else:
                self._seq += 1
                seq = self._seq
            unfinished = call.record is not None and call.record.status != "completed"
            parent = call.record.parent_id if unfinished else self._last_step_id  # type: ignore[union-attr]
            started = call.record.meta if call.record and call.record.status == "started" else None
            self._notes.apply(call.key, meta, started)
            record = StepRecord(
                run_id=self.run_id,
                step_id=call.step_id,
                key=call.key,
                kind=call.kind,
                name=call.name,
                status=status,
                seq=seq,
                parent_id=parent,
                output=output,
                meta=meta,
                created_at=now,
                updated_at=now,
            )
            call.record = record
            self._records[call.key] = record
            self._last_step_id = call.step_id
        return record

    def _unrecord(self, call: Call, before: StepRecord | None) -> None:
        """Forget the record of `call` whose write failed (`before`: what the run held)."""
        with self._lock:
            if before is None:
                self._records.pop(call.key, None)
            else:
                self._records[call.key] = before
            if self._last_step_id == call.step_id and call.record is not None:
                self._last_step_id = call.record.parent_id
            call.record = before
        self._release(call)

    def _release(self, call: Call) -> None:
        with self._lock:
            free = self._free_occ.setdefault(call.base, [])
            if call.occurrence not in free:
                free.append(call.occurrence)
                free.sort()

    def _after_complete(self, call: Call, record: StepRecord) -> None:
        self._note(call, "executed")
        with self._lock:
            self.metrics.steps += 1

    def _note(self, call: Call, outcome: Outcome, error: BaseException | None = None) -> None:
        with self._lock:
            self.events.append(CallEvent(call.kind, call.name, call.key, outcome))
            if outcome == "failed":
                self.metrics.failures += 1
        self._emit("call", call, outcome, error)

    # -- plain Python steps -----------------------------------------------------------------
    @overload
    def step(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def step(  # type: ignore[overload-cannot-match]
        self, name: str, fn: Callable[..., T], /, *args: Any, cache_ttl: float, **kwargs: Any
    ) -> T: ...
    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` as a recorded step; `cache_ttl=` caches it across runs.

        Its arguments are recorded as its inputs unless `record_inputs=False` is passed.
        """
        return run_step(self, name, fn, args, kwargs)  # type: ignore[no-any-return]

    def _step(self, name: str, fn: Callable[..., T], key: Any, *a: Any, **kw: Any) -> T:
        return step_call(self, name, fn, key, *a, **kw)  # plain.py

    def _astep(
        self, name: str, fn: Callable[..., Awaitable[T]], key: Any, *a: Any, **kw: Any
    ) -> Awaitable[T]:
        return astep_call(self, name, fn, key, *a, **kw)
