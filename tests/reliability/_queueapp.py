"""A user's module with queues, imported by the queue tests' worker processes.

Environment: AR_STORE (store URL), AR_LOG (event log: one `event queue run time pid` line
per event, fsynced: a SIGKILL loses none), AR_LEASE_TTL, AR_MARK (a directory: the first
execution of `killable`'s step two leaves a mark there and hangs, to be SIGKILLed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import agentrewind


def log(event: str, queue: str, run: str) -> None:
    line = f"{event} {queue} {run} {time.time():.6f} {os.getpid()}\n".encode()
    fd = os.open(os.environ["AR_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


QUEUES = ("c3", "lim", "prio", "users", "kill")


def declare(mw: agentrewind.Middleware) -> dict[str, Any]:
    """Declare the queues and register the workflows on `mw` (workers and the test alike)."""
    queues = {
        "c3": mw.queue("c3", concurrency=3),
        "lim": mw.queue("lim", limiter=(5, 2.0)),
        "prio": mw.queue("prio", concurrency=1, priority=True),
        "users": mw.queue("users", concurrency=1, partitioned=True),
        "kill": mw.queue("kill", concurrency=1),
    }

    @mw.workflow("job")
    def job(queue: str, tag: str, sleep: float = 0.05) -> str:
        log("start", queue, tag)
        time.sleep(sleep)
        log("end", queue, tag)
        return tag

    @mw.step("one")
    def one(tag: str) -> str:
        log("step1", "kill", tag)
        return tag

    @mw.step("two")
    def two(tag: str) -> str:
        log("step2", "kill", tag)
        mark = Path(os.environ["AR_MARK"]) / tag
        if not mark.exists():
            mark.touch()
            log("hang", "kill", tag)
            time.sleep(120)
        return tag

    @mw.workflow("killable")
    def killable(tag: str) -> list[str]:
        return [one(tag), two(tag)]

    return {"queues": queues, "job": job, "killable": killable}


if "AR_STORE" in os.environ:
    mw = agentrewind.Middleware(
        os.environ["AR_STORE"], lease_ttl=float(os.environ.get("AR_LEASE_TTL", "2"))
    )
    app = declare(mw)
