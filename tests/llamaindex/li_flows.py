"""Workflows and agents the LlamaIndex tests run, in-process and as crash-test subprocesses.

Run in a subprocess as `li_flows.main([SCENARIO, STORE_URL, RUN_ID, SIDE_FILE, crash?])` (the
module is imported by name in both processes, so journaled event classes resolve the same).
Every real
execution (step, LLM call, tool call) appends a line to SIDE_FILE, so a test can count what
ran across processes; the last stdout line is a JSON summary. With `crash` the process
SIGKILLs itself at the scenario's crash point.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool
from workflows import Context, Workflow, step
from workflows.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)

from agentrewind_llamaindex import Middleware

SIDE: dict[str, Any] = {"file": None, "crash": None}


def note(what: str) -> None:
    """Append one execution to the side file."""
    if SIDE["file"]:
        with open(SIDE["file"], "a") as f:
            f.write(what + "\n")


def snapshot_point(name: str, url: str) -> None:
    """Copy a SQLite store as it is at this instant (what a process dying here leaves behind).

    Synchronous, so nothing else in this process runs in between.
    """
    if SIDE["crash"] == f"snapshot:{name}" and url.startswith("sqlite:///"):
        import sqlite3

        path = url.removeprefix("sqlite:///").split("?", 1)[0]
        src, dst = sqlite3.connect(path), sqlite3.connect(path + ".at-" + name)
        src.backup(dst)
        src.close()
        dst.close()


def crash_point(name: str) -> None:
    if SIDE["crash"] == name:
        os.kill(os.getpid(), signal.SIGKILL)


class CountingLLM(MockLLM):
    """MockLLM that notes each real call (it echoes the prompt, upper-cased)."""

    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        note(f"llm:{messages[-1].content}")
        return ChatResponse(
            message=ChatMessage(role="assistant", content=str(messages[-1].content).upper())
        )


# -- 1. three steps, two LLM calls in step 2 ---------------------------------------------------
class Planned(Event):
    plan: str


class Drafted(Event):
    draft: str


class ThreeSteps(Workflow):
    llm: Any = None

    @step
    async def plan(self, ctx: Context, ev: StartEvent) -> Planned:
        note("step:plan")
        r = await self.llm.achat([ChatMessage(role="user", content=f"plan {ev.topic}")])
        await ctx.store.set("plan", r.message.content)
        return Planned(plan=str(r.message.content))

    @step
    async def draft(self, ctx: Context, ev: Planned) -> Drafted:
        note("step:draft")
        a = await self.llm.achat([ChatMessage(role="user", content=f"outline {ev.plan}")])
        b = await self.llm.achat([ChatMessage(role="user", content=f"write {a.message.content}")])
        crash_point("draft")
        await ctx.store.set("words", len(str(b.message.content).split()))
        return Drafted(draft=str(b.message.content))

    @step
    async def publish(self, ctx: Context, ev: Drafted) -> StopEvent:
        note("step:publish")
        return StopEvent(
            result={
                "draft": ev.draft,
                "plan": await ctx.store.get("plan"),
                "words": await ctx.store.get("words"),
            }
        )


def three_steps() -> ThreeSteps:
    wf = ThreeSteps(timeout=30)
    wf.llm = CountingLLM()
    return wf


# -- 2. a step that raises until it is fixed ---------------------------------------------------
FIX = {"fixed": False}


class Counted(Event):
    n: int


class Flaky(Workflow):
    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Counted:
        note("step:first")
        await ctx.store.set("visits", 1)
        await ctx.store.set("log", ["first"])
        return Counted(n=1)

    @step
    async def second(self, ctx: Context, ev: Counted) -> StopEvent:
        note("step:second")
        visits = await ctx.store.get("visits")
        log = await ctx.store.get("log")
        seen = {"visits": visits, "log": list(log)}
        await ctx.store.set("visits", visits + 1)
        await ctx.store.set("log", [*log, "second"])
        if not FIX["fixed"]:
            raise RuntimeError("second step is broken")
        return StopEvent(result={"seen": seen, "visits": await ctx.store.get("visits")})


# -- 3. parallel workers with a crash ----------------------------------------------------------
class Charge(Event):
    item: int


class Charged(Event):
    item: int


class Parallel(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Charge | None:
        for i in range(3):
            ctx.send_event(Charge(item=i))
        return None

    @step(num_workers=3)
    async def charge(self, ctx: Context, ev: Charge) -> Charged:
        async with ctx.store.edit_state() as state:
            state["charges"] = state.get("charges", 0) + 1
        note(f"charge:{ev.item}")
        if ev.item == 2:
            await asyncio.sleep(0.4)  # the other workers finish and are journaled meanwhile
            crash_point("charge")
        return Charged(item=ev.item)

    @step
    async def total(self, ctx: Context, ev: Charged) -> StopEvent | None:
        done = ctx.collect_events(ev, [Charged] * 3)
        if done is None:
            return None
        return StopEvent(
            result={
                "charges": await ctx.store.get("charges"),
                "items": sorted(e.item for e in done),
            }
        )


# -- 4. FunctionAgent, two tools -----------------------------------------------------------------
def add(a: int, b: int) -> int:
    """Add two numbers."""
    note("tool:add")
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    note("tool:multiply")
    crash_point("multiply")
    return a * b


def script(messages: Any, **kwargs: Any) -> ChatMessage:
    """A function-calling LLM: add(2, 3), then multiply(5, 4), then answer."""
    done = [m for m in messages if m.role == MessageRole.TOOL]
    note(f"llm:{len(done)}")
    if len(done) == 0:
        return ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(tool_call_id="c1", tool_name="add", tool_kwargs={"a": 2, "b": 3})
            ],
        )
    if len(done) == 1:
        return ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(tool_call_id="c2", tool_name="multiply", tool_kwargs={"a": 5, "b": 4})
            ],
        )
    return ChatMessage(role="assistant", content=f"The answer is {done[-1].content}")


def agent() -> FunctionAgent:
    return FunctionAgent(
        tools=[FunctionTool.from_defaults(add), FunctionTool.from_defaults(multiply)],
        llm=MockFunctionCallingLLM(response_generator=script),
        system_prompt="You calculate.",
        timeout=30,
    )


# -- 5. human in the loop ------------------------------------------------------------------------
class Approval(Workflow):
    llm: Any = None

    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> StopEvent:
        note("step:ask")
        draft = await self.llm.achat([ChatMessage(role="user", content=f"email about {ev.topic}")])
        answer = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_event=InputRequiredEvent(prefix=f"send {draft.message.content}?"),
            waiter_id="approve",
        )
        return StopEvent(result=f"{draft.message.content} -> {answer.response}")


def approval() -> Approval:
    wf = Approval(timeout=30)
    wf.llm = CountingLLM()
    return wf


# -- 6. AgentWorkflow: a router that researches and hands off to a writer with a tool -------------
def research(topic: str) -> str:
    """Look a topic up."""
    note("tool:research")
    return f"{topic} rise twice a day"


def rhyme(word: str) -> str:
    """Find a rhyme for a word."""
    note("tool:rhyme")
    crash_point("rhyme")
    return {"tide": "ride"}.get(word, word)


def _called(messages: Any) -> list[str]:
    return [
        b.tool_name
        for m in messages
        if m.role == MessageRole.ASSISTANT
        for b in m.blocks
        if isinstance(b, ToolCallBlock)
    ]


def team_script(messages: Any, **kwargs: Any) -> ChatMessage:
    """Router: research, then hand off. Writer: rhyme, then answer."""
    who = "writer" if "writer" in str(messages[0].content) else "router"
    called = _called(messages)
    note(f"llm:{who}:{len(called)}")

    def use(tool: str, **args: Any) -> ChatMessage:
        block = ToolCallBlock(tool_call_id=f"call-{tool}", tool_name=tool, tool_kwargs=args)
        return ChatMessage(role="assistant", blocks=[block])

    if who == "router":
        if "research" not in called:
            return use("research", topic="tides")
        return use("handoff", to_agent="writer", reason="facts are in")
    if "rhyme" not in called:
        return use("rhyme", word="tide")
    fact = next(str(m.content) for m in messages if m.role == MessageRole.TOOL)
    rhymed = [str(m.content) for m in messages if m.role == MessageRole.TOOL][-1]
    return ChatMessage(role="assistant", content=f"Poem: {fact}, we {rhymed}.")


def team() -> AgentWorkflow:
    llm = MockFunctionCallingLLM(response_generator=team_script)
    router = FunctionAgent(
        name="router",
        description="researches and routes",
        system_prompt="You are the router.",
        llm=llm,
        tools=[FunctionTool.from_defaults(research)],
        can_handoff_to=["writer"],
    )
    writer = FunctionAgent(
        name="writer",
        description="writes poems",
        system_prompt="You are the writer.",
        llm=llm,
        tools=[FunctionTool.from_defaults(rhyme)],
    )
    return AgentWorkflow(agents=[router, writer], root_agent="router", timeout=30)


# -- 7. memory written by a step still in flight while another step's result is journaled -------
class Slow(Event):
    pass


class Fast(Event):
    pass


class Done(Event):
    who: str


class MemoryFlow(Workflow):
    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Slow | Fast | None:
        memory = ChatMemoryBuffer.from_defaults(chat_store_key="notes")
        await memory.aput(ChatMessage(role="user", content=ev.topic))
        await ctx.store.set("memory", memory)
        ctx.send_event(Slow())
        ctx.send_event(Fast())
        return None

    @step
    async def slow(self, ctx: Context, ev: Slow) -> Done:
        note("step:slow")
        memory = await ctx.store.get("memory")
        await memory.aput(ChatMessage(role="assistant", content="slow thought"))
        await asyncio.sleep(0.3)  # meanwhile `fast` finishes and its tick is journaled
        crash_point("slow")
        return Done(who="slow")

    @step
    async def fast(self, ctx: Context, ev: Fast) -> Done:
        note("step:fast")
        await asyncio.sleep(0.05)
        memory = await ctx.store.get("memory")
        await memory.aput(ChatMessage(role="assistant", content="fast thought"))
        return Done(who="fast")

    @step
    async def finish(self, ctx: Context, ev: Done) -> StopEvent | None:
        if ctx.collect_events(ev, [Done, Done]) is None:
            return None
        memory = await ctx.store.get("memory")
        return StopEvent(result=sorted(str(m.content) for m in await memory.aget_all()))


# -- 8. four parallel workers incrementing with edit_state, edits and returns in opposite order --
class Work(Event):
    i: int


class Worked(Event):
    i: int


class Increments(Workflow):
    """Worker `killed` is SIGKILLed once the other three finished (crash point "increment").

    With `killed=0` it edits first, with `killed=3` last; the others return in the reverse of
    the order they edited in, so commit order and edit order disagree.
    """

    killed: int = 0

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Work | None:
        for i in range(4):
            ctx.send_event(Work(i=i))
        return None

    @step(num_workers=4)
    async def work(self, ctx: Context, ev: Work) -> Worked:
        await asyncio.sleep(0.05 * ev.i)  # worker i edits i-th
        async with ctx.store.edit_state() as state:
            state["count"] = state.get("count", 0) + 1
        note(f"edit:{ev.i}")
        if ev.i == self.killed:
            await asyncio.sleep(0.8)  # the other three return and are journaled meanwhile
            crash_point("increment")
        else:
            await asyncio.sleep(0.45 - 0.1 * ev.i)  # returns in reverse edit order
        return Worked(i=ev.i)

    @step
    async def total(self, ctx: Context, ev: Worked) -> StopEvent | None:
        if ctx.collect_events(ev, [Worked] * 4) is None:
            return None
        return StopEvent(result={"count": await ctx.store.get("count")})


def increments(killed: int) -> Increments:
    wf = Increments(timeout=30)
    wf.killed = killed
    return wf


# -- 9. a streaming workflow: progress events from every step, killed in the middle one --------
class Progress(Event):
    msg: str


class Halfway(Event):
    pass


class Finishing(Event):
    pass


class Streaming(Workflow):
    @step
    async def first(self, ctx: Context, ev: StartEvent) -> Halfway:
        note("step:first")
        for i in range(3):
            ctx.write_event_to_stream(Progress(msg=f"first {i}"))
        return Halfway()

    @step
    async def middle(self, ctx: Context, ev: Halfway) -> Finishing:
        note("step:middle")
        ctx.write_event_to_stream(Progress(msg="middle"))
        await asyncio.sleep(0.1)  # the event reaches the caller before the kill
        crash_point("middle")
        return Finishing()

    @step
    async def last(self, ctx: Context, ev: Finishing) -> StopEvent:
        note("step:last")
        ctx.write_event_to_stream(Progress(msg="last"))
        return StopEvent(result="streamed")


# -- 10. a step that raises until it is fixed, across processes -------------------------------
class Checked(Event):
    total: int


class Fragile(Workflow):
    """`check` raises unless FIX["fixed"]; in a subprocess, the scenario `fragile-broken`."""

    @step
    async def add(self, ctx: Context, ev: StartEvent) -> Checked:
        note("step:add")
        async with ctx.store.edit_state() as state:
            state["total"] = state.get("total", 0) + 5
            state["log"] = [*state.get("log", []), "add"]
        return Checked(total=5)

    @step
    async def check(self, ctx: Context, ev: Checked) -> StopEvent:
        note("step:check")
        async with ctx.store.edit_state() as state:
            state["total"] = state["total"] * 2
            state["log"] = [*state["log"], "check"]
        if not FIX["fixed"]:
            raise RuntimeError("check is broken")
        return StopEvent(
            result={"total": await ctx.store.get("total"), "log": await ctx.store.get("log")}
        )


# -- the subprocess driver ------------------------------------------------------------------------
async def _memory_dump(handler: Any) -> list[list[str]]:
    memory = await handler.ctx.store.get("memory")
    return [
        [
            m.role.value,
            str(m.content or ""),
            ",".join(b.tool_name for b in m.blocks if isinstance(b, ToolCallBlock)),
        ]
        for m in await memory.aget_all()
    ]


async def drive(scenario: str, url: str, run_id: str) -> dict[str, Any]:
    mw = Middleware(url)
    try:
        if scenario == "three":
            return {"result": await mw.wrap(three_steps()).run(run_id=run_id, topic="pirates")}
        if scenario in ("wf-three", "wf-recover"):  # the workflow registered as a workflow
            wf = mw.workflow("three-steps", mw.wrap(three_steps()))
            if scenario == "wf-three":
                return {"result": await wf.arun(topic="pirates", run_id=run_id)}
            report = await mw.arecover()
            return {"outcomes": [[o.run_id, o.workflow, o.outcome] for o in report.outcomes],
                    "result": report.outcomes[0].result if report.outcomes else None}  # fmt: skip
        if scenario == "parallel":
            return {"result": await mw.wrap(Parallel(timeout=30)).run(run_id=run_id)}
        if scenario == "agent":
            handler = mw.wrap(agent()).run(user_msg="What is (2+3)*4?", run_id=run_id)
            result = await handler
            return {"result": str(result), "memory": await _memory_dump(handler)}
        if scenario.startswith("increments-"):
            wf = increments(int(scenario.rsplit("-", 1)[1]))
            return {"result": await mw.wrap(wf).run(run_id=run_id)}
        if scenario == "streaming":
            handler = mw.wrap(Streaming(timeout=30)).run(run_id=run_id)
            seen = [ev.msg async for ev in handler.stream_events() if isinstance(ev, Progress)]
            return {"result": await handler, "stream": seen}
        if scenario.startswith("fragile"):
            FIX["fixed"] = scenario == "fragile"
            try:
                return {"result": await mw.wrap(Fragile(timeout=30)).run(run_id=run_id)}
            except RuntimeError as exc:
                return {"error": str(exc)}
        if scenario == "memory":
            return {"result": await mw.wrap(MemoryFlow(timeout=30)).run(run_id=run_id, topic="hi")}
        if scenario == "team":
            handler = mw.wrap(team()).run(user_msg="a poem about tides", run_id=run_id)
            result = await handler
            return {
                "result": str(result),
                "agent": result.current_agent_name,
                "memory": await _memory_dump(handler),
            }
        if scenario == "hitl-leave":
            # the caller takes the question and goes away (the process ends normally)
            handler = mw.wrap(approval()).run(run_id=run_id, topic="Q3 budget")
            async for ev in handler.stream_events():
                if isinstance(ev, InputRequiredEvent):
                    return {"prompts": [ev.prefix]}
        if scenario in ("hitl-ask", "hitl-answer"):
            handler = mw.wrap(approval()).run(run_id=run_id, topic="Q3 budget")
            prompts = []
            async for ev in handler.stream_events():
                if isinstance(ev, InputRequiredEvent):
                    prompts.append(ev.prefix)
                    snapshot_point("prompted", url)
                    crash_point("prompted")  # the process dies as the question arrives
                    if scenario == "hitl-ask":
                        await handler.cancel_run()  # the process goes away while the run waits
                        break
                    await handler.send_event(HumanResponseEvent(response="yes"))
            if scenario == "hitl-ask":
                return {"prompts": prompts}
            return {"result": await handler, "prompts": prompts}
        raise SystemExit(f"unknown scenario {scenario}")
    finally:
        mw.close()


def run_here(scenario: str, url: str, run_id: str, side: str, crash: str | None = None) -> Any:
    """Drive a scenario in this process, noting executions in `side`."""
    SIDE["file"], SIDE["crash"] = side, crash
    try:
        return json.loads(json.dumps(asyncio.run(drive(scenario, url, run_id))))
    finally:
        SIDE["file"] = SIDE["crash"] = None


def main(argv: list[str]) -> None:
    scenario, url, run_id, side = argv[:4]
    print(json.dumps(run_here(scenario, url, run_id, side, argv[4] if len(argv) > 4 else None)))


if __name__ == "__main__":
    main(sys.argv[1:])
