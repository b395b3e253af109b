"""Review: a tool argument named `id` is input; a changed id never replays another call's result."""

from __future__ import annotations

import pytest
from llama_index.core.tools import FunctionTool

import agentrewind
from agentrewind_llamaindex import install_call_hooks
from agentrewind_llamaindex._keys import llm_key


def _get_order(id: str) -> str:
    """Get an order by id."""
    return f"order {id}"


async def test_a_changed_id_argument_runs_instead_of_replaying():
    tool = FunctionTool.from_defaults(fn=_get_order)
    install_call_hooks()
    mw = agentrewind.Middleware("memory://review-tool-ids")
    async with mw.run("r"):
        assert (await tool.acall(id="A")).content == "order A"
    with pytest.warns(agentrewind.DivergenceWarning):
        async with mw.run("r") as run:
            assert (await tool.acall(id="B")).content == "order B"
    assert [e.outcome for e in run.events] == ["executed"]
    with mw.run("r2"):
        assert [tool.call(id=i).content for i in "AB"] == ["order A", "order B"]
    with mw.run("r2") as again:
        assert [tool.call(id=i).content for i in "AB"] == ["order A", "order B"]
    assert [e.outcome for e in again.events] == ["replayed", "replayed"]


def test_tool_schemas_in_llm_keys_keep_a_parameter_named_id():
    def by_text_id(id: str) -> str:
        """Look up."""
        return id

    def by_int_id(id: int) -> str:
        """Look up."""
        return str(id)

    class _LLM:
        metadata = None

    def key(fn: object) -> object:
        tool = FunctionTool.from_defaults(fn, name="t", description="Look up.")
        return llm_key(_LLM(), "chat_with_tools", ([tool],), {})

    # the schemas differ only inside the `id` property: the model sees different tools
    assert key(by_text_id) != key(by_int_id)


def test_llm_keys_keep_id_arguments_of_tool_calls_in_history() -> None:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.llms import MockLLM

    from agentrewind_llamaindex._keys import llm_key

    def history(order_id: str, call_id: str, message_id: str) -> list[ChatMessage]:
        call = {"id": call_id, "tool_name": "get_order", "tool_kwargs": {"id": order_id}}
        return [
            ChatMessage(role="user", content="status?", additional_kwargs={"id": message_id}),
            ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]}),
        ]

    llm = MockLLM()
    a = llm_key(llm, "achat", (history("A", "call_1", "m1"),), {})
    b = llm_key(llm, "achat", (history("B", "call_1", "m1"),), {})
    a_rerun = llm_key(llm, "achat", (history("A", "call_9", "m7"),), {})
    assert a != b  # a different order id in the history is a different call
    assert a == a_rerun  # random tool-call and message ids do not change the key
