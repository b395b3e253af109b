"""Running pai_flows in a new process (the crash tests' first process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FLOWS = Path(__file__).with_name("pai_flows.py")


def in_new_process(*argv: str, crash: bool = False) -> Any:
    """Run `pai_flows.main(argv)` in a new process; its JSON summary, or -9 when killed."""
    code = (
        f"import sys; sys.path.insert(0, {str(FLOWS.parent)!r}); "
        f"import pai_flows; pai_flows.main({list(argv)!r})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    if crash:
        assert proc.returncode == -9, proc.stderr[-3000:]
        return proc.returncode
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
