"""The `agentrewind.adapters` entry point and the pydantic-ai `Middleware`."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from pydantic_ai.agent import AbstractAgent

import agentrewind
from agentrewind.adapters import CacheSites

from ._agent import RewindAgent

__all__ = ["ADAPTER", "Middleware", "PydanticAIAdapter"]


class PydanticAIAdapter:
    """Claims pydantic-ai agents for `agentrewind.Middleware.wrap`."""

    def claims(self, obj: Any) -> bool:
        """True for a pydantic-ai agent (`Agent`, or any `AbstractAgent`)."""
        return isinstance(obj, AbstractAgent)

    def wrap(
        self, middleware: agentrewind.Middleware, obj: Any, **kwargs: Any
    ) -> RewindAgent[Any, Any]:
        """Return `obj` as a `RewindAgent` journaled into the run in progress.

        Keyword options go to `RewindAgent` (`durability=`, and the cross-run cache's
        `cache_ttl=`, `cache=[...]`, `max_entries=`: this wrapper's own rules).
        """
        cache = CacheSites.take(kwargs)
        if isinstance(obj, RewindAgent):
            obj = obj.wrapped
        return RewindAgent(obj, middleware=middleware, cache=cache, **kwargs)


ADAPTER = PydanticAIAdapter()

A = TypeVar("A")


class Middleware(agentrewind.Middleware):
    """`agentrewind.Middleware` whose `wrap` takes pydantic-ai agents directly.

    Example:
        ```python
        from pydantic_ai import Agent
        from agentrewind_pydantic_ai import Middleware

        mw = Middleware("sqlite:///runs.db")
        agent = mw.wrap(Agent("test", name="support"))
        with mw.run("ticket-9"):
            print(agent.run_sync("Hello").output)
        ```
    """

    def wrap(self, obj: A, **kwargs: Any) -> A:
        """Wrap a pydantic-ai agent; other objects go to `agentrewind.Middleware.wrap`.

        Raises:
            AdapterNotFoundError: `obj` is not an agent and no other adapter claims it.
        """
        if ADAPTER.claims(obj):
            # A RewindAgent behaves as the agent it wraps: typed as `obj`.
            return cast(A, ADAPTER.wrap(self, obj, **kwargs))
        return super().wrap(obj, **kwargs)
