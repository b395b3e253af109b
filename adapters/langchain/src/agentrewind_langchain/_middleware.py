"""`agentrewind_langchain.Middleware`: the core middleware that wraps LangChain runnables."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from langchain_core.runnables import Runnable

import agentrewind
from agentrewind.adapters import CacheSites

from ._patches import install
from ._runnable import RewindRunnable

__all__ = ["Middleware", "wrap_runnable"]


def wrap_runnable(middleware: agentrewind.Middleware, obj: Any, **kwargs: Any) -> RewindRunnable:
    """Wrap `obj` (any LangChain `Runnable`) so its chat-model and tool calls replay.

    Installs the interception patches on first use (inert outside a wrapped run).

    Raises:
        TypeError: `obj` is not a LangChain `Runnable`.
    """
    if not isinstance(obj, Runnable):
        raise TypeError(
            f"agentrewind_langchain can wrap a LangChain Runnable, not {type(obj).__qualname__}"
        )
    cache = CacheSites.take(kwargs)  # `wrap`'s cache_ttl=, cache=[...], max_entries=
    if isinstance(obj, RewindRunnable) and obj.middleware is middleware:
        if not kwargs and cache in (None, obj.cache):
            return obj
        obj = obj.bound  # wrapped again with other options: they replace the first ones
    install()
    return RewindRunnable(middleware, obj, cache=cache, **kwargs)


W = TypeVar("W")


class Middleware(agentrewind.Middleware):
    """The agentrewind middleware, with `wrap` for LangChain runnables built in.

    Same arguments as `agentrewind.Middleware`. `wrap(runnable, strict=None,
    on_incomplete=None, ttl=None, tool_side_effects=True)` returns a `RewindRunnable`;
    other objects go to the installed adapters.

    Example:
        >>> from langchain_core.runnables import RunnableLambda
        >>> mw = Middleware("memory://doc")
        >>> chain = mw.wrap(RunnableLambda(lambda x: x + 1))
        >>> chain.invoke(1, {"configurable": {"thread_id": "t-1"}})
        2
    """

    def wrap(self, obj: W, **kwargs: Any) -> W:
        """Wrap a runnable for record and replay (see `RewindRunnable`)."""
        if isinstance(obj, Runnable):
            # A RewindRunnable delegates every other attribute to `obj`: typed as `obj`.
            return cast(W, wrap_runnable(self, obj, **kwargs))
        return super().wrap(obj, **kwargs)
