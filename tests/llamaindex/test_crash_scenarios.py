"""More crash-and-resume scenarios, each compared with a clean run, on SQLite and Redis.

A subprocess runs the scenario and dies (SIGKILL) or fails; this process resumes the same
run id, as a new process would.
"""

from __future__ import annotations

from li_helpers import Side, resume_here, run_flow

import agentrewind


def _clean(scenario, url, tmp_path):
    return resume_here(scenario, url, "clean", Side(tmp_path / "clean.txt"))


def test_streaming_workflow_killed_in_the_middle_step(durable_url, side, tmp_path):
    assert run_flow("streaming", durable_url, "stream-1", side, crash="middle") == -9
    assert side.lines() == ["step:first", "step:middle"]
    resumed = resume_here("streaming", durable_url, "stream-1", side)
    assert side.lines() == ["step:first", "step:middle", "step:middle", "step:last"]
    # the new consumer sees the whole stream once: journaled events, then the re-run's
    assert resumed == _clean("streaming", durable_url, tmp_path)
    assert resumed["stream"] == ["first 0", "first 1", "first 2", "middle", "last"]


def test_human_in_the_loop_killed_as_the_question_arrives(durable_url, side, tmp_path):
    # the asking process dies the moment the InputRequiredEvent reaches it
    assert run_flow("hitl-ask", durable_url, "mail-k", side, crash="prompted") == -9
    answered = resume_here("hitl-answer", durable_url, "mail-k", side)
    assert answered["result"] == "EMAIL ABOUT Q3 BUDGET -> yes"
    assert answered["prompts"] == ["send EMAIL ABOUT Q3 BUDGET?"]
    assert side.count("llm:email about Q3 budget") == 1  # the LLM call before the wait replayed
    clean = resume_here("hitl-answer", durable_url, "mail-clean", Side(tmp_path / "c.txt"))
    assert answered == clean


def test_failed_step_fixed_and_resumed_in_a_new_process(durable_url, side, tmp_path):
    assert run_flow("fragile-broken", durable_url, "frag-1", side) == {"error": "check is broken"}
    assert side.lines() == ["step:add", "step:check"]
    with agentrewind.connect(durable_url) as store:
        assert store.get_run("frag-1").status == "failed"
    resumed = resume_here("fragile", durable_url, "frag-1", side)
    # the step before the failure did not run again; the fixed step ran on the state from
    # before its failed attempt (its writes were dropped with the failure)
    assert side.lines() == ["step:add", "step:check", "step:check"]
    assert resumed == _clean("fragile", durable_url, tmp_path)
    assert resumed["result"] == {"total": 10, "log": ["add", "check"]}
