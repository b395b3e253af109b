"""Every command the demo suggests works as typed, from the shell the demo ran in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("agentrewind")


def _hints(stdout: str) -> list[str]:
    return [line.split("try:", 1)[1].strip() for line in stdout.splitlines() if "try:" in line]


@pytest.mark.parametrize("on_path", [True, False], ids=["venv-activated", "venv-not-on-path"])
def test_demo_hints_run_as_typed(tmp_path: Path, on_path: bool) -> None:
    if not SCRIPT.exists():
        pytest.skip("the agentrewind console script is not installed in this environment")
    # Keep the system directories (sh, python for other tools) but drop every directory with
    # an `agentrewind` (this venv's, nox's outer one) unless the user "activated" this venv:
    # the hint must name the script so that it runs either way.
    dirs = [
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if d and not (Path(d) / "agentrewind").exists()
    ]
    if on_path:
        dirs.insert(0, str(SCRIPT.parent))
    env = {**os.environ, "PATH": os.pathsep.join(dirs)}
    env.pop("AGENTREWIND_STORE", None)
    demo = subprocess.run(
        [str(SCRIPT), "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert demo.returncode == 0, demo.stderr
    hints = _hints(demo.stdout)
    assert hints, demo.stdout
    for hint in hints:
        assert hint.startswith("agentrewind ") == on_path, hint
        ran = subprocess.run(
            hint, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
        )
        assert ran.returncode == 0, (hint, ran.stderr)
        assert "<- main (HEAD)" in ran.stdout, ran.stdout
