"""`RewindAgent`: what `middleware.wrap(agent)` returns, a pydantic-ai agent journaled per run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT

import agentrewind
from agentrewind.adapters import CacheSites

from ._backend import CACHE
from ._durability import RewindDurability, next_agent_run_id

__all__ = ["NoRunError", "RewindAgent"]


class NoRunError(agentrewind.AgentRewindError):
    """A wrapped agent ran outside an agentrewind run, so there is no run to resume."""


class RewindAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """A pydantic-ai agent whose runs are journaled into the agentrewind run in progress.

    `run`, `run_sync`, `run_stream`, `run_stream_events` and `iter` behave as the wrapped
    agent's. Call them inside `with middleware.run("order-42"):` (or `async with`): finished
    model requests and tool calls replay from that run's journal, the rest runs. The
    pydantic-ai `run_id` of each agent run is derived from the agentrewind run (`{id}:{n}`)
    unless one is passed.

    Example:
        ```python
        from pydantic_ai import Agent
        import agentrewind

        mw = agentrewind.Middleware("sqlite:///runs.db")
        agent = mw.wrap(Agent("test", name="support"))
        with mw.run("ticket-8"):
            print(agent.run_sync("Where is my order?").output)
        ```

    Args:
        wrapped: The agent to wrap; it needs a `name` (part of every recorded key).
        durability: The capability to run it with (default: a `RewindDurability` of
            `middleware`), added to each run unless the agent already has one.
        middleware: The middleware runs are opened in by `RewindAgent.run_in`.
        cache: The cross-run cache rules of this wrapper (`middleware.wrap(agent,
            cache_ttl=, cache=[...])`): the model requests and tool calls of its runs
            follow them, those of another wrapped agent follow its own.
    """

    def __init__(
        self,
        wrapped: AbstractAgent[AgentDepsT, OutputDataT],
        *,
        middleware: agentrewind.Middleware,
        durability: RewindDurability[AgentDepsT] | None = None,
        cache: CacheSites | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.middleware = middleware
        self.cache = cache
        own = RewindDurability.from_agent(wrapped)
        self._own_durability = own is not None
        self.durability: RewindDurability[AgentDepsT] = (
            own or durability or RewindDurability(middleware)
        )

    def run_in(self, run_id: str | None = None, **options: Any) -> agentrewind.RunContext:
        """`middleware.run(run_id, ...)`: open or resume the run this agent journals into."""
        return self.middleware.run(run_id, **options)

    @asynccontextmanager
    async def iter(
        self, user_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[AgentRun[AgentDepsT, Any]]:
        """The wrapped agent's `iter`, inside the run in progress (see the class docstring).

        Raises:
            NoRunError: No agentrewind run is in progress in this context.
        """
        run = agentrewind.current_run()
        if run is None:
            raise NoRunError(
                f"agent {self.name!r} is wrapped by agentrewind but ran outside a run: open one "
                'with `with middleware.run("<run id>"):` (or `async with`) around the call; '
                "the same id resumes it after a crash"
            )
        if kwargs.get("run_id") is None:
            history: Sequence[ModelMessage] = kwargs.get("message_history") or ()
            taken = frozenset(m.run_id for m in history if m.run_id is not None)
            kwargs["run_id"] = next_agent_run_id(run, taken)
        if not self._own_durability:
            kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), self.durability]
        token = CACHE.set(self.cache)
        try:
            async with self.wrapped.iter(user_prompt, **kwargs) as agent_run:
                yield agent_run
        finally:
            CACHE.reset(token)
