"""agentrewind for LangChain: record and replay every chat-model and tool call of a runnable.

    from agentrewind_langchain import Middleware

    chain = Middleware("sqlite:///runs.db").wrap(chain)
    chain.invoke(inputs, {"configurable": {"thread_id": "order-42"}})
    # crashed or failed? run the same line again: finished calls replay, the rest runs

`RewindAgentMiddleware` does the same for `langchain.agents.create_agent` through its
middleware hooks, without patching anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _codec
from ._cache import RewindCache
from ._codec import ALLOWED_OBJECTS
from ._middleware import Middleware
from ._patches import install
from ._runnable import RUN_ID_KEY, RewindRunnable, resolve_run_id
from ._scope import REPLAYED_TAG

if TYPE_CHECKING:
    from ._agent import RewindAgentMiddleware

__all__ = [
    "ALLOWED_OBJECTS",
    "REPLAYED_TAG",
    "RUN_ID_KEY",
    "Middleware",
    "RewindAgentMiddleware",
    "RewindCache",
    "RewindRunnable",
    "install",
    "resolve_run_id",
]

del _codec  # imported for its side effect: the LangChain codec is registered


def __getattr__(name: str) -> Any:
    # `langchain` (the agents package) is optional: only RewindAgentMiddleware needs it.
    if name == "RewindAgentMiddleware":
        try:
            from ._agent import RewindAgentMiddleware
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "RewindAgentMiddleware needs the `langchain` package (>=1.0): pip install langchain"
            ) from exc
        return RewindAgentMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
