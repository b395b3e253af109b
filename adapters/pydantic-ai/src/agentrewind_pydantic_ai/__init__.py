"""agentrewind for Pydantic AI: a durable execution engine for pydantic-ai agents, with no server.

>>> from agentrewind_pydantic_ai import RewindDurability                  # doctest: +SKIP
>>> durability = RewindDurability("sqlite:///runs.db")                    # doctest: +SKIP
>>> agent = Agent("openai:gpt-5", name="support", capabilities=[durability])  # doctest: +SKIP
>>> with durability.run("ticket-7"):                                       # doctest: +SKIP
...     agent.run_sync("Where is my order?")

Run the same lines again after a crash: finished model requests and tool calls replay from
the journal, the rest runs. `middleware.wrap(agent)` does the same for an existing agent.
"""

from __future__ import annotations

from ._adapter import ADAPTER, Middleware, PydanticAIAdapter
from ._agent import NoRunError, RewindAgent
from ._backend import RewindOperationBackend
from ._durability import JournalValueError, RewindDurability

__all__ = [
    "ADAPTER",
    "JournalValueError",
    "Middleware",
    "NoRunError",
    "PydanticAIAdapter",
    "RewindAgent",
    "RewindDurability",
    "RewindOperationBackend",
]
