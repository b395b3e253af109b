"""A pytest plugin that runs llama-index-workflows' own tests with every workflow wrapped.

Loaded with `-p llamaindex_wrap_plugin` (this folder on `PYTHONPATH`) when
`AGENTREWIND_UPSTREAM_STORE` names a store URL. `Workflow.run` is replaced, for the test
session, by one that hands the call to `agentrewind_llamaindex`'s wrapper of that workflow, as
a user who swapped `wf` for `Middleware(url).wrap(wf)` would; agents (whose `run` builds the
start event and then calls `Workflow.run`) are wrapped at that point, with the same arguments.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("ar_upstream", default=False)


def pytest_configure(config: Any) -> None:
    url = os.environ.get("AGENTREWIND_UPSTREAM_STORE")
    if not url:
        return
    from workflows import Workflow

    from agentrewind_llamaindex import Middleware, RewindWorkflow

    middleware = Middleware(url)
    original = Workflow.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _INSIDE.get():  # the wrapper starting the workflow itself
            return original(self, *args, **kwargs)
        wrapper = RewindWorkflow(middleware, self)  # cheap: the runtime is decorated once
        token = _INSIDE.set(True)
        try:
            return wrapper.run(*args, **kwargs)
        finally:
            _INSIDE.reset(token)

    Workflow.run = run  # type: ignore[method-assign]
    config.add_cleanup(middleware.close)
