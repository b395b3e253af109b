"""LLM and tool calls inside steps: recorded once, replayed on resume, `ctx` kept out of keys."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.llms.mock import MockFunctionCallingLLM, MockLLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from workflows import Context

import agentrewind
from agentrewind_llamaindex import Middleware

CALLS: list[str] = []


def _script(messages, **kwargs):
    CALLS.append(str(messages[-1].content))
    return ChatMessage(role="assistant", content=f"re: {messages[-1].content}")


def _msgs(text):
    return [ChatMessage(role="user", content=text)]


def _llm():
    return MockFunctionCallingLLM(response_generator=_script)


async def _every_llm_method(llm, tool):
    out = [llm.chat(_msgs("chat")).message.content]
    out.append((await llm.achat(_msgs("achat"))).message.content)
    out.append([c.delta for c in llm.stream_chat(_msgs("stream"))])
    out.append([c.delta async for c in await llm.astream_chat(_msgs("astream"))])
    out.append(llm.chat_with_tools([tool], user_msg="cwt").message.content)
    out.append((await llm.achat_with_tools([tool], user_msg="acwt")).message.content)
    out.append([c.delta for c in llm.stream_chat_with_tools([tool], user_msg="scwt")])
    gen = await llm.astream_chat_with_tools([tool], user_msg="ascwt")
    out.append([c.delta async for c in gen])
    return out


def _double(x: int) -> int:
    CALLS.append(f"double({x})")
    return 2 * x


async def test_every_llm_method_recorded_once_and_replayed():
    mw = Middleware("memory://calls-llm")
    tool = FunctionTool.from_defaults(_double)
    from agentrewind_llamaindex import install_call_hooks

    install_call_hooks()
    CALLS.clear()
    async with mw.run("llm-1") as run:
        first = await _every_llm_method(_llm(), tool)
        kinds = [e.kind for e in run.events]
    assert len(CALLS) == 8
    # *_with_tools funnels into chat/achat: the nested call is recorded once
    assert kinds == ["llm"] * 8
    assert {e.outcome for e in run.events} == {"executed"}
    CALLS.clear()
    async with mw.run("llm-1") as run:
        again = await _every_llm_method(_llm(), tool)
    assert CALLS == []
    assert again == first
    assert [e.outcome for e in run.events] == ["replayed"] * 8
    assert mw.metrics("llm-1").replay_hits == 8


async def test_tool_calls_replay_and_keep_ctx_out_of_keys():
    mw = Middleware("memory://calls-tool")
    seen_ctx = []

    async def lookup(ctx: Context, city: str) -> str:
        seen_ctx.append(ctx)
        CALLS.append(f"lookup({city})")
        return f"sunny in {city}"

    tool = FunctionTool.from_defaults(lookup)
    sync_tool = FunctionTool.from_defaults(_double)
    from agentrewind_llamaindex import install_call_hooks

    install_call_hooks()
    CALLS.clear()
    async with mw.run("tool-1"):
        out1 = await tool.acall(ctx=object.__new__(Context), city="Oslo")
        out2 = sync_tool.call(x=21)
    assert CALLS == ["lookup(Oslo)", "double(21)"]
    CALLS.clear()
    async with mw.run("tool-1") as run:
        # a different Context object: the key does not change, the call replays
        again1 = await tool.acall(ctx=object.__new__(Context), city="Oslo")
        again2 = sync_tool.call(x=21)
        changed = sync_tool.call(x=22)
    assert CALLS == ["double(22)"]
    assert again1.content == out1.content == "sunny in Oslo"
    assert again2.raw_output == out2.raw_output == 42
    assert changed.raw_output == 44
    assert [e.outcome for e in run.events] == ["replayed", "replayed", "executed"]
    stored = [s for s in mw.store.load_steps("tool-1") if s.kind == "tool"]
    assert all("Context" not in repr(s.output) for s in stored)


async def test_calls_outside_a_run_are_not_recorded():
    mw = Middleware("memory://calls-none")
    CALLS.clear()
    r = await _llm().achat(_msgs("plain"))
    assert r.message.content == "re: plain" and CALLS == ["plain"]
    assert agentrewind.current_run() is None
    assert mw.store.list_runs() == []


async def _every_completion_method(llm):
    out = [llm.complete("complete").text, (await llm.acomplete("acomplete")).text]
    out.append([c.delta for c in llm.stream_complete("stream")])
    out.append([c.delta async for c in await llm.astream_complete("astream")])
    out.append(llm.predict(PromptTemplate("predict {x}"), x="it"))
    return out


async def test_completions_are_recorded_once_and_replayed():
    # What LlamaIndex's own tutorials call: complete / acomplete / stream_complete /
    # astream_complete, and predict (which goes through them).
    mw = Middleware("memory://calls-complete")
    from agentrewind_llamaindex import install_call_hooks

    install_call_hooks()
    paid: list[str] = []

    class Counting(MockLLM):
        def complete(self, prompt, formatted=False, **kw):
            paid.append(prompt)
            return super().complete(prompt, formatted=formatted, **kw)

        def stream_complete(self, prompt, formatted=False, **kw):
            paid.append(prompt)
            return super().stream_complete(prompt, formatted=formatted, **kw)

    install_call_hooks()
    async with mw.run("complete-1") as run:
        first = await _every_completion_method(Counting(max_tokens=3))
        assert [e.kind for e in run.events] == ["llm"] * 5
    assert len(paid) == 5
    async with mw.run("complete-1") as run:
        again = await _every_completion_method(Counting(max_tokens=3))
        assert [e.outcome for e in run.events] == ["replayed"] * 5
    assert again == first and len(paid) == 5  # nothing paid twice
    assert first[2] and first[3]  # the streams replayed chunk by chunk


def test_chat_response_round_trips_through_serde():
    ser = agentrewind.Serializer()
    resp = ChatResponse(
        message=ChatMessage(role="assistant", content="hi"), delta="hi", raw=object()
    )
    back = ser.loads(ser.dumps(resp))
    assert isinstance(back, ChatResponse)
    assert back.message.content == "hi" and back.raw is None
