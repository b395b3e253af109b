"""Logging: a DEBUG line per replay decision under `agentrewind.*`; only DEBUG when all is well."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import agentrewind


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_each_replay_decision_is_one_debug_line(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, kind: str
) -> None:
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    middleware = agentrewind.Middleware(url)
    caplog.set_level(logging.DEBUG, logger="agentrewind")
    for _ in range(2):
        with middleware.run("order-42") as run:
            run.step("fetch", str.upper, "a")
            run.step("charge", str.lower, "B")
    middleware.close()

    lines = _lines(caplog)
    assert all(name.startswith("agentrewind.") for name, _, _ in lines), lines
    assert {level for _, level, _ in lines} == {logging.DEBUG}, "happy path logs only DEBUG"
    decisions = [m for name, _, m in lines if name == "agentrewind.journal" and "custom:" in m]
    assert [("executes" in m, "replayed" in m) for m in decisions] == [
        (True, False),  # first execution: fetch
        (True, False),  # charge
        (False, True),  # resume: fetch replayed
        (False, True),  # charge replayed
    ], decisions
    assert all("'order-42'" in m for m in decisions)
    opened = [m for name, _, m in lines if name == "agentrewind.journal" and "opened" in m]
    assert len(opened) == 2, opened
    assert opened[0].endswith(": 0 recorded step(s)"), opened
    assert opened[1].endswith(": 2 recorded step(s)"), opened


def test_divergence_and_incomplete_steps_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    middleware = agentrewind.Middleware("memory://")
    with middleware.run("plan") as run:
        run.step("search", str.upper, "laptops")
        call = run.begin("tool", "charge", {"amount": 1}, side_effects=True)
        call.start()  # the process "dies" here: started, never completed
    caplog.set_level(logging.DEBUG, logger="agentrewind")
    with (
        pytest.warns(agentrewind.DivergenceWarning),
        pytest.warns(agentrewind.RerunWarning),
        middleware.run("plan") as run,
    ):
        run.step("search", str.upper, "tablets")
        run.begin("tool", "charge", {"amount": 1}, side_effects=True)
    messages = [m for name, _, m in _lines(caplog) if name == "agentrewind.journal"]
    assert any("divergence at custom:search:" in m and "strict=False" in m for m in messages)
    assert any(
        "tool:charge:" in m and "started, never completed: on_incomplete" in m for m in messages
    ), messages
