"""The `agentrewind.adapters` entry point and the LlamaIndex `Middleware`."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from workflows import Workflow

import agentrewind
from agentrewind.adapters import CacheSites

from ._workflow import RewindWorkflow

__all__ = ["ADAPTER", "LlamaIndexAdapter", "Middleware"]


class LlamaIndexAdapter:
    """Claims LlamaIndex workflows and agents for `agentrewind.Middleware.wrap`."""

    def claims(self, obj: Any) -> bool:
        """True for a `workflows.Workflow` (agents and `AgentWorkflow` included)."""
        return isinstance(obj, Workflow | RewindWorkflow)

    def wrap(self, middleware: agentrewind.Middleware, obj: Any, **kwargs: Any) -> RewindWorkflow:
        """Return `obj` as a `RewindWorkflow` journaled into `middleware`'s store.

        The only options are the cross-run cache's (`cache_ttl=`, `cache=[...]`,
        `max_entries=`), this wrapper's own.
        """
        cache = CacheSites.take(kwargs)
        if kwargs:
            raise TypeError(f"unexpected options for a LlamaIndex workflow: {sorted(kwargs)}")
        if isinstance(obj, RewindWorkflow):
            obj = obj.workflow
        return RewindWorkflow(middleware, obj, cache)


ADAPTER = LlamaIndexAdapter()


W = TypeVar("W")


class Middleware(agentrewind.Middleware):
    """`agentrewind.Middleware` whose `wrap` takes LlamaIndex workflows directly.

    Example:
        >>> from agentrewind_llamaindex import Middleware
        >>> mw = Middleware("sqlite:///runs.db")  # doctest: +SKIP
        >>> wf = mw.wrap(MyWorkflow(timeout=60))  # doctest: +SKIP
        >>> result = await wf.run(run_id="order-42", topic="pirates")  # doctest: +SKIP
    """

    def wrap(self, obj: W, **kwargs: Any) -> W:
        """Wrap a LlamaIndex workflow or agent; other objects go to `agentrewind.Middleware.wrap`.

        Raises:
            AdapterNotFoundError: `obj` is not a workflow and no other adapter claims it.
        """
        if ADAPTER.claims(obj):
            # A RewindWorkflow delegates every other attribute to `obj`: typed as `obj`.
            return cast(W, ADAPTER.wrap(self, obj, **kwargs))
        return super().wrap(obj, **kwargs)
