"""Warnings that point at the user's line, not at agentrewind's or a framework's internals."""

from __future__ import annotations

import sys
import warnings

__all__ = ["warn_at_caller"]

# Top-level packages whose frames a warning skips on its way to the user's code: ours, the
# frameworks our adapters wrap, and the standard library's plumbing between them.
_INTERNAL = frozenset(
    {
        "langchain",
        "langchain_core",
        "langgraph",
        "llama_index",
        "workflows",
        "pydantic_ai",
        "pydantic_graph",
        "asyncio",
        "concurrent",
        "contextlib",
        "contextvars",
        "functools",
        "threading",
        "anyio",
    }
)


def _internal(module: str) -> bool:
    top = module.partition(".")[0]
    return top.startswith("agentrewind") or top in _INTERNAL


def warn_at_caller(warning: Warning) -> None:
    """Issue `warning` at the first frame outside agentrewind and the frameworks it wraps.

    Falls back to the direct caller when every frame is internal (a framework's own thread).
    """
    frame = sys._getframe(1)
    level = 2  # stacklevel 2: the caller of this function
    while frame is not None and _internal(frame.f_globals.get("__name__", "")):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(warning, stacklevel=level if frame is not None else 2)
