"""Durable queues (issue 27) across real worker processes and a real SIGKILL, on every store.

Three `agentrewind worker --queue ...` processes serve five queues at once while this process
enqueues: 30 runs with `concurrency=3` never overlap more than 3 (start and end times logged
by the runs themselves, fsynced), each runs once; `limiter=(5, 2.0)` never starts more than 5
in any 2 s window; priorities are served lower first behind a running blocker; a partitioned
queue runs one run per key at a time; a duplicate is refused naming its holder; a worker
SIGKILLed inside a run's second step: the run finishes on another worker with its first
step replayed, and the queue's only slot comes back for the next run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import backend_url, server_sessions, settle, unique
from _queueapp import QUEUES, declare

import agentrewind
from agentrewind.errors import QueueDeduplicatedError

HERE = Path(__file__).parent
SLACK = 0.5
"""Seconds between a worker taking a run and the run logging its start (opening the run,
replaying its input) on a loaded 2-core machine; no limiter at all starts 12 in ~0.2 s."""


@pytest.fixture(params=["sqlite", "redis", "redis-cluster", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "redis-cluster":
        yield f"{request.getfixturevalue('redis_cluster')}?namespace={unique('q')}"
        return
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with backend_url(request.param, tmp_path, redis_url, pg) as u:
        yield u


def _workers(url: str, tmp_path: Path, n: int) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "AR_STORE": url, "AR_LOG": str(tmp_path / "log"), "AR_LEASE_TTL": "2"}
    env["AR_MARK"] = str(tmp_path)
    queues = [arg for q in QUEUES for arg in ("--queue", q)]
    command = [sys.executable, "-m", "agentrewind", "worker", "_queueapp:mw", *queues]
    return [
        subprocess.Popen(
            [*command, "-c", "8", "--poll", "0.05", "--no-recover"],
            env=env,
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]


def _events(tmp_path: Path) -> list[tuple[str, str, str, float, int]]:
    path = tmp_path / "log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        event, queue, run, at, pid = line.split()
        out.append((event, queue, run, float(at), int(pid)))
    return out


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = peak = 0
    for _, delta in edges:
        running += delta
        peak = max(peak, running)
    return peak


def _intervals(
    events: list[tuple[str, str, str, float, int]], queue: str, killed_at: float
) -> dict[tuple[str, int], tuple[float, float]]:
    """Each execution of a run of `queue` (by run and worker pid): when it started and
    ended (an execution the SIGKILL cut short ended then)."""
    starts = {(r, p): t for e, q, r, t, p in events if e == "start" and q == queue}
    ends = {(r, p): t for e, q, r, t, p in events if e == "end" and q == queue}
    return {k: (t, ends.get(k, killed_at)) for k, t in starts.items()}


def test_three_workers_honour_every_limit_and_survive_a_sigkill(url: str, tmp_path: Path) -> None:
    mw = agentrewind.Middleware(url)
    app = declare(mw)
    q, job, killable = app["queues"], app["job"], app["killable"]
    workers = _workers(url, tmp_path, 3)
    try:
        # The blocker holds prio's only slot while the prioritised runs are enqueued.
        blocker = q["prio"].enqueue(job, "prio", "blocker", 1.0)
        _wait(lambda: any(e[2] == "blocker" for e in _events(tmp_path)), 30, "the blocker")
        prio = [("p3", 3), ("p1a", 1), ("p2", 2), ("p0", 0), ("p1b", 1)]
        handles = [q["prio"].enqueue(job, "prio", tag, 0.01, priority=p) for tag, p in prio]
        handles.append(blocker)
        handles += [q["c3"].enqueue(job, "c3", f"c{i}", 0.05) for i in range(30)]
        handles += [q["lim"].enqueue(job, "lim", f"l{i}", 0.0) for i in range(12)]
        for i in range(3):
            for user in ("ann", "bob", "cid"):
                handles.append(
                    q["users"].enqueue(job, "users", f"{user}-{i}", 0.05, partition_key=user)
                )
        dedup = q["c3"].enqueue(job, "c3", "held", 0.5, dedup_id="once")
        with pytest.raises(QueueDeduplicatedError) as caught:
            q["c3"].enqueue(job, "c3", "dup", 0.0, dedup_id="once")
        assert caught.value.run_id == dedup.run_id
        handles.append(dedup)

        # A worker dies inside step two of the kill queue's run; the next run waits behind it.
        killed = q["kill"].enqueue(killable, "k")
        after = q["kill"].enqueue(job, "kill", "after", 0.0)
        _wait(lambda: any(e[0] == "hang" for e in _events(tmp_path)), 30, "the hang")
        (pid,) = {e[4] for e in _events(tmp_path) if e[0] == "hang"}
        victim = next(w for w in workers if w.pid == pid)
        before = server_sessions(url)
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.communicate()
        settle(url, before)

        results = {h.run_id: h.result(timeout=60) for h in handles}
        assert len(results) == len(handles)
        assert killed.result(timeout=60) == ["k", "k"] and after.result(timeout=60) == "after"
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        outputs = [w.communicate(timeout=30) for w in workers]
        mw.close()
    events = _events(tmp_path)
    # Each run ran once, but those the killed worker had started: a run whose body ended
    # there but whose result was not yet recorded runs again elsewhere (at least once).
    victims = {r for e, _, r, _, p in events if e == "start" and p == pid}
    starts = Counter(r for e, _, r, _, _ in events if e == "start")
    assert all(n == 1 or (n == 2 and r in victims) for r, n in starts.items()), starts
    assert len(starts) == len(handles) + 1  # and `after`; `k` logs steps, not a start

    c3 = _intervals(events, "c3", killed_at)
    assert len({r for r, _ in c3}) == 31 and _max_overlap(list(c3.values())) <= 3

    lim = sorted(t for e, q_, _, t, _ in events if e == "start" and q_ == "lim")
    assert len(lim) == 12
    assert all(lim[i + 5] - lim[i] >= 2.0 - SLACK for i in range(len(lim) - 5)), lim
    assert lim[-1] - lim[0] >= 4.0 - SLACK  # three windows: 5, 5 and 2 starts

    order = [r for e, q_, r, _, _ in sorted(events, key=lambda e: e[3])
             if e == "start" and q_ == "prio"]  # fmt: skip
    assert list(dict.fromkeys(order)) == ["blocker", "p0", "p1a", "p1b", "p2", "p3"]

    users = _intervals(events, "users", killed_at)
    assert len({r for r, _ in users}) == 9
    for user in ("ann", "bob", "cid"):
        mine = [iv for (r, _), iv in users.items() if r.startswith(user)]
        assert _max_overlap(mine) == 1

    # The killed run: step one ran once (replayed after the kill), step two twice (the
    # killed attempt and the one that finished); it ran in two workers.
    kill = [(e, p) for e, q_, r, _, p in events if q_ == "kill" and r == "k"]
    assert [e for e, _ in kill].count("step1") == 1
    assert [e for e, _ in kill].count("step2") == 2
    assert len({p for _, p in kill}) == 2
    for w, (out, err) in zip(workers, outputs, strict=True):
        if w.pid != pid:
            assert w.returncode == 0, f"worker failed:\n{out}\n{err}"
            assert "Traceback" not in err, err
