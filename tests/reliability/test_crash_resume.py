"""SIGKILL a 200-step run 20 times at random moments; the resumed run finishes, exactly once.

Semantics proved (policy `rerun`, the default): a step the journal marks completed ran, and
ran once, unless a kill landed after its side effect but before its `completed` record was
written. Such a step was `started`-not-completed in the journal at that kill and runs again on
resume (at-least-once for the in-flight step only). Every execution of a step sees the same
`idempotency_key()`, so a downstream that deduplicates on it applies the effect exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import backend_url, spawn

import agentrewind

STEPS = 200
KILLS = 20


@pytest.fixture(params=["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    pg_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with backend_url(request.param, tmp_path, redis_url, pg_url) as u:
        yield u


def _effects(path: Path) -> list[tuple[int, str, int]]:
    """Parse the side-effect log: one `index key pid` line per execution, none torn."""
    if not path.exists():
        return []
    data = path.read_text()
    assert data == "" or data.endswith("\n"), f"torn side-effect line: {data[-80:]!r}"
    rows = []
    for line in data.splitlines():
        i, key, pid = line.split(" ")
        rows.append((int(i), key, int(pid)))
    return rows


def _journal(store: agentrewind.Store, run_id: str, effects_path: str) -> dict[str, list[int]]:
    """Load the run (checksums verified) and group step indexes by status."""
    mw = agentrewind.Middleware("memory://")
    probe = agentrewind.Run(mw, "probe")
    by_key = {
        f"custom:work:{probe.digest({'args': [effects_path, i], 'kwargs': {}})}#0": i
        for i in range(STEPS)
    }
    status: dict[str, list[int]] = defaultdict(list)
    for record in store.load_steps(run_id):
        key, _, attempt = record.key.partition("@")  # `<key>@<n>`: a replaced attempt, kept
        assert key in by_key, f"unexpected record {record.key}"
        i = by_key[key]
        status[f"kept {record.status}" if attempt else record.status].append(i)
        if record.status == "completed":
            assert record.output == {"i": i, "square": i * i}
    return status


def _spawn_and_kill(
    rng: random.Random, url: str, run_id: str, effects: Path
) -> tuple[int | None, str]:
    """Start a worker; SIGKILL it at a random moment. Returns (None, out) if it finished."""
    before = len(_effects(effects))
    proc = spawn("crash", url, run_id, str(effects), str(STEPS))
    if rng.random() < 0.2:
        # Anywhere from interpreter start-up to the first new step (lease, load, first write).
        deadline = time.monotonic() + rng.uniform(0.01, 0.4)
        target, delay = before + 1, 0.0
    else:
        # After 1-6 new side effects, then 0-2 ms more: lands before, inside and after the
        # step function, between its side effect and its `completed` record, and in writes.
        target = before + rng.randint(1, 6)
        delay = rng.choice([0.0, 0.0, rng.uniform(0, 0.002)])
        deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if len(_effects(effects)) >= target:
            if delay:
                time.sleep(delay)
            break
        time.sleep(0.0003)
    if proc.poll() is not None:
        out, err = proc.communicate()
        assert proc.returncode == 0, f"worker failed (rc {proc.returncode}):\n{err}"
        return None, out
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid, ""


def test_sigkill_twenty_times_then_finish(url: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("AGENTREWIND_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    run_id = f"crash-{seed}"
    effects = tmp_path / "effects.log"
    store = agentrewind.connect(url)
    # Per killed process: the step whose side effect it made but whose completion it never
    # recorded (the only execution that may be repeated), or None.
    cut_short: list[int | None] = []
    in_flight_kills = 0
    killed_ids: set[str] = set()  # the `started` records a kill left behind
    try:
        for _ in range(KILLS):
            pid, out = _spawn_and_kill(rng, url, run_id, effects)
            assert pid is not None, f"run finished before {KILLS} kills: {out}"
            status = _journal(store, run_id, str(effects))  # every record passes its checksum
            completed, started = set(status["completed"]), set(status["started"])
            assert not status["failed"]
            assert len(started) <= 1, f"more than one step in flight: {started}"
            in_flight_kills += bool(started)
            killed_ids |= {r.step_id for r in store.load_steps(run_id) if r.status == "started"}
            assert completed <= {i for i, _, _ in _effects(effects)}, "completed, never ran"
            mine = [i for i, _, p in _effects(effects) if p == pid]
            assert set(mine[:-1]) <= completed, "only the last step of a process may be cut"
            last = mine[-1] if mine and mine[-1] not in completed else None
            assert last is None or last in started, f"step {last} ran but is not in flight"
            cut_short.append(last)
        pid, out = _run_to_end(url, run_id, effects)
        summary = json.loads(out)
        assert summary["ok"], f"final results differ: {summary}"
        assert summary["replayed"] + summary["executed"] == STEPS

        status = _journal(store, run_id, str(effects))
        assert sorted(status["completed"]) == list(range(STEPS))
        assert not status["started"] and not status["failed"]
        # Every attempt a kill cut short survives its resume, linked to the one replacing it.
        records = store.load_steps(run_id)
        kept = {r.step_id: r for r in records if "@" in r.key}
        # A `started` record seen right after a kill may still complete: PostgreSQL commits a
        # transaction whose COMMIT reached it before the client died. Then that attempt
        # finished (same step id, completed) and nothing was cut short.
        finished = {r.step_id for r in records if "@" not in r.key and r.status == "completed"}
        assert set(kept) == killed_ids - finished and not status["kept failed"]
        by_id = {r.step_id: r for r in records}
        for record in kept.values():
            rerun = by_id[record.meta["replaced_by"]]
            assert rerun.meta["replaces"]["step_id"] == record.step_id
            assert rerun.meta["resumed"]["why"] == "crashed"
        info = store.get_run(run_id)
        assert info is not None and info.status == "completed"

        rows = _effects(effects)
        runs = Counter(i for i, _, _ in rows)
        repeats = Counter(i for i in cut_short if i is not None)
        # Exactly once, except a step cut short by a kill, which ran once more per such kill.
        assert {i: runs[i] for i in range(STEPS)} == {i: 1 + repeats[i] for i in range(STEPS)}
        keys: dict[int, set[str]] = defaultdict(set)
        for i, key, _ in rows:
            keys[i].add(key)
        assert all(len(k) == 1 for k in keys.values()), "the idempotency key changed"
        assert len({min(k) for k in keys.values()}) == STEPS, "keys must differ by step"
        if url.startswith("sqlite"):
            db = url.split("://", 1)[1].split("?", 1)[0][1:]
            conn = sqlite3.connect(db)
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            conn.close()
        print(
            f"seed {seed}: {KILLS} kills, {in_flight_kills} left a step in flight, "
            f"{sum(repeats.values())} cut between side effect and completion (run again, same "
            f"idempotency key); final run: {summary}"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n(rerun with AGENTREWIND_CRASH_SEED={seed})") from exc
    finally:
        store.close()


def _run_to_end(url: str, run_id: str, effects: Path) -> tuple[int, str]:
    proc = spawn("crash", url, run_id, str(effects), str(STEPS))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"resumed run failed:\n{err}"
    return proc.pid, out
