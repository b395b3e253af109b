"""AgentWorkflow with a handoff: killed after the handoff, resumed in a new process.

The `handoff` tool writes `next_agent` into `ctx.store`; a replayed handoff must apply that
write again, or the resumed run stays with the first agent and its LLM input diverges.
"""

from __future__ import annotations

import warnings

import pytest
from li_helpers import Side, resume_here, run_flow

import agentrewind
from agentrewind.errors import DivergenceWarning

BEFORE_CRASH = ["llm:router:0", "tool:research", "llm:router:1", "llm:writer:2", "tool:rhyme"]


def test_agent_workflow_killed_after_handoff(cluster_url, side, tmp_path):
    assert run_flow("team", cluster_url, "team-1", side, crash="rhyme") == -9
    assert side.lines() == BEFORE_CRASH
    with warnings.catch_warnings(), pytest.warns(agentrewind.RerunWarning, match="rhyme"):
        warnings.simplefilter("error", DivergenceWarning)
        resumed = resume_here("team", cluster_url, "team-1", side)
    # the router's LLM calls, its tool and the handoff are not repeated; the writer's first
    # LLM call is not repeated; the tool that was in flight runs again, then the last LLM call
    assert side.lines()[len(BEFORE_CRASH) :] == ["tool:rhyme", "llm:writer:3"]
    clean = resume_here("team", cluster_url, "team-clean", Side(tmp_path / "clean.txt"))
    assert resumed == clean
    assert resumed["agent"] == "writer"
    assert resumed["result"] == "Poem: tides rise twice a day, we ride."
    assert [m[0] for m in resumed["memory"]].count("user") == 1  # no message stored twice
    assert len(resumed["memory"]) == 8
    with agentrewind.connect(cluster_url) as store:
        assert store.get_run("team-1").status == "completed"


def test_rerun_of_a_finished_team_replays_the_handoff(tmp_path, side):
    url = f"sqlite:///{tmp_path / 'team.db'}"
    first = resume_here("team", url, "team-2", side)
    assert side.lines() == [*BEFORE_CRASH, "llm:writer:3"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        again = resume_here("team", url, "team-2", side)
    # nothing executed again: the handoff replayed together with its ctx.store write, so the
    # writer (not the router) made the calls that followed it, all replayed
    assert side.lines() == [*BEFORE_CRASH, "llm:writer:3"]
    assert again == first
    assert again["agent"] == "writer"
    with agentrewind.connect(url) as store:
        handoff = [
            s for s in store.load_steps("team-2") if s.kind == "tool" and s.name == "handoff"
        ]
    assert len(handoff) == 1
    writes = handoff[0].meta["ctx_writes"]
    assert [op["path"] for patch in writes for op in patch] == ["/state_data/_data/next_agent"]


def test_memory_write_of_a_step_in_flight_is_not_journaled_early(side, tmp_path):
    durable_url = f"sqlite:///{tmp_path / 'mem.db'}"  # store-independent: one backend is enough
    assert run_flow("memory", durable_url, "mem-1", side, crash="slow") == -9
    assert sorted(side.lines()) == ["step:fast", "step:slow"]
    with agentrewind.connect(durable_url) as store:
        journaled = [
            s.output.get("memories") for s in store.load_steps("mem-1") if s.kind == "node"
        ]
    # `fast`'s result was journaled while `slow` (which had written to memory) was in flight:
    # the journaled memory holds the committed messages only
    last = [m for m in journaled if m][-1]
    texts = [str(m) for m in last["ChatMemoryBuffer:notes"]["messages"]]
    assert any("fast thought" in t for t in texts)
    assert not any("slow thought" in t for t in texts)
    resumed = resume_here("memory", durable_url, "mem-1", side)
    assert side.count("step:slow") == 2 and side.count("step:fast") == 1
    # the re-run step wrote its message once: no duplicate from the crashed attempt
    assert resumed["result"] == ["fast thought", "hi", "slow thought"]
    clean = resume_here("memory", durable_url, "mem-clean", Side(tmp_path / "clean.txt"))
    assert resumed == clean
