"""One intercepted call and what happened to it: replay hit, or execute and record."""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, ParamSpec, Protocol, TypeVar

from ..errors import RecordedStepError
from ..ids import new_id
from ..records import StepRecord
from ..serde import Serializer
from ..serde.encryption import Place, step_place
from ..stores import Store
from .attempts import replaced, replacing
from .inputs import NO_INPUTS, InputMemory, seal_inputs

# One DEBUG line per replay decision (here: replayed, executes, started but never completed;
# run.py: divergence; middleware.py: run opened); nothing above DEBUG on the happy path.
log = logging.getLogger("agentrewind.journal")
P = ParamSpec("P")  # the parameters of a step function (Run.step)
T = TypeVar("T")

__all__ = [
    "CURRENT_CALL",
    "EVENTS_KEPT",
    "CacheSink",
    "Call",
    "CallEvent",
    "CallJournal",
    "JournalSettings",
]

Outcome = Literal["replayed", "executed", "cached", "failed", "skipped"]
IncompletePolicy = Literal["rerun", "skip", "raise"]


class JournalSettings(Protocol):
    """What a run reads from its `Middleware`: where it records and how it encodes."""

    @property
    def store(self) -> Store: ...

    @property
    def serializer(self) -> Serializer: ...

    @property
    def record_failures(self) -> bool: ...

    @property
    def record_inputs(self) -> bool: ...


class CacheSink(Protocol):
    """Stores a completed call's record in the cross-run cache (`journal.cache`)."""

    def put(self, record: StepRecord) -> None: ...

    async def aput(self, record: StepRecord) -> None: ...


class CallJournal(Protocol):
    """The side of a `Run` that its calls write through (implemented by `agentrewind.Run`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def owner(self) -> str:
        """The run's lease owner token: every record is written fenced by it."""
        ...

    @property
    def middleware(self) -> JournalSettings: ...

    @property
    def input_memory(self) -> InputMemory:
        """Where this execution's chat messages are stored (`journal.inputs`)."""
        ...

    def _record(
        self,
        call: Call,
        status: Literal["started", "completed", "failed"],
        output: Any,
        meta: dict[str, Any],
    ) -> StepRecord: ...

    def _release(self, call: Call) -> None: ...
    def write_totals(self) -> None: ...
    async def awrite_totals(self) -> None: ...
    def _unrecord(self, call: Call, before: StepRecord | None) -> None: ...

    def _after_complete(self, call: Call, record: StepRecord) -> None: ...

    def _note(self, call: Call, outcome: Outcome, error: BaseException | None = None) -> None: ...


TRACEBACK_KEPT = 4_000
"""How many characters of a failed attempt's traceback its record keeps (the last ones)."""

EVENTS_KEPT = 1_000
"""How many calls `Run.events` keeps, the most recent: a long run's memory stays bounded."""


@dataclasses.dataclass(frozen=True, slots=True)
class CallEvent:
    """What happened to one call in this execution of a run."""

    kind: str
    name: str
    key: str
    outcome: Outcome


