"""Helpers for the LlamaIndex tests: the side file and the crash-test subprocess driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FLOWS = Path(__file__).parent / "li_flows.py"


class Side:
    """The side file where li_flows notes every real execution."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def count(self, what: str) -> int:
        return self.lines().count(what)


def resume_here(scenario: str, url: str, run_id: str, side: Side) -> Any:
    """Resume (or run) a scenario in the test process: a new process for the crashed run."""
    import li_flows

    return li_flows.run_here(scenario, url, run_id, str(side.path))


def run_flow(scenario: str, url: str, run_id: str, side: Side, crash: str | None = None) -> Any:
    """Run li_flows in a new process; return its JSON summary, or the exit code if it died."""
    argv = [scenario, url, run_id, str(side.path), *([crash] if crash else [])]
    code = (
        f"import sys; sys.path.insert(0, {str(FLOWS.parent)!r}); "
        f"import li_flows; li_flows.main({argv!r})"
    )
    cmd = [sys.executable, "-c", code]
    env = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if crash:
        assert proc.returncode == -9, proc.stderr[-3000:]
        return proc.returncode
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
