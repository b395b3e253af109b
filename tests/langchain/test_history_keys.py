"""Chat keys cost O(new messages): each message's digest is computed once per message object,
and what counts as the same call is unchanged (issue 14)."""

from __future__ import annotations

import hashlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

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


# -- the prompt cache (a long prompt's messages checked in one pass) gives the keys a fresh
# computation gives: every case below is checked against `fresh_key`, which caches nothing.

MESSAGE_KEY = keys.message_key  # not the counting one of `key_views`


def fresh_key(llm: str, messages: list, params: object = None, extra: object = None) -> str:
    """The key computed from scratch: each message's key view digested, no cache at all."""
    digest = hashlib.blake2b(keys.canonical([llm, params, extra]).encode(), digest_size=16)
    for message in messages:
        view = keys.canonical(MESSAGE_KEY(message)).encode()
        digest.update(hashlib.blake2b(view, digest_size=16).digest())
    return digest.hexdigest()


def warm(messages: list) -> str:
    """The key of `messages`, asked twice so its prompt is kept with its field copies."""
    keys.chat_key("model", messages)
    key = keys.chat_key("model", messages)
    assert len(keys._digests._prompts[id(messages[0])][0]) == len(messages)
    return key


def test_keys_are_those_of_the_previous_version() -> None:
    # keys recorded by the previous version must still replay: hex digests it gave (main at
    # b627490) for the same prompts
    def prompt() -> list:
        return [
            SystemMessage("be brief"),
            HumanMessage("what is 6*7?", id="h1", name="ann"),
            AIMessage(
                "",
                id="a1",
                tool_calls=[{"name": "mul", "args": {"a": 6, "b": 7}, "id": "c1"}],
                additional_kwargs={"x": {"id": 3, "y": [1.5, None]}},
            ),
            ToolMessage("42", tool_call_id="c1"),
            AIMessage([{"type": "text", "text": "42", "id": "b1"}], id="a2"),
        ]

    golden = "1ae5ce6c67ad232185923cf18e0f10d5"
    assert keys.chat_key("model-x", prompt(), {"stop": ["\n"]}, [["mul"], None, None]) == golden
    assert keys.chat_key("model-x", prompt()[:1]) == "a67b838236e2e16bafb8e236ff627ab1"
    assert keys.chat_key("model-x", []) == "bc0708791d575dcb218415139e2b7c11"
    long = prompt() * 10  # the same objects again: the prompt cache's path
    assert len(long) >= keys._PROMPT_MIN
    expected = fresh_key("model-x", long)
    assert [keys.chat_key("model-x", long) for _ in range(3)] == [expected] * 3


def test_a_reassigned_field_early_in_a_long_history_changes_the_key(
    key_views: list[object],
) -> None:
    messages = history(200)
    before = warm(messages)
    messages[3].content = "edited answer"
    after = keys.chat_key("model", messages)
    assert after != before
    assert after == fresh_key("model", messages)
    assert key_views.count(messages[3]) == 2  # recomputed, the others were not
    assert len(key_views) == 201
    messages[3].content = "answer 3"  # back as it was: the first key again
    assert keys.chat_key("model", messages) == before
    messages[150].additional_kwargs = {"k": 1}  # another field, later, then a longer prompt
    longer = [*messages, HumanMessage("next")]
    assert keys.chat_key("model", longer) == fresh_key("model", longer)
    assert keys.chat_key("model", longer) != fresh_key("model", [*history(200), longer[-1]])


def test_a_shorter_replay_of_a_cached_prompt_sees_a_reassigned_field() -> None:
    messages = history(200)
    warm(messages)
    messages[10].content = "edited"
    assert keys.chat_key("model", messages[:100]) == fresh_key("model", messages[:100])
    assert keys.chat_key("model", messages) == fresh_key("model", messages)


