"""The tick journal of a workflow run in the agentrewind store: load, cut, restore, write.

Each tick the control loop reduces becomes one step record (`kind="node"`), keyed
`llamaindex:tick#<seq>`, whose output holds the encoded tick (the `BasicRuntime.journal()`
encoding, stored as its JSON value so `show` and `diff` read it; `tick_text` gives back the
text `BasicRuntime.restore` replays; records written before 0.2 hold the text) plus, when
they changed, the committed `ctx.store` state, the agent memories and the stream events of
the step it ends. One record is one atomic store write.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from workflows import Context, Workflow
from workflows.context.context_types import SerializedContext
from workflows.context.serializers import JsonSerializer
from workflows.events import Event
from workflows.plugins.basic import JournalRecord, basic_runtime
from workflows.runtime.control_loop.reduce import _reduce_tick
from workflows.runtime.types.commands import (
    CommandCompleteRun,
    CommandFailWorkflow,
    CommandHalt,
    CommandPublishEvent,
)
from workflows.runtime.types.internal_state import BrokerState
from workflows.runtime.types.ticks import TickStepResult, WorkflowTick, WorkflowTickAdapter

from agentrewind import Run, StepRecord
from agentrewind.adapters import new_id

from ._serializer import unstorable_error, unstorable_paths

__all__ = ["TICK_PREFIX", "Journal", "decode_tick", "describe_tick", "tick_record", "tick_text"]

TICK_PREFIX = "llamaindex:tick#"
_TERMINAL = (CommandCompleteRun, CommandFailWorkflow, CommandHalt)


def tick_text(value: Any) -> str:
    """The encoded text of a stored tick or event.

    Stored as its JSON value (before 0.2: as the text itself).
    """
    return value if isinstance(value, str) else json.dumps(value)


def decode_tick(serializer: JsonSerializer, data: str) -> WorkflowTick:
    with serializer.validation_context():
        return WorkflowTickAdapter.validate_python(serializer.deserialize(data))


def describe_tick(tick: WorkflowTick) -> str:
    """A short record name: the tick type, and the step for step ticks."""
    step = getattr(tick, "step_id", None)
    return f"{tick.type}:{step}" if step else tick.type


def step_succeeded(tick: TickStepResult) -> bool:
    """Whether a step result tick carries no failure (its writes may become durable)."""
    return not any(getattr(r, "type", None) == "failed" for r in tick.result)


def _tick_index(record: StepRecord) -> int:
    return int(record.key[len(TICK_PREFIX) :])


def tick_record(run: Run, index: int, name: str, output: dict[str, Any]) -> StepRecord:
    now = time.time()
    return StepRecord(
        run_id=run.run_id,
        step_id=new_id(),
        key=f"{TICK_PREFIX}{index}",
        kind="node",
        name=name,
        status="completed",
        seq=run.next_seq(),
        output=output,
        meta={"tick": index},
        created_at=now,
        updated_at=now,
    )


@dataclasses.dataclass
class Journal:
    """What a run's journal says at the point a resume continues from."""

    ticks: list[str] = dataclasses.field(default_factory=list)
    """Encoded ticks kept for replay (everything before the cut)."""
    state: dict[str, Any] | None = None
    """Committed `ctx.store` state at the cut (the `Context.to_dict()["state"]` layout)."""
    memories: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Journaled agent memories at the cut, by reference."""
    events: list[Event] = dataclasses.field(default_factory=list)
    """Stream events of the run before the cut, in order: those steps wrote (journaled with
    their results) and those the control loop published for each tick (derived again)."""
    stale: list[StepRecord] = dataclasses.field(default_factory=list)
    """Tick records at or after the cut: a resumed run overwrites them."""
    finished: bool = False
    """The journal ends with a completed run."""
    settled_calls: list[StepRecord] = dataclasses.field(default_factory=list)
    """LLM/tool call records made by steps whose result is journaled before the cut."""
    first: int = 0
    """The sequence number of the first kept tick (the base's `journal_seq`, else 0)."""
    base: dict[str, Any] | None = None
    """The snapshot (without state) of the explicit context the run started from."""

    @property
    def resumable(self) -> bool:
        return bool(self.ticks)

    @classmethod
    def load(
        cls,
        steps: list[StepRecord],
        workflow: Workflow,
        serializer: JsonSerializer,
        *,
        fresh: bool = False,
    ) -> Journal:
        """Read the run's tick records and cut them where the run stopped for good.

        A crash leaves no terminal tick: everything journaled replays and the steps that were
        in flight run again. A failure, a cancellation or a completion is a terminal tick: the
        cut drops it, so the failed step runs again on the state from before it (a completed
        run starts over, its LLM and tool calls replaying from the journal). A run started
        from an explicit context journals that context's snapshot (`base`) with its first
        tick; its ticks replay on top of it. With `fresh`, every tick record is stale: the
        caller starts the journal again (from an explicit context).
        """
        records = [r for r in steps if r.key.startswith(TICK_PREFIX) and not r.meta.get("dropped")]
        records.sort(key=_tick_index)
        if fresh:
            return cls(stale=records)
        first = _tick_index(records[0]) if records else 0
        base = records[0].output.get("base") if records else None
        if base is None:
            first = 0
        kept: list[StepRecord] = []
        for i, record in enumerate(records):
            if _tick_index(record) != first + i:
                break
            kept.append(record)
        cut, finished, settled, published = cls._find_cut(
            [tick_text(r.output["tick"]) for r in kept], workflow, serializer, base
        )
        if finished:
            cut, settled = 0, set()
        journal = cls(finished=finished, stale=records[cut:], first=first)
        journal.base = base if cut else None
        journal.settled_calls = [
            r
            for r in steps
            if r.kind in ("llm", "tool", "custom") and r.meta.get("invocation") in settled
        ]
        for record, loop_events in zip(kept[:cut], published, strict=False):
            out = record.output
            journal.ticks.append(tick_text(out["tick"]))
            if out.get("state") is not None:
                journal.state = out["state"]
            journal.memories.update(out.get("memories") or {})
            journal.events.extend(
                serializer.deserialize(tick_text(e)) for e in out.get("events") or []
            )
            journal.events.extend(loop_events)
        return journal

    @staticmethod
    def _find_cut(
        ticks: list[str],
        workflow: Workflow,
        serializer: JsonSerializer,
        base: dict[str, Any] | None,
    ) -> tuple[int, bool, set[str], list[list[Event]]]:
        """Reduce the ticks up to the first terminal one.

        Returns the cut, whether the run completed, the step invocations whose results are
        journaled, and the events each tick's commands published.
        """
        if base is None:
            state = BrokerState.from_workflow(workflow)
        else:
            parsed = SerializedContext.from_dict_auto(base, serializer)
            state = BrokerState.from_serialized(parsed, workflow, serializer)
        settled: set[str] = set()
        published: list[list[Event]] = []
        for i, data in enumerate(ticks):
            tick = decode_tick(serializer, data)
            state, commands = _reduce_tick(tick, state, time.time())
            for command in commands:
                if isinstance(command, _TERMINAL):
                    return i, isinstance(command, CommandCompleteRun), settled, published
            published.append([c.event for c in commands if isinstance(c, CommandPublishEvent)])
            if (
                isinstance(tick, TickStepResult)
                and tick.invocation_id is not None
                and step_succeeded(tick)
            ):
                settled.add(tick.invocation_id)
        return len(ticks), False, settled, published

    def settle_calls(self, run: Run) -> None:
        """Count the calls of journaled steps as consumed.

        Those steps never run again, so their recordings are not replayed: no divergence.
        """
        run.mark_consumed(record.key for record in self.settled_calls)

    def context(self, workflow: Workflow, serializer: JsonSerializer) -> Context:
        """A context that continues the run: the replayed broker state plus the committed state."""
        records = [
            JournalRecord(seq=self.first + i, data=data) for i, data in enumerate(self.ticks)
        ]
        restored = basic_runtime.restore(workflow, self.base, records, serializer=serializer)
        snapshot = restored.to_dict(serializer, include_state=False)
        missing = unstorable_paths(self.state)
        if missing:
            raise unstorable_error(missing)
        if self.state is not None:
            snapshot["state"] = self.state
        return Context.from_dict(workflow, snapshot, serializer=serializer)
