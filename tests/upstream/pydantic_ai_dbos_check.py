"""The wrapped-only failures of `upstream-pydantic-ai`, reproduced beside pydantic-ai's DBOS engine.

Run: `uv run --group bench python tests/upstream/pydantic_ai_dbos_check.py` (DBOS on a SQLite
system database in a temporary folder; no server, no network).

Each scenario is the core of a group of pydantic-ai tests that fail wrapped but pass
unwrapped (docs/reference/pydantic-ai-upstream.md). It runs three ways: the plain agent, the
agent with `DBOSDurability` inside a `@DBOS.workflow`, and the agent wrapped by agentrewind
inside a run. A difference that DBOS shows too is pydantic-ai's durable layer, not ours; the
script exits 1 when agentrewind differs from DBOS where the table says they agree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturn
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind

Act = Callable[[Agent[None, Any]], Awaitable[str]]


async def _two_chunks(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "hello "
    yield "world"


def _streaming(output_type: Any = str) -> Callable[[list[Any], str | None], Agent[None, Any]]:
    def make(capabilities: list[Any], name: str | None) -> Agent[None, Any]:
        model = FunctionModel(stream_function=_two_chunks)
        return Agent(model, output_type=output_type, name=name, capabilities=capabilities)

    return make


async def _events(agent: Agent[None, Any]) -> str:
    async with agent.run_stream_events("hi") as stream:
        names = []
        async for event in stream:
            part = getattr(event, "part", None)
            shown = f"({part.content!r})" if isinstance(part, TextPart) else ""
            names.append(type(event).__name__ + shown)
    return ", ".join(names)


async def _partial(agent: Agent[None, Any]) -> str:
    async with agent.run_stream("hi") as result:
        return repr([text async for text in result.stream_output(debounce_by=None)])


async def _retries_on_enter(agent: Agent[None, Any]) -> str:
    # pydantic-ai's test_plain_response: text where a tuple is wanted; no retry is reached
    calls_before = CALLS["model"]
    try:
        async with agent.run_stream(""):
            pass
        return f"no error, model calls {CALLS['model'] - calls_before}"
    except Exception as exc:
        return f"{type(exc).__name__}, model calls {CALLS['model'] - calls_before}"


CALLS = {"model": 0}


async def _counted(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    CALLS["model"] += 1
    yield "hello "
    yield "world"


def _tuple_agent(capabilities: list[Any], name: str | None) -> Agent[None, Any]:
    model = FunctionModel(stream_function=_counted)
    return Agent(model, output_type=tuple[str, str], name=name, capabilities=capabilities)


def _nested_tool_return(capabilities: list[Any], name: str | None) -> Agent[None, Any]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("analyze", {}, tool_call_id="a1")])
        return ModelResponse(parts=[TextPart("done")])  # pragma: no cover

    agent: Agent[None, Any] = Agent(FunctionModel(model), name=name, capabilities=capabilities)

    @agent.tool_plain
    def analyze() -> list[Any]:
        return [ToolReturn(return_value="ok"), "else"]

    return agent


async def _outcome(agent: Agent[None, Any]) -> str:
    try:
        return f"output {(await agent.run('go')).output!r}"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:70]}"


SINGLETON = ModelResponse(parts=[TextPart("ok")])


def _singleton(capabilities: list[Any], name: str | None) -> Agent[None, Any]:
    model = FunctionModel(lambda messages, info: SINGLETON)
    return Agent(model, name=name, capabilities=capabilities)


async def _identity(agent: Agent[None, Any]) -> str:
    result = await agent.run("hi")
    return f"history holds the model's object: {result.all_messages()[-1] is SINGLETON}"


async def _unnamed(agent: Agent[None, Any]) -> str:
    try:
        await agent.run("hi", infer_name=False)
        return "ran"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:40]}"


async def _run_model(agent: Agent[None, Any]) -> str:
    try:
        other = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("other")]))
        return f"output {(await agent.run('hi', model=other)).output!r}"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:45]}"


# name, build(capabilities, name), act, whether agentrewind must equal DBOS
SCENARIOS: list[tuple[str, Callable[[list[Any], str | None], Agent[None, Any]], Act, bool]] = [
    ("stream events (test_run_stream_events, ...)", _streaming(), _events, True),
    ("partial outputs (TestPartialOutput, ...)", _streaming(), _partial, True),
    ("retry inside run_stream (test_plain_response)", _tuple_agent, _retries_on_enter, True),
    ("nested ToolReturn (test_many_multimodal_tool_response)", _nested_tool_return, _outcome, True),
    ("unnamed agent (name rule)", _singleton, _unnamed, True),
    ("model passed at run time (override rule)", _singleton, _run_model, True),
    ("response identity (JSON journal, by design)", _singleton, _identity, False),
]


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="ar-dbos-check-"))
    dbos_agents: dict[int, Agent[None, Any] | str] = {}
    for i, (label, build, _, _) in enumerate(SCENARIOS):
        try:  # DBOSDurability binds (and checks its rules) when the agent is built
            dbos_agents[i] = build([DBOSDurability()], None if "unnamed" in label else f"dbos{i}")
        except Exception as exc:
            dbos_agents[i] = f"{type(exc).__name__}: {str(exc)[:40]}"
    DBOS(config={"name": "ar-dbos-check", "system_database_url": f"sqlite:///{folder / 'd.db'}"})

    @DBOS.workflow(name="scenario")
    async def scenario(i: int) -> str:
        agent = dbos_agents[i]
        return agent if isinstance(agent, str) else await SCENARIOS[i][2](agent)

    DBOS.launch()
    mw = agentrewind.Middleware(f"sqlite:///{folder / 'journal.db'}")
    failed = False
    try:

        async def all_three() -> None:
            nonlocal failed
            for i, (label, build, act, same) in enumerate(SCENARIOS):
                name = None if "unnamed" in label else f"ar{i}"
                plain = await act(build([], f"plain{i}"))
                with SetWorkflowID(uuid.uuid4().hex):
                    dbos = await scenario(i)
                async with mw.run(f"check-{i}"):
                    ours = await act(mw.wrap(build([], name)))
                agree = ours.replace("agentrewind", "DBOS").replace("RewindDurability", "X")
                theirs = dbos.replace("DBOSDurability", "X")
                verdict = "same as DBOS" if agree == theirs else "differs from DBOS"
                if same and agree != theirs:
                    verdict += "  <-- FAIL"
                    failed = True
                print(f"{label}\n  plain       {plain}\n  DBOS        {dbos}\n  agentrewind {ours}")
                print(f"  => {verdict}{'' if same else ' (expected: by design)'}")

        asyncio.run(all_three())
    finally:
        mw.close()
        DBOS.destroy()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
