"""SIGKILL inside a step (a subprocess), resume in a new process (this one): SQLite and Redis."""

from __future__ import annotations

import pytest
from li_helpers import resume_here, run_flow

import agentrewind


def test_three_steps_killed_in_step_two(durable_url, side, tmp_path):
    assert run_flow("three", durable_url, "job-1", side, crash="draft") == -9
    assert side.lines() == [
        "step:plan",
        "llm:plan pirates",
        "step:draft",
        "llm:outline PLAN PIRATES",
        "llm:write OUTLINE PLAN PIRATES",
    ]
    resumed = resume_here("three", durable_url, "job-1", side)
    # step 1 and its LLM call ran once over both processes; step 2 ran again, its two
    # completed LLM calls replayed; step 3 ran once
    assert side.count("step:plan") == 1
    assert side.count("llm:plan pirates") == 1
    assert side.count("step:draft") == 2
    assert side.count("llm:outline PLAN PIRATES") == 1
    assert side.count("llm:write OUTLINE PLAN PIRATES") == 1
    assert side.count("step:publish") == 1
    # the result equals a run that never crashed
    clean_side = type(side)(tmp_path / "clean.txt")
    clean = resume_here("three", durable_url, "job-clean", clean_side)
    assert resumed == clean
    assert resumed["result"]["words"] == 4
    with agentrewind.connect(durable_url) as store:
        assert store.get_run("job-1").status == "completed"


def test_parallel_workers_crash_applies_no_write_twice(durable_url, side):
    assert run_flow("parallel", durable_url, "pay-1", side, crash="charge") == -9
    assert sorted(side.lines()) == ["charge:0", "charge:1", "charge:2"]
    resumed = resume_here("parallel", durable_url, "pay-1", side)
    # the crashed worker ran again (its write happened twice in the live store) ...
    assert side.count("charge:2") == 2
    assert side.count("charge:0") == side.count("charge:1") == 1
    # ... but only committed steps' writes were persisted: each charge counted once
    assert resumed["result"] == {"charges": 3, "items": [0, 1, 2]}


def test_function_agent_killed_in_second_tool(durable_url, side, tmp_path):
    assert run_flow("agent", durable_url, "agent-1", side, crash="multiply") == -9
    assert side.lines() == ["llm:0", "tool:add", "llm:1", "tool:multiply"]
    with pytest.warns(agentrewind.RerunWarning, match="multiply"):  # it may multiply twice
        resumed = resume_here("agent", durable_url, "agent-1", side)
    after = side.lines()[4:]
    # the first tool is not called again; the LLM only for the answer that never came;
    # the tool that was in flight runs again, once
    assert after == ["tool:multiply", "llm:2"]
    clean = resume_here("agent", durable_url, "agent-clean", type(side)(tmp_path / "c.txt"))
    assert resumed["result"] == clean["result"] == "The answer is 20"
    assert resumed["memory"] == clean["memory"]
    assert [m[0] for m in resumed["memory"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


def test_human_in_the_loop_across_processes(durable_url, side):
    first = run_flow("hitl-ask", durable_url, "mail-1", side)
    assert first == {"prompts": ["send EMAIL ABOUT Q3 BUDGET?"]}
    second = resume_here("hitl-answer", durable_url, "mail-1", side)
    assert second["result"] == "EMAIL ABOUT Q3 BUDGET -> yes"
    # the prompt reached the new consumer once; the LLM call before the wait ran once
    assert second["prompts"] == ["send EMAIL ABOUT Q3 BUDGET?"]
    assert side.count("llm:email about Q3 budget") == 1
    assert side.count("step:ask") == 2  # the waiting step re-runs from its top, by design


def test_rerun_of_an_answered_run_reuses_the_answer(durable_url, side):
    first = resume_here("hitl-answer", durable_url, "mail-2", side)
    assert first["result"] == "EMAIL ABOUT Q3 BUDGET -> yes"
    before = side.lines()
    # the run completed; the same id runs again from scratch: the LLM call replays and the
    # recorded answer is reused, so the question is not asked (nor streamed) again
    again = resume_here("hitl-answer", durable_url, "mail-2", side)
    assert again == {"result": "EMAIL ABOUT Q3 BUDGET -> yes", "prompts": []}
    assert side.lines()[len(before) :] == ["step:ask"]  # the step ran, its LLM call replayed
    with agentrewind.connect(durable_url) as store:
        answers = [s for s in store.load_steps("mail-2") if s.name == "human_response"]
    assert [a.status for a in answers] == ["completed"]


def test_a_workflow_registered_as_a_workflow_is_recovered_after_a_sigkill(durable_url, side):
    # issue 24: registered with middleware.workflow(name, wrapped), killed inside step two
    assert run_flow("wf-three", durable_url, "wfjob-1", side, crash="draft") == -9
    resumed = resume_here("wf-recover", durable_url, "wfjob-1", side)
    assert resumed["outcomes"] == [["wfjob-1", "three-steps", "completed"]]
    assert resumed["result"]["words"] == 4
    # no LLM call paid twice: step one's and step two's completed calls replayed
    assert side.count("llm:plan pirates") == 1
    assert side.count("llm:outline PLAN PIRATES") == 1
    assert side.count("llm:write OUTLINE PLAN PIRATES") == 1
    assert side.count("step:plan") == 1 and side.count("step:publish") == 1
