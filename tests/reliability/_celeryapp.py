"""A Celery app that runs an agentrewind workflow per task (the "Running on Celery" test).

Environment: AR_BROKER (a Redis broker URL), AR_STORE (the agentrewind store), AR_EFFECTS
(side-effect log: one `tag pid` line per execution, fsynced), AR_GATE (step two waits in its
first execution while this file is missing: the test SIGKILLs the pool process there).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery

import agentrewind

app = Celery("agentrewind_celery_test", broker=os.environ["AR_BROKER"])
app.conf.update(
    task_acks_late=True,  # acknowledge after the task ran, not when it was received
    task_reject_on_worker_lost=True,  # a killed worker process: the broker redelivers
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)

middleware = agentrewind.Middleware(os.environ["AR_STORE"], lease_ttl=5)


def effect(tag: str) -> str:
    fd = os.open(os.environ["AR_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tag} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return tag


@middleware.step("reserve")
def reserve(order: str) -> str:
    return effect(f"{order}:1")


@middleware.step("charge")
def charge(order: str) -> str:
    effect(f"{order}:2")
    gate = Path(os.environ["AR_GATE"])
    if not gate.exists():  # the first execution: wait here to be killed
        gate.touch()
        time.sleep(120)
    return f"{order}:2"


@middleware.step("ship")
def ship(order: str) -> str:
    return effect(f"{order}:3")


@middleware.workflow("fulfil")
def fulfil(order: str) -> list[str]:
    return [reserve(order), charge(order), ship(order)]


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True)
def fulfil_task(self: object, order: str) -> list[str]:
    """Run the workflow with the task's id as the run id: a redelivery resumes the run."""
    return fulfil.run(order, run_id=self.request.id)  # type: ignore[attr-defined]
