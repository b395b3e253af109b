"""The `agentrewind.adapters` entry point: lets `agentrewind.Middleware.wrap` take runnables."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable

from ._middleware import wrap_runnable

__all__ = ["ADAPTER", "LangChainAdapter"]


class LangChainAdapter:
    """Claims every LangChain `Runnable` (LCEL chains, agents, compiled LangGraph graphs)."""

    name = "langchain"

    def claims(self, obj: Any) -> bool:
        """True for LangChain runnables."""
        return isinstance(obj, Runnable)

    def wrap(self, middleware: Any, obj: Any, **kwargs: Any) -> Any:
        """Return a `RewindRunnable` around `obj`."""
        return wrap_runnable(middleware, obj, **kwargs)


ADAPTER = LangChainAdapter()
