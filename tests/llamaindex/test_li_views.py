"""A LlamaIndex run read back (issue 26): `show` and `diff` print its ticks as JSON values,
not JSON text in a string, and `tree` lists its records in execution order, as `log` does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import li_flows

import agentrewind
from cli_support import batch


def test_ticks_are_json_values_and_the_tree_is_in_execution_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    mw = agentrewind.Middleware(url)

    async def go() -> Any:
        return await mw.wrap(li_flows.three_steps()).run(run_id="li", topic="pirates")

    try:
        assert asyncio.run(go())["plan"] == "PLAN PIRATES"
    finally:
        mw.close()
    log, tree, show, diff = batch(
        ["log", "li", "--json", "--store", url],
        ["tree", "li", "--json", "--store", url],
        ["show", "li", "4", "--json", "--store", url],
        ["diff", "li@2", "li@4", "--json", "--store", url],
    )
    steps = log.ok().json()
    assert isinstance(steps, list)
    kinds = [s["kind"] for s in steps]
    assert "llm" in kinds and "node" in kinds  # calls between the ticks of their steps
    nodes = tree.ok().json()
    assert isinstance(nodes, list)
    assert [n["id"] for n in nodes] == [s["step_id"] for s in steps]
    tick = show.ok().json()["output"]["tick"]  # type: ignore[index]
    assert isinstance(tick, dict) and tick["value"]["step_id"] == "plan"
    changed = diff.ok().json()
    assert isinstance(changed, dict)
    assert all(not isinstance(v, str) or not v.startswith("{") for v in _leaves(changed))


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]
