"""`RewindRuntime`: a runtime decorator that journals every tick with the committed state.

Hook H1+H2 of llamaindex-anchors §4. Its internal adapter writes, in `on_tick` (before the
tick's commands start the next step), one record holding the tick, the committed `ctx.store`
state (`_state.DurableState`), the changed committed agent memories (`_memory`) and the
stream events the tick's step wrote, in one atomic store write. Events the control loop
publishes as commands of a tick (a waiter's `InputRequiredEvent`, `StepStateChanged`, ...) are
not journaled: the tick, durable before its commands run, yields them again when a resume
reduces it (`Journal.load`), so no stream event reaches the caller before the record that
holds it is durable.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from workflows import Workflow
from workflows.context.serializers import BaseSerializer, PickleSerializer
from workflows.events import Event, StartEvent, WorkflowFailedEvent
from workflows.runtime.runtime_decorators import (
    BaseExternalRunAdapterDecorator,
    BaseInternalRunAdapterDecorator,
    BaseRuntimeDecorator,
)
from workflows.runtime.types.internal_state import BrokerState
from workflows.runtime.types.plugin import (
    ExternalRunAdapter,
    InternalRunAdapter,
    Runtime,
    SnapshottableAdapter,
    V2RuntimeCompatibilityShim,
)
from workflows.runtime.types.ticks import (
    TickAddEvent,
    TickSessionStart,
    TickStepResult,
    WorkflowTick,
)

from agentrewind import Run

from ._journal import describe_tick, step_succeeded, tick_record
from ._memory import MemoryRegistry
from ._serializer import RewindSerializer
from ._state import DurableState, StepScopedStore, current_invocation, scoped_store

__all__ = ["RewindRuntime", "RunState"]


@dataclasses.dataclass(eq=False)
class RunState:
    """Everything the adapters of one run share (internal adapters are made per step)."""

    run: Run
    serializer: RewindSerializer
    durable: DurableState
    memories: MemoryRegistry
    next_tick: int
    replay_events: list[Event]
    on_close: Any
    """`async (exc | None) -> None`, called once when the run's result is known."""
    stream_buffers: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    outbox: dict[str, list[TickAddEvent]] = dataclasses.field(default_factory=dict)
    """Events steps sent with `ctx.send_event`, held until the step's result is journaled."""
    proxy: StepScopedStore | None = None
    closed: bool = False
    started: bool = False
    answers: dict[str, int] = dataclasses.field(default_factory=dict)
    """Human-in-the-loop answers used so far in this session, per question (`_waits`)."""
    base: dict[str, Any] | None = None
    """The snapshot (without state) of an explicit context the run started from, journaled
    with the run's first tick so a resume replays the ticks on top of it."""

    def store_for(self, live: Any) -> Any:
        if live is None:
            return None
        if self.proxy is None or self.proxy._live is not live:
            self.proxy = scoped_store(live, self.durable)
        return self.proxy

    async def persist(self, tick: WorkflowTick, live: Any) -> None:
        if isinstance(tick, TickSessionStart) and not self.started:
            self.started = True
            await self.memories.load_pending()
        if live is not None:
            live_state = await live.get_state()
            self.durable.ensure(live_state)
            self.memories.scan(live_state)
        events: list[str] = []
        if isinstance(tick, TickStepResult):
            ok = step_succeeded(tick)
            self.durable.commit(tick.invocation_id, ok)
            self.memories.commit(tick.invocation_id, ok)
            popped = self.stream_buffers.pop(tick.invocation_id or "", [])
            events = popped if ok else []
        else:
            self.durable.commit(None, True)
            self.memories.commit(None, True)
        # JSON values, not JSON text in a string: `show` and `diff` print them as data.
        output: dict[str, Any] = {"tick": _as_json(self.serializer.serialize(tick))}
        if self.base is not None:
            output["base"], self.base = self.base, None
        if self.durable.changed:
            output["state"] = self.durable.data
            self.durable.changed = False
        memories = await self.memories.snapshot()
        if memories:
            output["memories"] = memories
        if events:
            output["events"] = [_as_json(e) for e in events]
        record = tick_record(self.run, self.next_tick, describe_tick(tick), output)
        self.next_tick += 1
        await self.run.awrite_totals()  # the replays before this tick, should the process die
        await self.run.middleware.store.aput_steps([record], owner=self.run.owner)
        failed = isinstance(tick, TickStepResult) and not step_succeeded(tick)
        self.run.observe(record, "failed" if failed else "executed")  # a span per tick (otel)


