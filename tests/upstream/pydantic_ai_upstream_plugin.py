"""pytest plugin: pydantic-ai's own tests, with every agent run journaled by agentrewind.

Loaded with `-p pydantic_ai_upstream_plugin` into a run of pydantic-ai's tests (see
`pydantic_ai_upstream.py`) when `AGENTREWIND_UPSTREAM_STORE` is set. `Agent.iter` (which
`run`, `run_sync`, `run_stream` and `run_stream_events` all go through) is patched so that
every agent run a test starts goes through `middleware.wrap(agent)` instead, as a user who
swapped each agent for the wrapped one would:

- outside an agentrewind run (the test's own call), the wrapped agent runs inside a fresh
  `middleware.run(...)`, so each model request, tool call and event-handler call is a durable
  unit journaled in the store;
- inside a run (an agent called from another agent's tool), the wrapped agent journals into
  that run, as a nested agent of a wrapped one does.

With `AGENTREWIND_UPSTREAM_NAME_AGENTS` set, an agent without a name is named after the test
before it is wrapped (as a user must name an agent for any durable engine): a diagnostic run
that shows what fails beneath pydantic-ai's name rule.

The one call the wrapper makes on the agent it wraps reaches the original `Agent.iter`.
Each test journals in a fresh SQLite file of its own (under its `tmp_path`); the store URL in
the environment only says "wrapped" (only `sqlite` is supported, so every test sees a new,
empty journal).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

_WRAPPING: contextvars.ContextVar[Any] = contextvars.ContextVar("upstream_wrapping", default=None)
_middleware: Any = None
_runs = itertools.count()
_test = "t"


def _mw() -> Any:
    if _middleware is None:
        raise RuntimeError("pydantic_ai_upstream_plugin: no middleware outside a test")
    return _middleware


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("AGENTREWIND_UPSTREAM_STORE"):
        return
    from pydantic_ai import Agent

    import agentrewind

    original = Agent.iter.__wrapped__  # type: ignore[attr-defined]  # the generator function

    @asynccontextmanager
    async def iter(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if _WRAPPING.get() is self:  # the wrapper driving the agent it wraps: the original
            _WRAPPING.set(None)
            async with asynccontextmanager(original)(self, *args, **kwargs) as run:
                yield run
            return
        if self.name is None and os.environ.get("AGENTREWIND_UPSTREAM_NAME_AGENTS"):
            self.name = f"{_test}-agent"
        wrapped = _mw().wrap(self)
        # an agent inside a wrapped agent's run journals into that run; else a fresh run
        outer = (
            contextlib.nullcontext()
            if agentrewind.current_run() is not None
            else _mw().run(f"{_test}-{next(_runs)}")
        )
        token: contextvars.Token[Any] | None = _WRAPPING.set(self)
        try:
            async with outer, wrapped.iter(*args, **kwargs) as run:
                _WRAPPING.reset(token)  # the wrapper has made its one call on the agent
                token = None
                yield run
        finally:
            if token is not None:
                _WRAPPING.reset(token)

    Agent.iter = iter  # type: ignore[method-assign,assignment]


@pytest.fixture(autouse=True)
def _agentrewind_per_test_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    """A fresh SQLite journal per test, opened before the test (outside its event loop)."""
    global _middleware, _test
    if not os.environ.get("AGENTREWIND_UPSTREAM_STORE"):
        yield
        return
    from agentrewind_pydantic_ai import Middleware

    _test = request.node.name[:60]
    _middleware = Middleware(f"sqlite:///{tmp_path / 'agentrewind-journal.db'}")
    try:
        yield
    finally:
        middleware, _middleware = _middleware, None
        middleware.store.close()
