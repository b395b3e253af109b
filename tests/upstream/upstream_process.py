"""Running an upstream suite in a child pytest: a crash or a hang is reported as one, and fails.

A child that dies (a segmentation fault, SIGKILL) or hangs leaves a partial junit report (or
none); read as it is, it would pass for a list of failing tests. `run_pytest` says what
happened instead: the exit status or signal and the end of the child's output, where pytest's
faulthandler prints the fatal trace.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

__all__ = ["SUITE_TIMEOUT", "run_pytest"]

SUITE_TIMEOUT = float(os.environ.get("AGENTREWIND_UPSTREAM_TIMEOUT", "3600"))
"""Seconds one run of a suite may take before it counts as hung."""


def _tail(output: str | bytes | None, lines: int = 40) -> str:
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return "\n".join((output or "").splitlines()[-lines:])


def run_pytest(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> str | None:
    """Run a pytest command line; None when pytest ended on its own, else what went wrong.

    pytest's own exit statuses (0 passed, 1 tests failed, 5 none collected) are normal ends;
    any other status, a signal, or no exit within `SUITE_TIMEOUT` is a crash or a hang.
    """
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=SUITE_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return f"hung: no exit after {SUITE_TIMEOUT:.0f}s; its last output:\n{_tail(exc.output)}"
    code = proc.returncode
    if code in (0, 1, 5):
        return None
    if code < 0:
        how = f"killed by signal {-code} ({signal.Signals(-code).name})"
    else:
        how = f"exit status {code}"
    return f"crashed: {how}; its last output (the fatal trace):\n{_tail(proc.stdout)}"
