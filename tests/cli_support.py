"""Running the `agentrewind` command as a subprocess in tests, one command or many per process.

`batch` runs several command lines in one fresh interpreter (each through `main`, with its own
stdout, stderr and exit code), so a test checks many behaviours for the price of one start-up;
`agentrewind` runs the real command once, for what only a real process shows (Ctrl-C,
encodings, `python -m`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

DRIVER = """
import contextlib, io, json, sys
from agentrewind.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors, --help, --version
            code = exc.code if isinstance(exc.code, int) else 1
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


@dataclass
class Result:
    """What one command line did."""

    code: int
    out: str
    err: str

    def json(self) -> object:
        """stdout as JSON."""
        return json.loads(self.out)

    def ok(self) -> Result:
        """Assert success and no traceback; return self."""
        assert self.code == 0, (self.code, self.err)
        assert "Traceback" not in self.err
        return self


def env(**extra: str) -> dict[str, str]:
    """The test environment with colour off and no default store from outside."""
    base = {k: v for k, v in os.environ.items() if k != "AGENTREWIND_STORE"}
    return {**base, "NO_COLOR": "1", **extra}


def batch(*commands: list[str], cwd: str | None = None, **extra: str) -> list[Result]:
    """Run each command line through `main` in one subprocess; results in order."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(list(commands))],
        capture_output=True, text=True, timeout=120, env=env(**extra), cwd=cwd,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [Result(*r) for r in json.loads(done.stdout)]


def agentrewind(
    *args: str, cwd: str | None = None, stdin: str | None = None, **extra: str
) -> Result:
    """Run `python -m agentrewind ARGS` as its own process."""
    done = subprocess.run(
        [sys.executable, "-m", "agentrewind", *args],
        capture_output=True, text=True, timeout=120, env=env(**extra), cwd=cwd,
        input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
    )  # fmt: skip
    return Result(done.returncode, done.stdout, done.stderr)
