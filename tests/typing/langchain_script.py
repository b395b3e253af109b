"""What a LangChain user's type checker sees (mypy --strict, in the nox langchain session).

`wrap()` returns the type it was given, so the wrapped chain keeps its input and output
types. Never executed.
"""

from __future__ import annotations

from typing import assert_type

from langchain_core.runnables import RunnableLambda

import agentrewind
import agentrewind_langchain


def increment(x: int) -> int:
    return x + 1


chain = RunnableLambda(increment)

wrapped = agentrewind.Middleware("memory://").wrap(chain)
assert_type(wrapped, RunnableLambda[int, int])
assert_type(wrapped.invoke(1), int)
wrapped.invoke("one")  # type: ignore[arg-type]

direct = agentrewind_langchain.Middleware("memory://").wrap(chain)
assert_type(direct, RunnableLambda[int, int])
