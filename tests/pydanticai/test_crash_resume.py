"""SIGKILL inside a tool (a subprocess), resume in a new process (this one), against a clean run:
SQLite, Redis and PostgreSQL. Counters in a side file say what ran in each process."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
from pai_flows import Side, run_here
from pai_helpers import in_new_process

import agentrewind

CASES = {
    # scenario: (the tool call killed in flight, the lines the first process logged)
    "tools": ("charge:b", ["llm:tools:0", "enter:charge:a", "pay:charge:a", "llm:tools:1",
                           "enter:charge:b"]),
    "stream": ("charge:b", ["llm:tools:0", "enter:charge:a", "pay:charge:a", "llm:tools:1",
                            "enter:charge:b"]),
    "parallel": ("charge:c", None),
    "retry": ("charge:b", ["llm:retry:0", "enter:lookup:bad", "llm:retry:1", "enter:lookup:good",
                           "pay:lookup:good", "llm:retry:2", "enter:charge:b"]),
    "structured": ("charge:b", ["llm:structured:0", "enter:charge:a", "pay:charge:a",
                                "llm:structured:1", "enter:charge:b"]),
    "delegate": ("charge:y", ["llm:delegate:0", "enter:delegate:pay x and y", "llm:sub:0",
                              "enter:charge:x", "pay:charge:x", "llm:sub:1", "enter:charge:y"]),
}  # fmt: skip


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_killed_in_second_tool_resumes_paying_nothing_twice(durable_url, side, tmp_path, scenario):
    crash, first = CASES[scenario]
    assert in_new_process(scenario, durable_url, "job-1", str(side.path), crash, crash=True) == -9
    before = side.lines()
    if first is not None:
        assert before == first
    else:  # parallel: the two other calls finished (and were journaled) before the kill
        assert Counter(before) == Counter(
            ["llm:parallel:0", "enter:charge:a", "pay:charge:a", "enter:charge:b",
             "pay:charge:b", "enter:charge:c"]
        )  # fmt: skip
    tool, arg = crash.split(":")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        resumed = run_here(scenario, durable_url, "job-1", str(side.path))
    # what was in flight (the tool; a delegating tool around it too) may pay twice: said
    seen = [w for w in seen if w.category is not ResourceWarning]  # another object's GC
    assert {w.category for w in seen} == {agentrewind.RerunWarning}, seen
    assert any(f"tool:{tool}" in str(w.message) for w in seen), seen
    after = side.lines()[len(before) :]
    counts = Counter(side.lines())
    # nothing paid twice; every model request ran once over both processes
    assert all(n == 1 for line, n in counts.items() if line.startswith(("pay:", "llm:"))), counts
    # the call that was in flight runs again (it never finished), nothing else that finished
    assert counts[f"enter:{tool}:{arg}"] == 2
    assert f"enter:{tool}:{arg}" in after
    assert not any(line.startswith("llm:") for line in after if line in before)
    clean_side = Side(tmp_path / "clean.txt")
    clean = run_here(scenario, durable_url, "job-clean", str(clean_side.path))
    assert {k: v for k, v in resumed.items() if k != "executed"} == {
        k: v for k, v in clean.items() if k != "executed"
    }
    # the resumed run recorded only what ran after the crash
    assert resumed["executed"] < clean["executed"]
    with agentrewind.connect(durable_url) as store:
        assert store.get_run("job-1").status == "completed"
    # a third execution replays everything: no model request, no tool
    again = run_here(scenario, durable_url, "job-1", str(side.path))
    assert again["executed"] == 0 and again["output"] == clean["output"]
    assert Counter(side.lines()) == counts


def test_deferred_tool_approved_from_a_new_process(durable_url, side, tmp_path):
    history = str(tmp_path / "history.json")
    asked = in_new_process("approval", durable_url, "refund-1", str(side.path), history, "no")
    assert asked == {"approvals": ["refund"]}
    assert side.lines() == ["llm:approval:0"]
    # approved elsewhere: a new process continues the run with the approval
    done = in_new_process("approval", durable_url, "refund-1", str(side.path), history, "yes")
    assert done["output"] == "refunded a"
    assert side.lines() == ["llm:approval:0", "enter:refund:a", "pay:refund:a", "llm:approval:1"]
    # resumed once more (a crash after the approval): the refund is not paid twice
    again = in_new_process("approval", durable_url, "refund-1", str(side.path), history, "yes")
    assert again == {"output": "refunded a", "executed": 0}
    assert side.count("pay:refund:a") == 1