def _as_json(text: str) -> Any:
    """An encoded tick or event as its JSON value.

    Text that is not JSON (a pickling serializer's) stays text (`tick_text` reads both).
    """
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict | list) else text


class _InternalAdapter(BaseInternalRunAdapterDecorator):
    def __init__(self, decorated: InternalRunAdapter, state: RunState) -> None:
        super().__init__(decorated)
        self._state = state

    def get_state_store(self, namespace: tuple[str, ...] = ()) -> Any:
        live = self._decorated.get_state_store(namespace)
        return self._state.store_for(live) if not namespace else live

    async def write_to_event_stream(self, event: Event) -> None:
        state = self._state
        invocation = current_invocation()
        if invocation is not None:  # written by a step: journaled with the step's result
            state.stream_buffers.setdefault(invocation, []).append(
                state.serializer.serialize(event)
            )
        await self._decorated.write_to_event_stream(event)

    async def send_event(self, tick: WorkflowTick) -> None:
        # Transactional outbox: an event a step sends is delivered once the step's result is
        # journaled (the reducer recorded it as a pending delivery of that result). A step
        # that was in flight at a crash runs again and sends again; holding the first send
        # back means it was never delivered, so nothing downstream runs twice.
        emission = getattr(tick, "emission", None)
        if (
            isinstance(tick, TickAddEvent)
            and emission is not None
            and emission.invocation_id == current_invocation()
        ):
            self._state.outbox.setdefault(emission.invocation_id, []).append(tick)
            return
        await self._decorated.send_event(tick)

    async def on_tick(self, tick: WorkflowTick) -> None:
        await self._decorated.on_tick(tick)
        first = not self._state.started
        try:
            await self._state.persist(tick, self._decorated.get_state_store(()))
        except Exception as exc:
            # The run fails with the journal's error; a terminal event ends the caller's
            # stream (without it a consumer of stream_events() would wait forever).
            name = getattr(getattr(tick, "step_id", None), "name", None) or "journal"
            await self._decorated.write_to_event_stream(
                WorkflowFailedEvent(step_name=name, exception=exc)
            )
            raise
        if isinstance(tick, TickStepResult) and tick.invocation_id is not None:
            for held in self._state.outbox.pop(tick.invocation_id, []):
                await self._decorated.send_event(held)
        if first and isinstance(tick, TickSessionStart):
            # Re-emit what the interrupted run had streamed, before any step runs again.
            for event in self._state.replay_events:
                await self._decorated.write_to_event_stream(event)


class _ExternalAdapter(BaseExternalRunAdapterDecorator):
    def __init__(self, decorated: ExternalRunAdapter, state: RunState) -> None:
        super().__init__(decorated)
        self._state = state

    def get_state_store(self, namespace: tuple[str, ...] = ()) -> Any:
        live = self._decorated.get_state_store(namespace)
        return self._state.store_for(live) if not namespace else live

    async def get_result(self) -> Any:
        try:
            result = await self._decorated.get_result()
        except BaseException as exc:
            await self._close(exc)
            raise
        await self._close(None)
        return result

    async def _close(self, exc: BaseException | None) -> None:
        if self._state.closed:
            return
        self._state.closed = True
        await self._state.on_close(exc)
        abort = getattr(self._decorated, "abort", None)
        if callable(abort):
            abort()  # frees the run id in the inner runtime so the same process can resume it


