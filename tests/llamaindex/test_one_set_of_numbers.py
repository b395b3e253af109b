"""One set of numbers for a LlamaIndex workflow SIGKILLed inside a step, then resumed.

`runs`, `metrics`, the viewer's JSON API and the OpenTelemetry run span report the same
figures; the killed execution's records count, and so do the replays of the resume.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from li_helpers import Side, resume_here, run_flow

from numbers_support import assert_one_set, spans


def test_a_killed_then_resumed_workflow_has_one_set_of_numbers(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = Side(tmp_path / "side.txt")
    # killed in step two, after its two LLM calls
    assert run_flow("three", shared_url, "job-1", side, crash="draft") == -9
    with spans(monkeypatch) as exporter:
        resumed = resume_here("three", shared_url, "job-1", side)
        assert resumed["result"]["words"] == 4
        assert side.count("llm:outline PLAN PIRATES") == 1  # replayed, not paid again
        figures = assert_one_set(
            shared_url, "job-1", exporter, executions=2, failures=0, reruns=0, cache_hits=0
        )
    assert figures["replay_hits"] == 2  # the two LLM calls of the step that was killed
    assert figures["steps"] >= 5  # the killed execution's records are counted
