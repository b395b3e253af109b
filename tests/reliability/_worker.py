"""Child processes for the reliability tests (run as `python _worker.py MODE ...`).

Modes:
    crash URL RUN_ID EFFECTS STEPS
        Drive a run of STEPS plain-Python steps. Each step appends `index key pid` to EFFECTS
        (one `write` + `fsync`) before it returns, so the parent can count side effects even
        when this process is SIGKILLed. Prints a JSON summary when the run finished.
    hold URL RUN_ID LEASE_TTL
        Open the run, record two steps, print `ready`, then wait for one line on stdin and try
        one more step; prints `finished` or `lost: <error>` (the lease was taken over).
    lock DB SECONDS
        Hold SQLite's write lock (`BEGIN IMMEDIATE`) on DB from another connection, print
        `locked`, sleep SECONDS, commit, print `released`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

import agentrewind


def _effect(effects: str, i: int) -> dict[str, int]:
    time.sleep(0.002)  # the step's own work, before its side effect
    line = f"{i} {agentrewind.idempotency_key()} {os.getpid()}\n".encode()
    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"i": i, "square": i * i}


def crash(url: str, run_id: str, effects: str, steps: int) -> None:
    mw = agentrewind.Middleware(url)
    with mw.run(run_id) as run:
        results = [run.step("work", _effect, effects, i) for i in range(steps)]
        outcomes = [e.outcome for e in run.events]
    ok = results == [{"i": i, "square": i * i} for i in range(steps)]
    summary = {
        "ok": ok,
        "replayed": outcomes.count("replayed"),
        "executed": outcomes.count("executed"),
        "reruns": run.metrics.reruns,
    }
    mw.close()
    print(json.dumps(summary), flush=True)


def hold(url: str, run_id: str, lease_ttl: float) -> None:
    mw = agentrewind.Middleware(url, lease_ttl=lease_ttl)
    try:
        with mw.run(run_id) as run:
            run.step("before", lambda i: i, 1)
            run.step("before", lambda i: i, 2)
            print("ready", flush=True)
            sys.stdin.readline()
            try:
                run.step("after", lambda i: i, 3)
            except agentrewind.RunLockedError as exc:
                print(f"lost: {exc}", flush=True)
                run.status = "abandoned"
                return
        print("finished", flush=True)
    finally:
        mw.close()


def lock(db: str, seconds: float) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()
    print("released", flush=True)


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "crash":
        crash(args[0], args[1], args[2], int(args[3]))
    elif mode == "hold":
        hold(args[0], args[1], float(args[2]))
    elif mode == "lock":
        lock(args[0], float(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
