"""A user's module with workflows, imported by the recovery tests' child processes.

Environment: AR_STORE (store URL), AR_EFFECTS (side-effect log: one `tag pid` line per
execution, fsynced), AR_LEASE_TTL, AR_HANG=1 (step two announces itself and hangs, to be
SIGKILLed there), AR_SLOW (seconds step two takes), AR_GATE (step two waits for this file).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import agentrewind

mw = agentrewind.Middleware(
    os.environ["AR_STORE"], lease_ttl=float(os.environ.get("AR_LEASE_TTL", "2"))
)


def effect(tag: str) -> str:
    line = f"{tag} {os.getpid()}\n".encode()
    fd = os.open(os.environ["AR_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tag


@mw.step("two")
def two(name: str) -> str:
    effect(f"{name}:2")
    if os.environ.get("AR_HANG") == "1":
        sys.stdout.write(f"in-two {name}\n")  # one write: threads print whole lines
        sys.stdout.flush()
        time.sleep(120)
    time.sleep(float(os.environ.get("AR_SLOW", "0")))
    gate = os.environ.get("AR_GATE")
    if gate:
        print(f"waiting {name}", flush=True)
        while not Path(gate).exists():
            time.sleep(0.02)
    return name


@mw.workflow("three")
def three(name: str, *, times: int = 1) -> dict[str, object]:
    one = mw.step("one")(effect)(f"{name}:1")
    mid = two(name)
    last = mw.step("three")(effect)(f"{name}:3")
    return {"steps": [one, mid, last], "times": times}


def main() -> None:
    """`python _wfapp.py run RUN...` runs `three` for each id (in threads); `recover`."""
    import json
    import threading

    command, *ids = sys.argv[1:]
    if command == "run":
        threads = [
            threading.Thread(target=three.run, args=(i,), kwargs={"run_id": i, "times": 2})
            for i in ids
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("done", flush=True)
    elif command == "recover":
        report = mw.recover()
        print(json.dumps([[o.run_id, o.outcome] for o in report.outcomes]), flush=True)
    elif command == "run-one":
        try:
            print("result", json.dumps(three.run(ids[0], run_id=ids[0])), flush=True)
        except agentrewind.RunCancelledError as exc:
            print("cancelled", type(exc).__name__, flush=True)


if __name__ == "__main__":
    main()