class Call:
    """One intercepted call: either a replay `hit`, or a call to execute and then record.

    Adapters use it as: `call = run.begin(...)`; if `call.hit`, return `call.value()`;
    else `call.start()`, run the real thing inside `call.executing()`, then `call.complete(out)`
    or `call.fail(exc)` (each with an `a`-prefixed async twin).
    """

    __slots__ = (
        "_input_meta",
        "_learned",
        "_parts",
        "_t0",
        "base",
        "cache",
        "hit",
        "inputs",
        "key",
        "kind",
        "name",
        "occurrence",
        "policy",
        "prior",
        "record",
        "record_failures",
        "run",
        "side_effects",
        "skipped",
        "step_id",
    )

    def __init__(
        self,
        run: CallJournal,
        kind: str,
        name: str,
        base: str,
        occurrence: int,
        record: StepRecord | None,
        *,
        hit: bool,
        side_effects: bool,
        record_failures: bool,
        policy: IncompletePolicy = "rerun",
    ) -> None:
        self.run = run
        self.kind = kind
        self.name = name
        self.base = base
        self.occurrence = occurrence
        self.key = f"{base}#{occurrence}"
        self.record = record
        self.hit = hit
        self.skipped = False  # a `started` step passed over by on_incomplete="skip"
        self.side_effects = side_effects
        self.record_failures = record_failures
        self.policy = policy
        # A `started` (killed) or `failed` record found here is an earlier attempt: this one
        # is a new record (a new step id) and the earlier one is kept as history on first write.
        self.prior = (
            record if record is not None and not hit and record.status != "completed" else None
        )
        self.step_id = record.step_id if record is not None and self.prior is None else new_id()
        self._t0 = 0.0
        self.inputs: Any = NO_INPUTS
        """What the call was given, recorded with each of its records (`journal.inputs`)."""
        self._input_meta: dict[str, Any] | None = None
        self._learned: Any = None
        self._parts: list[tuple[bytes, list[Any]]] = []
        self.cache: CacheSink | None = None
        """Where a completed output is also stored across runs (a `wrap(cache=...)` site)."""
        if hit:
            log.debug("run %r: %s replayed from the journal", run.run_id, self.key)
        elif record is not None and record.status == "started":
            log.debug("run %r: %s started, never completed: on_incomplete", run.run_id, self.key)
        else:
            log.debug("run %r: %s has no recording; it executes", run.run_id, self.key)

    # -- replay -----------------------------------------------------------------------------
    def value(self) -> Any:
        """The recorded output of a hit, decoded (raises a recorded failure again)."""
        assert self.record is not None and self.hit
        if self.record.status == "failed":
            err = self.record.meta.get("error", {})
            raise RecordedStepError(err.get("type", "Error"), err.get("message", ""))
        if self.skipped:
            return None
        r = self.record
        return self.run.middleware.serializer.open(r.output, self.place(r.run_id))

    def place(self, run_id: str | None = None, field: str = "output") -> Place:
        """Where this call's output (or `field`) is stored (what its ciphertext is bound to)."""
        namespace = self.run.middleware.store.namespace
        return step_place(namespace, run_id or self.run.run_id, self.key, field)

    def serve(self, tree: Any, meta: dict[str, Any]) -> None:
        """Make this call a hit on `tree`, an output as the journal stores it (a cache entry).

        It is recorded in the run first, so a crash after it replays the same value.
        """
        record = self.run._record(self, "completed", tree, self._attempt(dict(meta)))
        try:
            self._put(record)
        except BaseException:
            self.run._release(self)
            raise
        self.record, self.hit = record, True

    @property
    def meta(self) -> dict[str, Any]:
        """Meta of the recorded step (usage, timings...) or {} when there is none."""
        return {} if self.record is None else self.record.meta

    # -- execution --------------------------------------------------------------------------
    def _started_record(self) -> StepRecord | None:
        self._t0 = time.perf_counter()
        if not self.side_effects:
            return None
        now = time.time()
        return self.run._record(self, "started", None, self._attempt({"started_at": now}))

    def start(self) -> None:
        """Write the `started` marker (for calls with side effects) before executing.

        Under `on_incomplete="rerun"` a lost marker changes nothing a resume does (the call
        runs again either way), so it is written without waiting for the disk; under `skip`
        and `raise` the marker is what the resume acts on, so it is durable first.
        """
        before = self.record
        try:
            self.run.write_totals()  # the replays and failures before it, in case it never returns
            record = self._started_record()
            if record is not None:
                self._put(record, durable=self.policy != "rerun")
        except BaseException:
            # It never ran: a retry must reuse this key and find what the store holds.
            self.run._unrecord(self, before)
            raise

    async def astart(self) -> None:
        """Async twin of `start`."""
        before = self.record
        try:
            await self.run.awrite_totals()
            record = self._started_record()
            if record is not None:
                await self._aput(record, durable=self.policy != "rerun")
        except BaseException:
            # It never ran: a retry must reuse this key and find what the store holds.
            self.run._unrecord(self, before)
            raise

    def _attempt(self, meta: dict[str, Any]) -> dict[str, Any]:
        """`meta` of a record of this call: its inputs, and the attempt it replaces if any."""
        if self.prior is not None and self.record is self.prior:
            meta.update(replacing(self.prior, time.time()))
        if self.inputs is not NO_INPUTS:
            if self._input_meta is None:
                serializer, memory = self.run.middleware.serializer, self.run.input_memory
                place = None if serializer.encryption is None else self.place(field="inputs")
                self._input_meta, self._learned = seal_inputs(
                    self.inputs, self.key, memory, serializer, place
                )
            meta.update(self._input_meta)
        return meta

    def produced(self, digest: bytes, path: list[Any]) -> None:
        """Note a part of the output (at `path` in its tree) a later chat prompt may repeat.

        Once the output is written, a prompt holding a message of that `digest` (a `Chat`
        digest) refers to it there instead of storing it again.
        """
        self._parts.append((digest, path))

    def _written(self) -> None:
        """Once a record of this call is stored: what later inputs may refer to."""
        memory = self.run.input_memory
        if self._learned is not None:
            memory.commit(self._learned)
            self._learned = None
        if self._parts and self.record is not None and self.record.status == "completed":
            memory.produced(self.key, self._parts)
            self._parts = []

    def _put(self, record: StepRecord, *, durable: bool = True) -> None:
        """Write `record`, first (once, in the same atomic write) the attempt it replaces."""
        store, owner = self.run.middleware.store, self.run.owner
        prior, self.prior = self.prior, None
        if prior is None:
            store.put_step(record, owner=owner, durable=durable)
        else:
            store.put_steps([replaced(prior, record.step_id), record], owner=owner, durable=durable)
        if self._learned is not None or self._parts:
            self._written()

    async def _aput(self, record: StepRecord, *, durable: bool = True) -> None:
        """Async twin of `_put`."""
        store, owner = self.run.middleware.store, self.run.owner
        prior, self.prior = self.prior, None
        if prior is None:
            await store.aput_step(record, owner=owner, durable=durable)
        else:
            kept = [replaced(prior, record.step_id), record]
            await store.aput_steps(kept, owner=owner, durable=durable)
        if self._learned is not None or self._parts:
            self._written()

    @contextmanager
    def executing(self) -> Iterator[None]:
        """Make `idempotency_key()` and nested-call detection see this call."""
        token = CURRENT_CALL.set(self)
        try:
            yield
        finally:
            CURRENT_CALL.reset(token)

    def _completed_record(self, output: Any, meta: dict[str, Any] | None) -> StepRecord:
        try:
            tree = self.run.middleware.serializer.store_tree(output, "output", self.place())
        except BaseException:
            self.run._release(self)
            raise
        info = dict(meta or {})
        info["duration"] = time.perf_counter() - self._t0 if self._t0 else 0.0
        return self.run._record(self, "completed", tree, self._attempt(info))

    def complete(
        self, output: Any, meta: dict[str, Any] | None = None, *, note: bool = True
    ) -> None:
        """Record the output; `meta` may carry `tokens` (int) and anything JSON-able.

        `note=False` leaves reporting the outcome to the caller (a cache hit reports `cached`).

        Raises:
            SerializationError: The output cannot be stored; the call counts as failed and the
                run can go on.
        """
        record = self._completed_record(output, meta)
        try:
            self._put(record)
        except BaseException:
            self.run._release(self)
            raise
        if self.cache is not None:
            self.cache.put(record)
        if note:
            self.run._after_complete(self, record)

    async def acomplete(
        self, output: Any, meta: dict[str, Any] | None = None, *, note: bool = True
    ) -> None:
        """Async twin of `complete`."""
        record = self._completed_record(output, meta)
        try:
            await self._aput(record)
        except BaseException:
            self.run._release(self)
            raise
        if self.cache is not None:
            await self.cache.aput(record)
        if note:
            self.run._after_complete(self, record)

    def perform(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Start this call, run `fn(*args, **kwargs)` as it, record its failure or result."""
        self.start()
        with self.executing():
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                self.fail(exc)
                raise
        self.complete(result)
        return result

    async def aperform(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Async twin of `perform`."""
        await self.astart()
        with self.executing():
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                await self.afail(exc)
                raise
        await self.acomplete(result)
        return result

    def _failed_record(self, exc: BaseException) -> StepRecord | None:
        self.run._note(self, "failed", exc)
        error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        error["traceback"] = "".join(traceback.format_exception(exc))[-TRACEBACK_KEPT:]
        meta: dict[str, Any] = {"error": error}
        if self.record_failures:
            meta["recorded"] = True
        else:
            self.run._release(self)
        if not (self.side_effects or self.record_failures):
            return None
        return self.run._record(self, "failed", None, self._attempt(meta))

    def fail(self, exc: BaseException) -> None:
        """Note a failure: the call runs again on resume unless `record_failures` is set."""
        record = self._failed_record(exc)
        if record is not None:
            self._put(record)

    async def afail(self, exc: BaseException) -> None:
        """Async twin of `fail`."""
        record = self._failed_record(exc)
        if record is not None:
            await self._aput(record)


CURRENT_CALL: ContextVar[Call | None] = ContextVar("agentrewind_call", default=None)
"""The call executing now in this context (set by `Call.executing`)."""
