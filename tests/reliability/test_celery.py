"""Running on Celery: a redelivered task resumes its run with replay (DESIGN §11).

A real Celery worker pool (prefork, two processes) and a real Redis broker (the test
session's own server, never a user's): a task declared `acks_late=True,
reject_on_worker_lost=True` runs a workflow with `run_id=task.request.id`; the pool process
is SIGKILLed inside the second of three steps; the broker redelivers the task to another
pool process, which resumes the run: the first step's side effect happened once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import agentrewind

pytest.importorskip("celery")
HERE = Path(__file__).parent


def _effects(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    return [(tag, int(pid)) for tag, pid in (ln.split() for ln in path.read_text().splitlines())]


def test_a_task_killed_in_its_second_step_is_resumed_by_the_redelivery(
    redis_url: str, tmp_path: Path
) -> None:
    effects, gate = tmp_path / "effects.log", tmp_path / "gate"
    broker = redis_url.rsplit("/", 1)[0] + "/9"  # the session's own server, a db of its own
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {**os.environ, "AR_BROKER": broker, "AR_STORE": store, "AR_EFFECTS": str(effects),
           "AR_GATE": str(gate), "PYTHONPATH": str(HERE)}  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "_celeryapp", "worker", "--pool=prefork",
         "--concurrency=2", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--loglevel=INFO", "-n", f"w{os.getpid()}@%h"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        send = "import _celeryapp as a; print(a.fulfil_task.delay('A-17').id)"
        task_id = subprocess.run([sys.executable, "-c", send], env=env, capture_output=True,
                                 text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(tag == "A-17:2" for tag, _ in _effects(effects)):
            assert time.monotonic() < deadline and worker.poll() is None, _effects(effects)
            time.sleep(0.05)
        victim = next(pid for tag, pid in _effects(effects) if tag == "A-17:2")
        os.kill(victim, signal.SIGKILL)  # the pool process, inside step two
        with agentrewind.connect(store) as runs:
            while (info := runs.get_run(task_id)) is None or info.status != "completed":
                assert time.monotonic() < deadline and worker.poll() is None, _effects(effects)
                time.sleep(0.1)
            replayed = info.metrics.replay_hits
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            _, err = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
    counts = Counter(tag for tag, _ in _effects(effects))
    assert counts == Counter({"A-17:1": 1, "A-17:2": 2, "A-17:3": 1}), (counts, err[-3000:])
    pids = {tag: pid for tag, pid in _effects(effects)}
    assert pids["A-17:3"] != victim  # finished by another pool process
    assert replayed >= 2  # the workflow's arguments and `reserve` replayed