def test_fields_written_past_setattr_are_seen_as_today() -> None:
    # the field dict is what is compared, however it was changed
    messages = history(60)
    before = warm(messages)
    messages[5].__dict__["content"] = "written into the dict"
    assert keys.chat_key("model", messages) == fresh_key("model", messages) != before
    object.__setattr__(messages[7], "name", "bob")
    assert keys.chat_key("model", messages) == fresh_key("model", messages)
    replaced = dict(messages[9].__dict__, content="a new dict")
    object.__setattr__(messages[9], "__dict__", replaced)
    assert keys.chat_key("model", messages) == fresh_key("model", messages)


def test_a_value_equal_reassignment_keeps_the_key() -> None:
    messages = history(60)
    before = warm(messages)
    messages[4].content = "".join(["question ", "4"])  # a new, equal string
    assert keys.chat_key("model", messages) == before


@pytest.mark.parametrize(
    "change",
    ["removed", "inserted", "swapped", "replaced", "moved last", "doubled", "shorter"],
)
def test_a_changed_message_list_changes_the_key(change: str) -> None:
    messages = history(200)
    before = warm(messages)
    new = HumanMessage("a new question")
    changed = {
        "removed": messages[:50] + messages[51:],
        "inserted": [*messages[:50], new, *messages[50:]],
        "swapped": [*messages[:50], messages[51], messages[50], *messages[52:]],
        "replaced": [*messages[:50], new, *messages[51:]],
        "moved last": [*messages[1:], messages[0]],
        "doubled": [*messages, *messages],
        "shorter": messages[:199],
    }[change]
    key = keys.chat_key("model", changed)
    assert key != before
    assert key == fresh_key("model", changed)
    assert keys.chat_key("model", messages) == before  # the cached prompt is still right


def test_keys_match_a_fresh_computation_through_an_agents_calls() -> None:
    # a growing history, replays of its earlier prompts, a sliding window, a system message in
    # front, edits between calls, more prompts than the cache keeps, a cleared message cache
    system = SystemMessage("you are terse")
    grown = history(30)
    seen: list[list] = []
    for turn in range(60):
        grown += [AIMessage(f"call {turn}"), ToolMessage(f"{turn}", tool_call_id="t")]
        prompts = [[system, *grown], grown, grown[-keys._PROMPT_MIN - 5 :], grown[: 20 + turn]]
        if turn % 7 == 3:
            grown[turn].content = f"edited on turn {turn}"
        if turn % 11 == 5:
            keys._digests._entries.clear()
        if turn % 13 == 0:
            seen.append(history(20 + turn))  # other conversations in between
        for prompt in [*prompts, *seen]:
            assert keys.chat_key("model", prompt) == fresh_key("model", prompt)
    assert len(keys._digests._prompts) <= keys._PROMPT_CACHE_LIMIT


def test_another_object_with_equal_fields_is_digested_anew() -> None:
    # 1 == 1.0, so equal field dicts can still give different key views: a message is only
    # taken for the cached one when it is the same object
    messages = history(60)
    messages[5] = HumanMessage("n", additional_kwargs={"n": 1})
    before = warm(messages)
    other = [*messages]
    other[5] = HumanMessage("n", additional_kwargs={"n": 1.0})
    assert other[5].__dict__ == messages[5].__dict__
    assert keys.chat_key("model", other) == fresh_key("model", other) != before


class _Interleaved(dict):  # type: ignore[type-arg]
    """The prompt cache, with another thread's eviction between `iter()` and `next()`."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        keys_now = iter(list(super().__iter__()))
        if self:
            del self[next(iter(list(super().__iter__())))]  # the other thread was first
        return keys_now


def test_an_eviction_raced_by_another_thread_is_no_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # batch calls key their prompts on several threads: the least recently used prompt may be
    # gone (evicted by another thread) by the time this one evicts it
    monkeypatch.setattr(keys, "_PROMPT_CACHE_LIMIT", 2)
    monkeypatch.setattr(keys._digests, "_prompts", _Interleaved())
    prompts = [history(20 + i) for i in range(6)]
    for prompt in prompts * 2:
        assert keys.chat_key("model", prompt) == fresh_key("model", prompt)
