"""The wrapper's contract: entry point, run ids, schemas, callbacks, tools, serialization."""

from __future__ import annotations

import io
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

import agentrewind
from agentrewind import SerializationError, Serializer, connect
from agentrewind_langchain import REPLAYED_TAG, Middleware, RewindRunnable
from agentrewind_langchain.testing import ScriptedChatModel, tool_call

PROMPT = ChatPromptTemplate.from_messages([("user", "{q}")])


def test_core_middleware_wraps_runnables_through_the_entry_point(sqlite_url: str) -> None:
    mw = agentrewind.Middleware(sqlite_url)
    counter: dict[str, int] = {}
    wrapped = mw.wrap(PROMPT | ScriptedChatModel(responses=["hi"], counter=counter))
    assert isinstance(wrapped, RewindRunnable)
    cfg = {"configurable": {"agentrewind_run_id": "ep"}}
    assert wrapped.invoke({"q": "x"}, cfg).content == "hi"
    assert wrapped.invoke({"q": "x"}, cfg).content == "hi"
    assert counter["calls"] == 1
    with pytest.raises(agentrewind.AdapterNotFoundError):
        mw.wrap(object())


def test_run_id_precedence_and_read_back(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    seen: list[Any] = []

    def body(x: int) -> int:
        run = agentrewind.current_run()
        seen.append(run and run.run_id)
        return x

    wrapped = mw.wrap(RunnableLambda(body))
    wrapped.invoke(1, {"configurable": {"thread_id": "t", "agentrewind_run_id": "explicit"}})
    assert wrapped.last_run_id == "explicit"
    wrapped.invoke(1, {"configurable": {"thread_id": "t"}})
    assert wrapped.last_run_id == "t"
    wrapped.invoke(1)
    generated = wrapped.last_run_id
    assert generated and generated not in ("t", "explicit")
    assert seen == ["explicit", "t", generated]  # the run context carries it, not the config
    assert mw.store.get_run(generated) is not None


def test_schemas_and_with_config_are_the_wrapped_ones(sqlite_url: str) -> None:
    inner = PROMPT | ScriptedChatModel(responses=["ok"])
    wrapped = Middleware(sqlite_url).wrap(inner)
    assert (
        wrapped.get_input_schema().model_json_schema()
        == inner.get_input_schema().model_json_schema()
    )
    assert (
        wrapped.get_output_schema().model_json_schema()
        == inner.get_output_schema().model_json_schema()
    )
    assert wrapped.InputType == inner.InputType and wrapped.OutputType == inner.OutputType
    assert wrapped.get_name() == inner.get_name()
    bound = wrapped.with_config(configurable={"thread_id": "wc"})
    assert bound.invoke({"q": "a"}).content == "ok"
    assert wrapped.last_run_id == "wc"
    assert wrapped.first is inner.first  # other attributes are forwarded


def test_patches_are_inert_outside_a_wrapped_run(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["x"], counter=counter)
    mw.wrap(model)  # installs the patches
    model.invoke("a")
    list(model.stream("a"))
    assert counter["calls"] == 2
    assert mw.store.list_runs(limit=10) == []


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, list[str]]] = []

    def on_llm_end(
        self, response: Any, *, run_id: UUID, tags: list[str] | None = None, **kw: Any
    ) -> None:
        self.events.append(("llm_end", list(tags or [])))

    def on_tool_end(
        self, output: Any, *, run_id: UUID, tags: list[str] | None = None, **kw: Any
    ) -> None:
        self.events.append(("tool_end", list(tags or [])))


def test_replayed_calls_fire_callbacks_tagged_replayed(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}

    @tool
    def double(n: int) -> int:
        """Double n."""
        return 2 * n

    model = ScriptedChatModel(responses=["ok"], counter=counter)
    lam = RunnableLambda(lambda q: (model.invoke(q).content, double.invoke({"n": 2})))
    live, replay = Recorder(), Recorder()
    wrapped = mw.wrap(lam)
    assert wrapped.invoke("q", {"configurable": {"thread_id": "cb"}, "callbacks": [live]}) == (
        "ok",
        4,
    )
    assert wrapped.invoke("q", {"configurable": {"thread_id": "cb"}, "callbacks": [replay]}) == (
        "ok",
        4,
    )
    assert counter["calls"] == 1
    assert [e for e, _ in live.events] == [e for e, _ in replay.events] == ["llm_end", "tool_end"]
    assert all(REPLAYED_TAG not in tags for _, tags in live.events)
    assert all(REPLAYED_TAG in tags for _, tags in replay.events)


