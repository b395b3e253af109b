"""Parallel `edit_state` increments killed mid-run: the resume gives the clean run's count.

Four workers increment `count`; they return in the reverse of the order they edited in, and
one of them (the first or the last to edit) is SIGKILLed after the other three finished.
"""

from __future__ import annotations

import pytest
from li_helpers import Side, resume_here, run_flow


@pytest.mark.parametrize("killed", [0, 3], ids=["killed-edited-first", "killed-edited-last"])
def test_parallel_edit_state_killed_after_three(durable_url, side, tmp_path, killed):
    scenario = f"increments-{killed}"
    assert run_flow(scenario, durable_url, "inc-1", side, crash="increment") == -9
    assert sorted(side.lines()) == ["edit:0", "edit:1", "edit:2", "edit:3"]
    resumed = resume_here(scenario, durable_url, "inc-1", side)
    # only the killed worker ran again
    assert side.count(f"edit:{killed}") == 2
    assert len(side.lines()) == 5
    clean = resume_here(scenario, durable_url, "inc-clean", Side(tmp_path / "clean.txt"))
    assert clean["result"] == {"count": 4}
    assert resumed == clean
