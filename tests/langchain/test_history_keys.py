"""Chat keys cost O(new messages): each message's digest is computed once per message object,
and what counts as the same call is unchanged (issue 14)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import agentrewind_langchain._keys as keys


def history(n: int) -> list:
    return [
        HumanMessage(f"question {i}", id=f"h{i}")
        if i % 2 == 0
        else AIMessage(f"answer {i}", id=f"a{i}", tool_calls=[])
        for i in range(n)
    ]


@pytest.fixture
def key_views(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every message whose key view is computed (the O(message size) work)."""
    seen: list[object] = []
    real = keys.message_key

    def counting(message):  # type: ignore[no-untyped-def]
        seen.append(message)
        return real(message)

    monkeypatch.setattr(keys, "message_key", counting)
    return seen


def test_a_growing_history_computes_each_message_once(key_views: list[object]) -> None:
    messages = history(200)
    first = keys.chat_key("model", messages)
    assert len(key_views) == 200
    messages.append(HumanMessage("one more"))
    second = keys.chat_key("model", messages)
    assert len(key_views) == 201  # only the new message
    assert second != first
    assert keys.chat_key("model", messages[:200]) == first  # a replay of the first call
    assert len(key_views) == 201


def test_equal_messages_in_new_objects_give_the_same_key() -> None:
    # a resumed process rebuilds its messages: new objects, new random ids, same content
    a = history(50)
    b = [m.model_copy(update={"id": f"other-{i}"}) for i, m in enumerate(history(50))]
    assert keys.chat_key("model", a) == keys.chat_key("model", b)


def test_a_reassigned_field_changes_the_key(key_views: list[object]) -> None:
    messages = history(10)
    before = keys.chat_key("model", messages)
    messages[3].content = "edited answer"
    after = keys.chat_key("model", messages)
    assert after != before
    assert key_views.count(messages[3]) == 2  # recomputed, the others were not
    assert len(key_views) == 11


def test_content_and_order_and_model_still_decide() -> None:
    messages = history(6)
    base = keys.chat_key("model", messages)
    assert keys.chat_key("other-model", messages) != base
    assert keys.chat_key("model", messages, {"stop": ["x"]}) != base
    assert keys.chat_key("model", list(reversed(messages))) != base
    assert keys.chat_key("model", [*messages[:5], HumanMessage("question 4!")]) != base
    tool = ToolMessage("42", tool_call_id="call-1")
    again = ToolMessage("42", tool_call_id="call-2")  # tool-call ids are random: ignored
    assert keys.chat_key("model", [*messages, tool]) == keys.chat_key("model", [*messages, again])