class _SnapshottableMixin(SnapshottableAdapter):
    """Forwards `ctx.to_dict()`'s snapshot reads to the decorated adapter."""

    _decorated: Any

    @property
    def init_state(self) -> BrokerState:
        state: BrokerState = self._decorated.init_state
        return state

    def replay(self) -> list[WorkflowTick]:
        ticks: list[WorkflowTick] = self._decorated.replay()
        return ticks


class _V2ShimMixin(V2RuntimeCompatibilityShim):
    """Forwards `is_running`, `handler.cancel()` and `get_result_or_none` (v2 handler API)."""

    _decorated: Any

    def get_result_or_none(self) -> Any:
        return self._decorated.get_result_or_none()

    @property
    def is_running(self) -> bool:
        return bool(self._decorated.is_running)

    def abort(self) -> None:
        self._decorated.abort()


_EXTERNAL_CLASSES: dict[tuple[bool, bool], type[_ExternalAdapter]] = {}


def _external_adapter(decorated: ExternalRunAdapter, state: RunState) -> _ExternalAdapter:
    """Our external adapter, with the optional interfaces the decorated adapter has.

    The framework checks them with `isinstance` (`as_snapshottable_adapter`, ...): a wrapper
    that hid them would make `ctx.to_dict()`, `ctx.is_running` and `handler.cancel()` fail.
    """
    flags = (
        isinstance(decorated, SnapshottableAdapter),
        isinstance(decorated, V2RuntimeCompatibilityShim),
    )
    cls = _EXTERNAL_CLASSES.get(flags)
    if cls is None:
        mixins = [m for m, on in zip((_SnapshottableMixin, _V2ShimMixin), flags, strict=True) if on]
        cls = type("_ExternalAdapter", (_ExternalAdapter, *mixins), {})
        _EXTERNAL_CLASSES[flags] = cls
    return cls(decorated, state)


class RewindRuntime(BaseRuntimeDecorator):
    """Wraps a workflow's runtime so runs started by `RewindWorkflow.run` are journaled.

    Runs that were not prepared by `RewindWorkflow.run` pass straight through.

    Args:
        decorated: The runtime the workflow used (usually `workflows.plugins.basic_runtime`).
    """

    def __init__(self, decorated: Runtime) -> None:
        super().__init__(decorated)
        self._runs: dict[str, RunState] = {}

    def prepare(self, run_id: str, state: RunState) -> None:
        """Attach the journal state of a run about to start."""
        self._runs[run_id] = state

    def forget(self, run_id: str) -> None:
        """Detach a finished run."""
        self._runs.pop(run_id, None)

    def run_workflow(
        self,
        run_id: str,
        workflow: Workflow,
        init_state: BrokerState,
        start_event: StartEvent | None = None,
        serialized_state: dict[str, Any] | None = None,
        serializer: BaseSerializer | None = None,
    ) -> ExternalRunAdapter:
        state = self._runs.get(run_id)
        if state is not None:
            state.next_tick = init_state.journal_seq
            if isinstance(serializer, PickleSerializer):
                # A context restored with the caller's PickleSerializer: its state decodes
                # with it, and the journal may fall back to it for what JSON cannot hold.
                state.serializer.framework = serializer
            else:
                serializer = state.serializer
        adapter = super().run_workflow(
            run_id, workflow, init_state, start_event, serialized_state, serializer
        )
        return adapter if state is None else _external_adapter(adapter, state)

    def get_internal_adapter(self, workflow: Workflow) -> InternalRunAdapter:
        adapter = super().get_internal_adapter(workflow)
        state = self._runs.get(adapter.run_id)
        return adapter if state is None else _InternalAdapter(adapter, state)

    def get_external_adapter(self, run_id: str) -> ExternalRunAdapter:
        adapter = super().get_external_adapter(run_id)
        state = self._runs.get(run_id)
        return adapter if state is None else _external_adapter(adapter, state)
