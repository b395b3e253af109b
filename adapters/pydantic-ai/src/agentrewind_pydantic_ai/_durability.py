"""`RewindDurability`: agentrewind as a pydantic-ai durable execution engine, with no server."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.durable_exec import (
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    conversation_id_from_run_id,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT

import agentrewind

from ._backend import RewindOperationBackend
from ._codec import REWIND_CODEC

__all__ = ["JournalValueError", "RewindDurability", "next_agent_run_id"]


class JournalValueError(agentrewind.SerializationError):
    """A durable unit's result cannot be reduced to JSON, so the journal cannot store it.

    Raised inside the unit, at the write, naming the unit's result type; the run can go on
    and the unit runs again on resume.
    """


def _serialization_failure(error: Exception) -> BaseException:
    return JournalValueError(
        f"agentrewind cannot journal this durable unit's result: pydantic-ai's JSON codec "
        f"failed ({type(error).__name__}: {error})"
    )


_counters: WeakKeyDictionary[agentrewind.Run, int] = WeakKeyDictionary()
_counters_lock = threading.Lock()


def next_agent_run_id(run: agentrewind.Run, taken: frozenset[str] = frozenset()) -> str:
    """The next pydantic-ai `run_id` of an agent run inside agentrewind run `run`.

    `{run id}:{n}` for the n-th agent run of this execution (the same order on every resume),
    skipping ids in `taken` (those already on the message history the run continues).
    """
    with _counters_lock:
        n = _counters.get(run, 0)
        while True:
            candidate = f"{run.run_id}:{n}"
            n += 1
            if candidate not in taken:
                break
        _counters[run] = n
    return candidate


@dataclass(init=False, kw_only=True)
class RewindDurability(BaseDurabilityCapability[AgentDepsT]):
    """Capability that makes a pydantic-ai agent durable by journaling into agentrewind.

    Inside a run (`with middleware.run("order-42"):`, sync or async), every model request,
    tool call and event-handler call of the agent is one durable unit, recorded in the run's
    store (SQLite, Redis, PostgreSQL) as it finishes. Run the same code with the same run id
    after a crash, in any process: finished units replay from the journal, the rest runs. A
    unit whose input changed gets another key and runs; it never receives another call's
    result. Outside a run the capability is transparent: the agent runs as without it.

    Example:
        ```python
        from pydantic_ai import Agent
        from agentrewind_pydantic_ai import RewindDurability

        durability = RewindDurability("sqlite:///runs.db")
        agent = Agent("test", name="support", capabilities=[durability])
        with durability.middleware.run("ticket-7"):
            print(agent.run_sync("Where is my order?").output)
        ```

    Args:
        middleware_or_url: The `agentrewind.Middleware` (or a store URL to open one) that
            `RewindDurability.run` and wrapped agents open runs in. Units are journaled in the
            run in progress, whichever middleware opened it. None: the default store.
        name: Name of the agent's durable units (default: the agent's `name`). It is part of
            every recorded key: keep it stable while runs are in flight.
        models: Additional models by id, for switching models at run time (see pydantic-ai's
            `BaseDurabilityCapability`).
        event_stream_handler: Handler of the run's events; each call is a durable unit, so a
            replayed run does not deliver events to it twice.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="agentrewind",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="run",
        # The journal stores JSON: pydantic-ai reduces every result to JSON inside the unit
        # (so an unstorable value fails there, named) and rebuilds it outside; see `_codec`.
        codec=REWIND_CODEC,
        serialization_failure=_serialization_failure,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",  # units run in the run's own process
            "dynamic": "enter-never",
        },
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
        sequential_tools_in_durable_context=False,  # keys are content-based, not positional
        # A toolset passed to one run bypasses binding: its calls would not be journaled.
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key=None,
    )

    def __init__(
        self,
        middleware_or_url: agentrewind.Middleware | str | None = None,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self._middleware_arg = middleware_or_url
        self._backend: RewindOperationBackend | None = None
        self._middleware: agentrewind.Middleware | None = (
            middleware_or_url if isinstance(middleware_or_url, agentrewind.Middleware) else None
        )

    @property
    def middleware(self) -> agentrewind.Middleware:
        """The middleware this capability opens runs in (created on first use from a URL)."""
        if self._middleware is None:
            url = self._middleware_arg if isinstance(self._middleware_arg, str) else None
            self._middleware = agentrewind.Middleware(url)
        return self._middleware

    def run(self, run_id: str | None = None, **options: Any) -> agentrewind.RunContext:
        """`self.middleware.run(run_id, ...)`: open or resume the run agents journal into."""
        return self.middleware.run(run_id, **options)

    @property
    def in_durable_context(self) -> bool:
        """Whether an agentrewind run is in progress in this context (thread or task)."""
        return agentrewind.current_run() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        """The backend that journals each durable unit through the run in progress."""
        backend = self._backend
        if backend is None or backend.agent_name != self.name:  # a copy bound to another agent
            backend = RewindOperationBackend(
                agent_name=self.name, default_model_id=self.default_model_id
            )
            self._backend = backend
        return backend

    def get_default_run_id(self) -> str | None:
        """`{agentrewind run id}:{n}` inside a run (the same on resume), else None."""
        run = agentrewind.current_run()
        return None if run is None else next_agent_run_id(run)

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """Derived from the run id inside a run, so a resumed run keeps its conversation."""
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None