def test_tools_are_marked_started_and_get_an_idempotency_key(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    keys: list[str] = []

    @tool
    def charge(amount: int) -> str:
        """Charge a card."""
        keys.append(agentrewind.idempotency_key())
        raise ConnectionError("gateway down")

    wrapped = mw.wrap(RunnableLambda(lambda n: charge.invoke({"amount": n})))
    for _ in range(2):
        with pytest.raises(ConnectionError):
            wrapped.invoke(5, {"configurable": {"thread_id": "pay"}})
    assert len(keys) == 2 and keys[0] == keys[1]  # stable across retries and resumes
    first, step = mw.store.load_steps("pay")  # both failed attempts are kept
    assert (step.kind, step.name, step.status) == ("tool", "charge", "failed")
    assert first.status == "failed" and first.meta["replaced_by"] == step.step_id


def test_tool_started_but_never_finished_can_be_skipped(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url, on_incomplete="skip")
    store = mw.store
    ran: list[int] = []

    @tool
    def send(n: int) -> str:
        """Send."""
        ran.append(n)
        return "sent"

    wrapped = mw.wrap(RunnableLambda(lambda n: send.invoke({"n": n})))
    assert wrapped.invoke(1, {"configurable": {"thread_id": "sk"}}) == "sent"
    (done,) = store.load_steps("sk")
    # make it look like a crash between 'started' and 'completed'
    store.put_step(agentrewind.StepRecord(**{**_fields(done), "status": "started", "output": None}))
    out = wrapped.invoke(1, {"configurable": {"thread_id": "sk"}})
    assert ran == [1] and "skipped" in out
    assert mw.metrics("sk").replay_hits == 0


def _fields(record: Any) -> dict[str, Any]:
    return {f: getattr(record, f) for f in record.__slots__}


def test_tool_side_effects_opt_out_writes_no_started_record(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)

    @tool
    def pure(n: int) -> int:
        """Pure."""
        raise ValueError("bad n")

    pure.metadata = {"agentrewind_side_effects": False}

    wrapped = mw.wrap(RunnableLambda(lambda n: pure.invoke({"n": n})))
    with pytest.raises(ValueError):
        wrapped.invoke(1, {"configurable": {"thread_id": "pure"}})
    assert mw.store.load_steps("pure") == []  # nothing started, failures not journaled


def test_tool_call_ids_and_injected_args_are_not_in_the_key(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    runs: list[str] = []

    @tool
    def find(city: str) -> str:
        """Find."""
        runs.append(city)
        return f"found {city}"

    def body(call_id: str) -> Any:
        return find.invoke(
            {"name": "find", "args": {"city": "Oslo"}, "id": call_id, "type": "tool_call"}
        )

    wrapped = mw.wrap(RunnableLambda(body))
    first = wrapped.invoke("call_1", {"configurable": {"thread_id": "ids"}})
    second = wrapped.invoke("call_2", {"configurable": {"thread_id": "ids"}})
    assert runs == ["Oslo"]
    assert isinstance(second, ToolMessage) and second.tool_call_id == "call_2"
    assert second.content == first.content == "found Oslo"


def test_journal_values_are_langchain_json_never_pickle(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    mw.wrap(ScriptedChatModel(responses=[tool_call("x", {"a": 1})])).invoke(
        "hi", {"configurable": {"thread_id": "js"}}
    )
    (step,) = mw.store.load_steps("js")
    text = str(step.output)
    assert "'__ar__': 'langchain'" in text and "AIMessage" in text and "pickle" not in text
    ser = Serializer()
    restored = ser.from_tree(step.output)["generations"][0]["message"]
    assert isinstance(restored, AIMessage) and restored.tool_calls[0]["args"] == {"a": 1}
    bad = {
        "__ar__": "langchain",
        "v": {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain", "chat_models", "openai", "ChatOpenAI"],
            "kwargs": {},
        },
    }
    with pytest.raises(SerializationError):
        ser.from_tree(bad)  # model manifests are not on the allowlist


def test_demo_is_registered_and_tells_the_story(tmp_path: Any) -> None:
    from agentrewind.plugins import demos
    from agentrewind_langchain._demo import demo

    assert demo in demos()
    out = io.StringIO()
    demo(connect(f"sqlite:///{tmp_path / 'demo.db'}"), lambda s: out.write(s + "\n"))
    text = out.getvalue()
    assert "failed: mail API timed out" in text
    assert "model called 1x for real" in text
    assert "3 calls replayed, 840 tokens" in text
