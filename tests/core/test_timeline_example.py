"""The README's timeline example (examples/timeline_example.py) runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "timeline_example.py"


def test_readme_timeline_example_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["['reviews']", "True", "{'sources[0]': 'reviews'}"]
    assert lines[3].startswith("timeline research-agent: 4 checkpoint(s)")
    assert any("[rolled back]" in line for line in lines)
    assert lines[-1] == "The reviewed laptop wins."
    assert (tmp_path / "runs.db").exists()
    again = subprocess.run(
        [sys.executable, "-c", "import agentrewind; t = agentrewind.Timeline('research-agent', "
         "store='sqlite:///runs.db'); print(t.get_state(), len(t))"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert again.stdout.strip() == "{'summary': 'The reviewed laptop wins.'} 7"
