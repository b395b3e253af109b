"""Issue 12 item 8: every public method of `Runnable`, `RunnableSerializable` and `Pregel` is
accounted for on the wrapper: run through the journal, forwarded, or composed around it.

A LangChain release that adds a public method fails `test_every_public_method_is_classified`
until someone decides which of the three it is.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable, RunnableLambda, RunnableSerializable
from langgraph.pregel import Pregel

from agentrewind_langchain import Middleware, RewindRunnable
from agentrewind_langchain.testing import ScriptedChatModel

COMPOSED = {
    # Runnable's own implementation builds a new runnable around the wrapper: every call of
    # the result still goes through the wrapper (each retry attempt resumes the run).
    "with_retry",
    "with_fallbacks",
    "with_listeners",
    "with_alisteners",
    "with_config",
    "with_types",
    "bind",
    "pipe",
    "assign",
    "pick",
    "map",
    "as_tool",
    # properties that call the wrapper's (forwarded) get_*_schema
    "input_schema",
    "output_schema",
}


def public_names() -> set[str]:
    names: set[str] = set()
    for cls in (Runnable, RunnableSerializable, Pregel):
        names |= {n for n in dir(cls) if not n.startswith("_")}
    return names


def test_every_public_method_is_classified() -> None:
    unclassified = []
    for name in sorted(public_names()):
        overridden = name in vars(RewindRunnable)
        forwarded = not hasattr(Runnable, name)  # reached through __getattr__
        if not (overridden or forwarded or name in COMPOSED):
            unclassified.append(name)
    assert unclassified == []


def test_forwarded_and_composed_methods_work(sqlite_url: str) -> None:
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["x"], counter=counter)
    wrapped = Middleware(sqlite_url).wrap(model)
    cfg: Any = {"configurable": {"thread_id": "fc"}}
    piped = wrapped.pipe(RunnableLambda(lambda m: m.content.upper()))
    assert piped.invoke("q", cfg) == "X"
    assert wrapped.with_retry().invoke("q", cfg).content == "x"
    assert wrapped.with_types(input_type=str).invoke("q", cfg).content == "x"
    assert wrapped.bind(stop=None).invoke("q", cfg).content == "x"
    assert counter["calls"] == 1  # the rerun through each derived runnable replayed
    assert wrapped.model_dump() == model.model_dump()  # RunnableSerializable: forwarded
    assert wrapped.model_copy().bound is not model  # a copy of the inner model comes back wrapped
    assert isinstance(wrapped.model_copy(), RewindRunnable)
