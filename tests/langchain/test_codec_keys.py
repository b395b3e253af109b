"""Journal values (allowlisted field dicts) and replay keys (what counts as the same call)."""

from __future__ import annotations

import warnings
from typing import Annotated, Any

import pytest
from langchain_core.documents import Document
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolArg, tool

from agentrewind import DivergenceWarning, SerializationError, Serializer
from agentrewind_langchain import Middleware
from agentrewind_langchain._keys import chat_key, llm_string, tool_key
from agentrewind_langchain.testing import ScriptedChatModel

SER = Serializer()


def roundtrip(value: Any) -> Any:
    return SER.loads(SER.dumps(value))


@pytest.mark.parametrize(
    "value",
    [
        AIMessage(
            content="",
            id="lc_run--1",
            tool_calls=[{"name": "find", "args": {"id": 7}, "id": "call_1", "type": "tool_call"}],
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
            response_metadata={"model": "m"},
        ),
        AIMessageChunk(content=[{"type": "text", "text": "hi"}], id="c1"),
        HumanMessage(content="hello", name="ann"),
        ToolMessage(content="bad", tool_call_id="call_1", status="error", artifact={"n": 1}),
        Document(page_content="text", metadata={"source": "a.md", "page": 2}, id="d1"),
        ChatGeneration(message=AIMessage(content="x"), generation_info={"finish": "stop"}),
    ],
)
def test_allowlisted_objects_round_trip_equal(value: Any) -> None:
    assert roundtrip(value) == value
    assert type(roundtrip(value)) is type(value)


def test_a_message_is_stored_as_its_changed_fields() -> None:
    tree = SER.to_tree(AIMessage(content="hi", id="m1"))
    assert tree == {"__ar__": "langchain", "v": {"lc": "AIMessage", "content": "hi", "id": "m1"}}


def test_records_in_the_dumpd_format_still_load() -> None:
    message = AIMessage(content="old", id="m0", tool_calls=[{"name": "t", "args": {}, "id": "c"}])
    legacy = {"__ar__": "langchain", "v": dumpd(message)}
    assert SER.from_tree(legacy) == message


def test_names_off_the_allowlist_and_bad_fields_are_refused() -> None:
    with pytest.raises(SerializationError, match="allowed"):
        SER.from_tree({"__ar__": "langchain", "v": {"lc": "ChatOpenAI", "base_url": "x"}})
    with pytest.raises(SerializationError, match="AIMessage"):
        SER.from_tree({"__ar__": "langchain", "v": {"lc": "AIMessage", "content": 3.5}})


def test_an_unstorable_field_names_its_path() -> None:
    with pytest.raises(SerializationError, match=r"\$\.artifact"):
        SER.to_tree(ToolMessage(content="x", tool_call_id="c", artifact=object()))


def test_tool_keys_keep_an_argument_named_id_and_drop_injected_ones() -> None:
    @tool
    def fetch(id: int, token: Annotated[str, InjectedToolArg]) -> str:
        """Fetch a record."""
        return f"{id}"

    assert tool_key(fetch, {"id": 1, "token": "a"}) != tool_key(fetch, {"id": 2, "token": "a"})
    assert tool_key(fetch, {"id": 1, "token": "a"}) == tool_key(fetch, {"id": 1, "token": "b"})
    assert tool_key(fetch, {"id": 1, "token": "b"}) == tool_key(fetch, {"id": 1, "token": "c"})


def test_chat_keys_ignore_ids_and_see_content_args_and_params() -> None:
    def ai(call_id: str, msg_id: str, args: dict[str, Any]) -> AIMessage:
        return AIMessage(
            content="", id=msg_id, tool_calls=[{"name": "f", "args": args, "id": call_id}]
        )

    base = chat_key("m", [HumanMessage("q", id="u1"), ai("c1", "a1", {"id": 1})])
    assert base == chat_key("m", [HumanMessage("q", id="u2"), ai("c2", "a2", {"id": 1})])
    assert base != chat_key("m", [HumanMessage("q"), ai("c1", "a1", {"id": 2})])
    assert base != chat_key("m", [HumanMessage("Q"), ai("c1", "a1", {"id": 1})])
    assert base != chat_key("m", [HumanMessage("q"), ai("c1", "a1", {"id": 1})], {"stop": ["x"]})
    assert base != chat_key("n", [HumanMessage("q"), ai("c1", "a1", {"id": 1})])


def test_the_model_part_follows_a_reassigned_field() -> None:
    model = ScriptedChatModel(responses=["a"])
    first = llm_string(model)
    assert llm_string(model) is first  # cached
    model.model = "scripted-2"
    assert llm_string(model) != first


def test_a_reconfigured_model_runs_again_instead_of_replaying(sqlite_url: str) -> None:
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["a"], counter=counter)
    mw = Middleware(sqlite_url)
    chain = mw.wrap(RunnableLambda(lambda q: model.invoke(q).content))
    cfg = {"configurable": {"thread_id": "reconf"}}
    assert chain.invoke("q", cfg) == "a"
    assert chain.invoke("q", cfg) == "a" and counter["calls"] == 1  # replayed
    model.model = "scripted-2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        assert chain.invoke("q", cfg) == "a"
    assert counter["calls"] == 2  # it ran: the old model's answer was not handed back
