"""The LlamaIndex part of `agentrewind demo`: a workflow whose second step fails, resumed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.llms import MockLLM
from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent

from agentrewind import Store

__all__ = ["demo"]

_state: dict[str, Any] = {"fail": True, "log": []}


class _EchoLLM(MockLLM):
    """An offline model: answers with the prompt in capitals."""

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        _state["log"].append(f"LLM call: {messages[-1].content!r}")
        await asyncio.sleep(0.05)  # stands in for a slow model
        return ChatResponse(
            message=ChatMessage(role="assistant", content=str(messages[-1].content).upper())
        )


class Outlined(Event):
    """The outline from the first step."""

    outline: str


class DemoResearch(Workflow):
    """Outline a topic, then write it up: two steps, one LLM call each."""

    llm: Any = None

    @step
    async def outline(self, ctx: Context, ev: StartEvent) -> Outlined:
        _state["log"].append("step outline ran")
        r = await self.llm.achat([ChatMessage(role="user", content=f"outline {ev.topic}")])
        await ctx.store.set("outline", str(r.message.content))
        return Outlined(outline=str(r.message.content))

    @step
    async def write(self, ctx: Context, ev: Outlined) -> StopEvent:
        _state["log"].append("step write ran")
        r = await self.llm.achat([ChatMessage(role="user", content=f"write {ev.outline}")])
        if _state["fail"]:
            raise ConnectionError("publishing API timed out (simulated)")
        return StopEvent(result=str(r.message.content))


def demo(store: Store, out: Callable[[str], None] = print) -> None:
    """Run the LlamaIndex demo against `store`, printing what each attempt did."""
    from ._adapter import Middleware

    async def main() -> None:
        mw = Middleware(store)
        run_id = f"li-demo-{int(time.time() * 1000)}"
        wf = DemoResearch(timeout=30)
        wf.llm = _EchoLLM(max_tokens=None)
        wrapped = mw.wrap(wf)
        out(f"LlamaIndex workflow (run id {run_id})")
        out("1) first attempt: the `write` step fails after its LLM call")
        _state.update(fail=True, log=[])
        try:
            await wrapped.run(run_id=run_id, topic="tide pools")
        except ConnectionError as exc:
            for line in _state["log"]:
                out(f"    {line}")
            out(f"    failed: {exc}")
        out("2) wf.run(run_id=...) again: `outline` is not re-run, the LLM call replays")
        _state.update(fail=False, log=[])
        result = await wrapped.run(run_id=run_id)
        for line in _state["log"] or ["(nothing executed again but the failed step)"]:
            out(f"    {line}")
        m = mw.metrics(run_id)
        out(f"    result: {result}")
        out(f"    metrics: {m.replay_hits} call(s) replayed, {m.seconds_saved * 1000:.0f} ms saved")

    asyncio.run(main())
