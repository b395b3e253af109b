"""Agents for the crash tests: fake models (FunctionModel) and tools that log to a side file.

Every model request logs `llm:<agent>:<i>` (i: responses already in the history, so each is
logged once per execution), every tool `enter:<tool>:<arg>` when it starts and
`pay:<tool>:<arg>` when it finishes: a resumed run must pay nothing twice and call the model
only for the requests after the crash. `main([...])` runs a scenario in a subprocess (which
SIGKILLs itself inside the tool named by `crash`); `run_here` resumes it in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import agentrewind
from agentrewind_pydantic_ai import RewindDurability


class Side:
    """An append-only file of what happened, shared by the processes of one test."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def add(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line + "\n")

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def count(self, line: str) -> int:
        return self.lines().count(line)


class Invoice(BaseModel):
    items: list[str]
    total: int


def call(tool: str, tool_call_id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool, args, tool_call_id=tool_call_id)


SCRIPTS: dict[str, list[list[Any]]] = {
    # one list of parts per model request, in order
    "tools": [[call("charge", "c1", item="a")], [call("charge", "c2", item="b")], ["paid a and b"]],
    "parallel": [
        [call("charge", "c1", item="a"), call("charge", "c2", item="b"),
         call("charge", "c3", item="c")],
        ["paid a, b and c"],
    ],
    "retry": [
        [call("lookup", "c1", code="bad")],
        [call("lookup", "c2", code="good")],
        [call("charge", "c3", item="b")],
        ["found good, paid b"],
    ],
    "structured": [
        [call("charge", "c1", item="a")],
        [call("charge", "c2", item="b")],
        [call("final_result", "c3", items=["a", "b"], total=2)],
    ],
    "delegate": [[call("delegate", "c1", task="pay x and y")], ["delegated: done x,y"]],
    "sub": [[call("charge", "s1", item="x")], [call("charge", "s2", item="y")], ["done x,y"]],
    "approval": [[call("refund", "c1", item="a")], ["refunded a"]],
}  # fmt: skip


def _turn(name: str, messages: list[ModelMessage], side: Side) -> list[Any]:
    i = sum(isinstance(m, ModelResponse) for m in messages)
    side.add(f"llm:{name}:{i}")
    return SCRIPTS[name][i]


def model(name: str, side: Side) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = _turn(name, messages, side)
        return ModelResponse(parts=[TextPart(p) if isinstance(p, str) else p for p in parts])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        for i, part in enumerate(_turn(name, messages, side)):
            if isinstance(part, str):
                for word in part.split(" "):
                    yield word + " "
            else:
                args = json.dumps(part.args)
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}

    return FunctionModel(respond, stream_function=stream)


def build(scenario: str, side: Side, crash: str | None) -> Agent[None, Any]:
    """The scenario's agent; `crash` (`tool:arg`) SIGKILLs the first entry of that tool call."""
    name = "sub" if scenario == "delegate" else scenario
    script = "tools" if scenario == "stream" else scenario
    output: Any = Invoice if scenario == "structured" else str
    if scenario == "approval":
        output = [str, DeferredToolRequests]
    agent = Agent(
        model(script, side), name=script, output_type=output, capabilities=[RewindDurability()]
    )
    del name

    def maybe_crash(tool: str, arg: str) -> None:
        side.add(f"enter:{tool}:{arg}")
        if crash == f"{tool}:{arg}" and side.count(f"enter:{tool}:{arg}") == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    @agent.tool_plain
    async def charge(item: str) -> str:
        if item == "c":  # let the other parallel calls finish and be journaled first
            await asyncio.sleep(0.3)
        maybe_crash("charge", item)
        side.add(f"pay:charge:{item}")
        return f"paid {item}"

    @agent.tool_plain
    def lookup(code: str) -> str:
        maybe_crash("lookup", code)
        if code == "bad":
            raise ModelRetry("no such code, try 'good'")
        side.add(f"pay:lookup:{code}")
        return f"found {code}"

    @agent.tool_plain(requires_approval=True)
    def refund(item: str) -> str:
        maybe_crash("refund", item)
        side.add(f"pay:refund:{item}")
        return f"refunded {item}"

    if scenario == "delegate":
        sub = build("sub", side, crash)

        @agent.tool
        async def delegate(ctx: RunContext[None], task: str) -> str:
            side.add(f"enter:delegate:{task}")
            result = await sub.run(task, usage=ctx.usage)
            return str(result.output)

    return agent


def _parts(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for m in messages:
        for p in m.parts:
            content = getattr(p, "content", None) or getattr(p, "args", None)
            out.append(f"{p.part_kind}:{json.dumps(content, sort_keys=True, default=str)}")
    return out


async def _arun(scenario: str, url: str, run_id: str, side: Side, crash: str | None) -> Any:
    mw = agentrewind.Middleware(url)
    agent = build("delegate" if scenario == "delegate" else scenario, side, crash)
    try:
        async with mw.run(run_id) as run:
            events: list[str] = []
            if scenario == "stream":
                async with agent.run_stream_events("pay a and b") as stream:
                    async for event in stream:
                        events.append(type(event).__name__)
                        if hasattr(event, "result"):
                            result = event.result
            else:
                result = await agent.run("pay")
        metrics = run.metrics
    finally:
        mw.close()
    output = result.output
    return {
        "output": output.model_dump() if isinstance(output, BaseModel) else str(output),
        "parts": _parts(result.all_messages()),
        "new_messages": len(result.new_messages()),
        "events": events,
        "executed": metrics.steps,
    }


def run_here(scenario: str, url: str, run_id: str, side_path: str, crash: str | None = None) -> Any:
    """Run (or resume) a scenario in this process and return its JSON summary."""
    return asyncio.run(_arun(scenario, url, run_id, Side(Path(side_path)), crash))


def approval(url: str, run_id: str, side_path: str, history_path: str, approve: bool) -> Any:
    """Ask for a refund (the tool needs approval), or continue with the approval."""
    side = Side(Path(side_path))
    mw = agentrewind.Middleware(url)
    # wrapped: each agent run gets a run_id of the agentrewind run that is new to the history
    agent = mw.wrap(build("approval", side, None))
    try:
        with mw.run(run_id) as run:
            if not approve:
                result = agent.run_sync("refund a")
                Path(history_path).write_bytes(
                    ModelMessagesTypeAdapter.dump_json(result.all_messages())
                )
                assert isinstance(result.output, DeferredToolRequests)
                return {"approvals": [c.tool_name for c in result.output.approvals]}
            history = ModelMessagesTypeAdapter.validate_json(Path(history_path).read_bytes())
            results = DeferredToolResults(approvals={"c1": True})
            result = agent.run_sync(message_history=history, deferred_tool_results=results)
            return {"output": str(result.output), "executed": run.metrics.steps}
    finally:
        mw.close()


def main(argv: list[str]) -> None:
    if argv[0] == "approval":
        summary = approval(*argv[1:5], approve=argv[5] == "yes")
    else:
        summary = run_here(*argv)
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
