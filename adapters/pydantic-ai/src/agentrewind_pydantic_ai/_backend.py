"""The operation backend: each pydantic-ai durable unit is one call of the run in progress."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from pydantic_ai.durable_exec import (
    CallableOperationBackend,
    DurableOperationId,
    JournalOperationNamer,
    RoleBasedOperationConfig,
)

import agentrewind
from agentrewind.adapters import CacheSites

from ._codec import unit_scope
from ._keys import key_and_inputs, kind_of

__all__ = ["CACHE", "RewindOperationBackend", "usage_meta"]

CACHE: ContextVar[CacheSites | None] = ContextVar("agentrewind_pydantic_ai_cache", default=None)
"""The `wrap(cache=...)` rules of the wrapped agent running in this context (`RewindAgent`)."""

UnitConfig = dict[str, Any]
"""Per-unit configuration (none is read yet; the type leaves room for per-tool options)."""


def usage_meta(kind: str, payload: object) -> dict[str, Any]:
    """Meta of a recorded unit: the model's token usage, so `metrics` reports tokens saved."""
    if kind != "llm" or not isinstance(payload, dict):
        return {}
    meta: dict[str, Any] = {}
    usage = payload.get("usage")
    if isinstance(usage, dict):
        tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        meta["tokens"] = tokens
    model = payload.get("model_name")
    if isinstance(model, str):
        meta["model"] = model
    return meta


class RewindOperationBackend(CallableOperationBackend[UnitConfig]):
    """Runs each durable unit as a call of `agentrewind.current_run()`: replayed or recorded.

    The call's name is the unit's persisted operation name (`JournalOperationNamer`), its key
    the digest of pydantic-ai's cache identity (see `_keys`) plus the run's occurrence counter.
    Results cross as JSON (the capability uses pydantic-ai's `JSON_CODEC`), so what the
    journal stores is exactly what pydantic-ai rebuilds on replay.
    """

    def __init__(self, *, agent_name: str, default_model_id: str | None = None) -> None:
        self.agent_name = agent_name
        empty: UnitConfig = {}
        super().__init__(
            namer=JournalOperationNamer(agent_name, default_model_id=default_model_id or "default"),
            config=RoleBasedOperationConfig(model=empty, event=empty, capability=empty, tool=empty),
        )

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: UnitConfig,
    ) -> object:
        """Replay the unit's recorded result, or run `body` and record what it returns."""
        run = agentrewind.current_run()
        if run is None:  # not inside a run: nothing to journal into
            return await body()
        kind = kind_of(operation_id)
        key, inputs = key_and_inputs(cache_key)
        call = run.begin(
            kind, name, key, side_effects=kind == "tool", inputs=inputs, cache=CACHE.get()
        )
        if call.hit:
            return call.value()
        await call.astart()
        with call.executing(), unit_scope(cache_key):
            try:
                payload = await body()
            except BaseException as exc:
                await call.afail(exc)
                raise
        await call.acomplete(payload, usage_meta(kind, payload))
        return payload
