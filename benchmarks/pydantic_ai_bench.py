"""pydantic-ai durable unit overhead: RewindDurability (SQLite, Redis) beside the DBOS engine.

Run: `python benchmarks/pydantic_ai_bench.py [--rounds N] [--no-dbos]` (the nox `bench` session).

An agent on a `FunctionModel` (no network, no work) makes `turns` model requests, each asking
for one tool call, then answers. The time a turn costs is the slope between a run of 5 and a
run of 25 turns (so what one run costs to open and close drops out), median over rounds; the
overhead of an engine is its slope minus the plain agent's (no capability), measured in the
same process. A turn is one model request and one tool call:

* RewindDurability journals both (an `llm` record; a tool's `started` + `completed`), so its
  figure is per turn and per unit (turn / 2).
* DBOSDurability (pydantic-ai's engine on a SQLite system database, `@DBOS.workflow` around
  the run) makes the model request a `@DBOS.step`; function tools run inline, unjournaled.

Goal (DESIGN §8, issue 29): RewindDurability's overhead per turn <= 0.25x DBOS's on SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _bench_redis import bench_redis_url
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind
from agentrewind_pydantic_ai import RewindDurability

SHORT, LONG = 5, 25
GOAL = 0.25


def _model(turns: int) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done < turns:
            return ModelResponse(parts=[ToolCallPart("work", {"i": done}, tool_call_id=f"t{done}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def _agent(turns: int, capability: Any | None, name: str) -> Agent[None, str]:
    agent = Agent(_model(turns), name=name, capabilities=[capability] if capability else [])

    @agent.tool_plain
    def work(i: int) -> int:
        return i + 1

    return agent


async def _time(run: Any, agents: dict[int, Agent[None, str]], rounds: int) -> float:
    """Median µs per turn: (run of LONG turns - run of SHORT turns) / (LONG - SHORT)."""
    slopes = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await run(agents[SHORT])
        t1 = time.perf_counter()
        await run(agents[LONG])
        t2 = time.perf_counter()
        slopes.append(((t2 - t1) - (t1 - t0)) / (LONG - SHORT))
    return statistics.median(slopes) * 1e6


async def bench_plain(rounds: int) -> float:
    agents = {n: _agent(n, None, "plain") for n in (SHORT, LONG)}

    async def run(agent: Agent[None, str]) -> None:
        await agent.run("go")

    await _time(run, agents, 3)  # warm-up
    return await _time(run, agents, rounds)


async def bench_rewind(url: str, rounds: int) -> float:
    mw = agentrewind.Middleware(url)
    agents = {n: _agent(n, RewindDurability(mw), f"rewind{n}") for n in (SHORT, LONG)}

    async def run(agent: Agent[None, str]) -> None:
        async with mw.run(uuid.uuid4().hex):
            await agent.run("go")

    try:
        await _time(run, agents, 3)
        return await _time(run, agents, rounds)
    finally:
        mw.close()


def bench_dbos(directory: Path, rounds: int) -> float | str:
    try:
        from dbos import DBOS, SetWorkflowID
        from pydantic_ai.durable_exec.dbos import DBOSDurability
    except ImportError as exc:
        return f"dbos is not installed ({exc})"
    DBOS(config={"name": "pai-bench", "system_database_url": f"sqlite:///{directory / 'd.db'}"})
    agents = {n: _agent(n, DBOSDurability(), f"dbos{n}") for n in (SHORT, LONG)}
    workflows = {}
    for n, agent in agents.items():

        @DBOS.workflow(name=f"bench{n}")
        async def wf(prompt: str, agent: Agent[None, str] = agent) -> str:
            return (await agent.run(prompt)).output

        workflows[n] = wf
    DBOS.launch()
    try:

        async def run(agent: Agent[None, str]) -> None:
            n = SHORT if agent is agents[SHORT] else LONG
            with SetWorkflowID(uuid.uuid4().hex):
                await workflows[n]("go")

        async def both() -> float:
            await _time(run, agents, 3)
            return await _time(run, agents, rounds)

        return asyncio.run(both())
    finally:
        DBOS.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-dbos", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentrewind-pai-bench-") as tmp:
        directory = Path(tmp)
        plain = asyncio.run(bench_plain(args.rounds))
        figures = {"sqlite": f"sqlite:///{directory / 'r.db'}"}
        try:
            figures["redis"] = f"{bench_redis_url()}?namespace=pai-bench-{uuid.uuid4().hex[:8]}"
        except RuntimeError as exc:
            print(f"redis skipped: {exc}", file=sys.stderr)
        rewind = {k: asyncio.run(bench_rewind(u, args.rounds)) - plain for k, u in figures.items()}
        dbos = "--no-dbos given" if args.no_dbos else bench_dbos(directory, args.rounds)
        if isinstance(dbos, float):
            dbos -= plain
    print(f"pydantic-ai {SHORT}->{LONG} turns (1 model request + 1 tool call each), median of "
          f"{args.rounds} rounds; overhead = engine's µs per turn - plain agent's")  # fmt: skip
    print(f"{'engine':<26}{'µs/turn':>10}{'µs/unit':>10}   vs DBOS")
    print(f"{'plain agent (time/turn)':<26}{plain:>10,.1f}{'-':>10}")
    for store, over in rewind.items():
        ratio = f"{over / dbos:.2f}x (goal <= {GOAL}x)" if isinstance(dbos, float) else "-"
        print(f"{'RewindDurability ' + store:<26}{over:>10,.1f}{over / 2:>10,.1f}   {ratio}")
    if isinstance(dbos, float):
        print(f"{'DBOSDurability sqlite':<26}{dbos:>10,.1f}{dbos:>10,.1f}   1.00x")
    else:
        print(f"DBOSDurability: not measured ({dbos})")


if __name__ == "__main__":
    main()
