"""Issue 12 item 9: the run id travels in the run context, never in the user's config.

Lambdas, graph nodes, tools and callbacks of a wrapped runnable see exactly the config they
see unwrapped; code inside the run reads the id from `agentrewind.current_run()`.
"""

from __future__ import annotations

from typing import Any, TypedDict
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import agentrewind
from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel

# Differ on every invocation whatever the wrapper does (task ids, checkpoint namespaces).
VOLATILE = {
    "checkpoint_ns",
    "checkpoint_map",
    "langgraph_checkpoint_ns",
    "langgraph_path",
    "langgraph_triggers",
}


class Seen(BaseCallbackHandler):
    """Metadata and tags every callback receives."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, dict[str, Any], list[str]]] = []

    def _add(self, kind: str, metadata: dict[str, Any] | None, tags: list[str] | None) -> None:
        keep = {k: v for k, v in (metadata or {}).items() if k not in VOLATILE}
        self.starts.append((kind, keep, sorted(tags or [])))

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self._add("chain", kw.get("metadata"), kw.get("tags"))

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any
    ) -> None:
        self._add("chat", kw.get("metadata"), kw.get("tags"))

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kw: Any) -> None:
        self._add("tool", kw.get("metadata"), kw.get("tags"))


def public(config: RunnableConfig) -> dict[str, Any]:
    """What user code compares or forwards: configurable (no LangGraph internals) and metadata."""
    configurable = {
        k: v
        for k, v in (config.get("configurable") or {}).items()
        if not k.startswith("__") and k not in VOLATILE
    }
    metadata = {k: v for k, v in (config.get("metadata") or {}).items() if k not in VOLATILE}
    return {"configurable": configurable, "metadata": metadata, "tags": config.get("tags")}


class State(TypedDict):
    text: str


def build(seen: list[Any], run_ids: list[Any]) -> Any:
    model = ScriptedChatModel(responses=["ok"])

    @tool
    def shout(text: str, config: RunnableConfig) -> str:
        """Shout."""
        seen.append(("tool", public(config)))
        return text.upper()

    def node(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(("node", public(config)))
        run = agentrewind.current_run()
        run_ids.append(run and run.run_id)
        lam = RunnableLambda(lambda x, config: seen.append(("lambda", public(config))) or x)
        text = lam.invoke(state["text"])
        reply = model.invoke(text).content
        return {"text": shout.invoke({"text": f"{text} {reply}"})}

    g = StateGraph(State)
    g.add_node("work", node)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile()


def run_once(durable_url: str | None) -> tuple[Any, list[Any], list[Any], list[Any]]:
    seen: list[Any] = []
    run_ids: list[Any] = []
    cb = Seen()
    graph = build(seen, run_ids)
    runnable = graph if durable_url is None else Middleware(durable_url).wrap(graph)
    config = {
        "configurable": {"thread_id": "cfg-1", "user_key": 7},
        "metadata": {"team": "a"},
        "tags": ["mine"],
        "callbacks": [cb],
    }
    out = runnable.invoke({"text": "hi"}, config)
    return out, seen, cb.starts, run_ids


def test_nodes_tools_lambdas_and_callbacks_see_the_unwrapped_config(durable_url: str) -> None:
    out, seen, starts, run_ids = run_once(None)
    wout, wseen, wstarts, wrun_ids = run_once(durable_url)
    assert wout == out == {"text": "HI OK"}
    assert wseen == seen and len(seen) == 3
    assert wstarts == starts and {k for k, _, _ in starts} == {"chain", "chat", "tool"}
    assert run_ids == [None] and wrun_ids == ["cfg-1"]  # the run context carries the id
    for _, cfg in wseen:
        assert "agentrewind_run_id" not in cfg["configurable"] | cfg["metadata"]


def test_a_lambda_gets_the_very_config_it_would_get(durable_url: str) -> None:
    got: list[Any] = []
    lam = RunnableLambda(lambda x, config: got.append(config) or x)
    config: RunnableConfig = {"configurable": {"thread_id": "same"}, "metadata": {"m": 1}}
    lam.invoke(1, config)
    Middleware(durable_url).wrap(lam).invoke(1, config)
    plain, wrapped = got
    assert {k: v for k, v in wrapped.items() if k != "callbacks"} == {
        k: v for k, v in plain.items() if k != "callbacks"
    }
    assert config == {"configurable": {"thread_id": "same"}, "metadata": {"m": 1}}


def test_a_wrapped_runnable_inside_a_wrapped_run_records_into_the_outer_run(
    durable_url: str,
) -> None:
    mw = Middleware(durable_url)
    counter: dict[str, int] = {}
    inner = mw.wrap(ScriptedChatModel(responses=["x"], counter=counter))
    outer = mw.wrap(RunnableLambda(lambda q: inner.invoke(q).content))
    cfg = {"configurable": {"thread_id": "nest"}}
    assert outer.invoke("q", cfg) == outer.invoke("q", cfg) == "x"
    assert counter["calls"] == 1
    assert [s.kind for s in mw.store.load_steps("nest")] == ["llm"]
