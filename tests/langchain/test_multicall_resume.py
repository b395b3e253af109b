"""Issue 12 item 10: several paid calls in one LangGraph node, killed (SIGKILL) mid-node.

LangGraph's checkpointer resumes at the last finished superstep, so a node that dies re-runs
whole: every model and tool call it had made is paid again. agentrewind on top of the same
`SqliteSaver` replays the calls that finished inside the node. The counts are what the
resume pays (`benchmarks/langchain_multicall.py` prints them as a table); a clean run's
result is what both resumes must return.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from _multicall import SCENARIOS, Counts, clean_run, measure
from lc_support import contents

import agentrewind

pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)

# scenario: ((models, tools) paid by the resume with the SqliteSaver alone, with agentrewind)
EXPECTED = {
    "retry": ((4, 1), (1, 1)),  # 2 failed attempts + the success again; replayed
    "fallback": ((3, 1), (2, 1)),  # failed primary attempts are not journaled: it runs again
    "summarise": ((3, 1), (2, 1)),  # the summary has its own node: checkpointed by both
    "llm-tool": ((3, 1), (1, 1)),  # the tool's 2 inner LLM calls replay; the tool re-runs
    "node": ((2, 2), (0, 1)),  # 2 LLM calls and the finished tool replay
    "parallel": ((1, 1), (1, 1)),  # LangGraph keeps the finished parallel task's writes
}


def same(result: Any) -> Any:
    return contents(result) if "messages" in result else result


def check(counts: Counts, expected: tuple[int, int], clean: Counts) -> None:
    assert (counts.models, counts.tools) == expected
    assert same(counts.result) == same(clean.result)


def test_sqlite_saver_alone_pays_the_whole_node_again(tmp_path: Path) -> None:
    for scenario in SCENARIOS:
        workdir = tmp_path / scenario.name
        workdir.mkdir()
        check(
            measure(scenario, workdir, None),
            EXPECTED[scenario.name][0],
            clean_run(scenario, workdir),
        )


def test_agentrewind_replays_the_calls_the_node_finished(tmp_path: Path, durable_url: str) -> None:
    for scenario in SCENARIOS:
        workdir = tmp_path / scenario.name
        workdir.mkdir()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            counts = measure(scenario, workdir, durable_url)
        # A call killed in flight that runs again says so; nothing else is warned about.
        kinds = {w.category for w in seen} - {ResourceWarning}  # another object's GC
        assert kinds <= {agentrewind.RerunWarning}, seen
        check(counts, EXPECTED[scenario.name][1], clean_run(scenario, workdir))
