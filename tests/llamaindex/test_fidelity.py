"""A wrapped workflow behaves like the unwrapped one (issue 12, items 1-6), on SQLite and Redis.

Each test runs the same code on the plain workflow and on the wrapped one and expects the same
outcome, then checks what the journal made of it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from workflows import Context, Workflow, step
from workflows.context.serializers import PickleSerializer
from workflows.events import (
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
)
from workflows.plugins.basic import BasicRuntime

from agentrewind import SerializationError
from agentrewind_llamaindex import Middleware


class Counter(Workflow):
    @step
    async def count(self, ctx: Context, ev: StartEvent) -> StopEvent:
        n = await ctx.store.get("n", default=0)
        await ctx.store.set("n", n + 1)
        return StopEvent(result=n + 1)


class Ask(Workflow):
    @step
    async def ask(self, ctx: Context, ev: StartEvent) -> InputRequiredEvent:
        await ctx.store.set("asked", True)
        return InputRequiredEvent(prefix="name?")

    @step
    async def answer(self, ctx: Context, ev: HumanResponseEvent) -> StopEvent:
        return StopEvent(result=f"hello {ev.response}, asked={await ctx.store.get('asked')}")


def helper() -> int:
    return 41


class Holder(Workflow):
    """Keeps a function in ctx.store (the framework's own pickle test does)."""

    @step
    async def hold(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("fn", helper)
        fn = await ctx.store.get("fn")
        return StopEvent(result=fn() + 1)


class LockHolder(Workflow):
    """Keeps objects neither JSON nor pickle can hold in ctx.store (a function, a lock)."""

    @step
    async def hold(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("fn", helper)
        async with ctx.store.edit_state() as state:
            state["lock"] = threading.Lock()
        fn = await ctx.store.get("fn")
        return StopEvent(result=fn() + 1)


@pytest.fixture
def mw(durable_url):
    middleware = Middleware(durable_url)
    yield middleware
    middleware.close()


def both(mw, make):
    """The plain workflow and a wrapped twin."""
    return make(), mw.wrap(make())


# -- 1. ctx.to_dict(), Context.from_dict, HITL through a serialized context, pickling -------------
async def test_to_dict_round_trip_equals_unwrapped(mw):
    results = []
    for wf in both(mw, Counter):
        handler = wf.run()
        await handler
        snapshot = handler.ctx.to_dict()
        restored = Context.from_dict(getattr(wf, "workflow", wf), snapshot)
        results.append((snapshot["state"], await wf.run(ctx=restored)))
    assert results[0] == results[1]
    assert results[1][1] == 2


async def test_human_in_the_loop_through_a_serialized_context(mw):
    answers = []
    plain, wrapped = both(mw, Ask)
    for wf in (plain, wrapped):
        handler = wf.run()
        async for ev in handler.stream_events():
            if isinstance(ev, InputRequiredEvent):
                snapshot = handler.ctx.to_dict()
                await handler.cancel_run()
                break
        restored = Context.from_dict(getattr(wf, "workflow", wf), snapshot)
        handler = wf.run(ctx=restored, **({"run_id": "answer-1"} if wf is not plain else {}))
        handler.ctx.send_event(HumanResponseEvent(response="Ada"))
        answers.append(await asyncio.wait_for(handler, 10))
    assert answers == ["hello Ada, asked=True"] * 2
    # the continued run is journaled from the context it started from
    ticks = [s for s in mw.store.load_steps("answer-1") if s.kind == "node"]
    assert "base" in ticks[0].output
    assert mw.store.get_run("answer-1").status == "completed"


async def test_pickled_context_round_trip(mw):
    """The framework's own pickle test: ctx.store holds a function; to_dict(PickleSerializer)."""
    states = []
    for wf in both(mw, Holder):
        handler = wf.run()
        assert await handler == 42
        with pytest.raises(ValueError):
            handler.ctx.to_dict()  # JSON cannot hold the function, wrapped or not
        snapshot = handler.ctx.to_dict(serializer=PickleSerializer())
        restored = Context.from_dict(
            getattr(wf, "workflow", wf), snapshot, serializer=PickleSerializer()
        )
        again = wf.run(ctx=restored)
        states.append(await asyncio.wait_for(again, 10))
    assert states == [42, 42]


# -- 2. a second run on the same context ----------------------------------------------------------
async def test_second_run_on_the_same_context(mw):
    results = []
    for wf in both(mw, Counter):
        handler = wf.run()
        first = await handler
        second = await wf.run(ctx=handler.ctx)
        results.append((first, second))
    assert results == [(1, 2), (1, 2)]


# -- 3. agent.run(user_msg=..., ctx=ctx): multi-turn chat keeps its start arguments ---------------
def _echo(messages, **kwargs):
    users = [m for m in messages if m.role == MessageRole.USER]
    return ChatMessage(role="assistant", content=f"{len(users)}:{users[-1].content}")


def _agent() -> FunctionAgent:
    return FunctionAgent(llm=MockFunctionCallingLLM(response_generator=_echo), timeout=30)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
# the framework itself warns that the second turn's snapshot drops the agent memory
@pytest.mark.filterwarnings("ignore::workflows.context.state_store.UnserializableKeyWarning")
async def test_agent_multi_turn_on_one_context(mw):
    replies = []
    for agent in both(mw, _agent):
        ctx = Context(getattr(agent, "workflow", agent))
        first = await agent.run(user_msg="hello", ctx=ctx)
        second = await agent.run(user_msg="again", ctx=ctx)
        replies.append((str(first), str(second)))
    assert replies[0] == replies[1]
    assert replies[1][0] == "1:hello" and replies[1][1].endswith(":again")


# -- 4. handler.cancel() ---------------------------------------------------------------------------
async def test_hard_cancel(mw):
    for wf in both(mw, Ask):
        handler = wf.run(**({"run_id": "cancel-1"} if hasattr(wf, "workflow") else {}))
        await asyncio.sleep(0.1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            handler.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handler
    await asyncio.sleep(0.05)
    assert mw.store.get_run("cancel-1").status == "paused"


# -- 5. ctx.store values JSON cannot hold ---------------------------------------------------
async def test_unstorable_store_value_never_fails_the_run(mw, caplog):
    with caplog.at_level(logging.WARNING, logger="agentrewind.llamaindex"):
        assert await LockHolder().run() == await mw.wrap(LockHolder()).run(run_id="hold-1") == 42
    # the write is named, with its type and the fix
    text = caplog.text
    assert "/state_data/_data/fn" in text and "builtins.function" in text
    assert "/state_data/_data/lock" in text and "register_codec" in text
    # a resume that would need them says so instead of running on a wrong state
    ticks = [s for s in mw.store.load_steps("hold-1") if s.kind == "node"]
    assert ticks[-1].name == "step_result:hold"


async def test_unstorable_value_stops_a_resume_with_a_named_error(mw):
    wf = mw.wrap(_BrokenAfterHolding(timeout=10))
    with pytest.raises(RuntimeError, match="broken"):
        await wf.run(run_id="hold-2")
    with pytest.raises(SerializationError, match=r"'/state_data/_data/lock' \(_thread\.lock\)"):
        wf.run(run_id="hold-2")


class Held(Event):
    pass


class _BrokenAfterHolding(Workflow):
    @step
    async def hold(self, ctx: Context, ev: StartEvent) -> Held:
        await ctx.store.set("lock", threading.Lock())
        return Held()

    @step
    async def then(self, ctx: Context, ev: Held) -> StopEvent:
        raise RuntimeError("broken")


async def test_allow_pickle_journals_what_json_cannot(durable_url):
    mw = Middleware(durable_url, allow_pickle=True)
    try:
        assert await mw.wrap(Holder()).run(run_id="hold-3") == 42
        state = [s.output.get("state") for s in mw.store.load_steps("hold-3") if s.kind == "node"]
        fn = [s for s in state if s][-1]["state_data"]["_data"]["fn"]
        assert "__agentrewind_serde__" in fn  # pickled by agentrewind's serde, on opt-in
    finally:
        mw.close()


# -- 6. a workflow registered on an explicit runtime ----------------------------------------
async def test_workflow_on_an_explicit_launched_runtime(mw):
    runtime = BasicRuntime()
    with runtime.registering():
        plain, wrapped = Counter(), Counter()
    await runtime.launch()
    assert plain.runtime is runtime
    assert await plain.run() == 1
    assert await mw.wrap(wrapped).run(run_id="rt-1") == 1
    assert mw.store.get_run("rt-1").status == "completed"
    assert any(s.kind == "node" for s in mw.store.load_steps("rt-1"))


# -- a run started from an explicit context resumes from the journal, on top of that context ---
BROKEN = {"on": False}


class Step(Event):
    pass


class Twice(Workflow):
    runs: list[str] = []

    @step
    async def bump(self, ctx: Context, ev: StartEvent) -> Step:
        Twice.runs.append("bump")
        n = await ctx.store.get("n", default=0)
        await ctx.store.set("n", n + 1)
        return Step()

    @step
    async def report(self, ctx: Context, ev: Step) -> StopEvent:
        Twice.runs.append("report")
        if BROKEN["on"]:
            raise RuntimeError("report is broken")
        return StopEvent(result=await ctx.store.get("n"))


async def test_run_from_an_explicit_context_resumes_on_top_of_it(mw):
    wf = mw.wrap(Twice(timeout=10))
    first = wf.run()
    assert await first == 1
    BROKEN["on"] = True
    try:
        with pytest.raises(RuntimeError, match="broken"):
            await wf.run(ctx=first.ctx, run_id="again-1")
    finally:
        BROKEN["on"] = False
    Twice.runs.clear()
    # no context passed: the journal continues the second run from the first run's context
    assert await wf.run(run_id="again-1") == 2
    assert Twice.runs == ["report"]
