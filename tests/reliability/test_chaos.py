"""Chaos: SIGKILL at random points, SIGSTOP past the lease then SIGCONT, forced deletes.

For the core journal, the timeline and the LangGraph saver (`lease=True`), on SQLite,
Redis and PostgreSQL. After every try the store is checked for the invariants of issue 11:

- no finished step re-run (only the one step in flight at a kill or stop may run twice);
- no record written by a stale owner (a stopped owner that wakes up writes nothing);
- no torn head (every head names a stored checkpoint that is the last one written);
- every deleted run fully gone (no row, key or index entry left, nothing written back).

Each test prints `CHAOS <test> <store> tries=<n> anomalies=<k>` (run with `-s` to see the
table) and asserts no anomaly. Tries are kept modest so the session stays within minutes;
raise `AGENTREWIND_CHAOS_TRIES` for a longer soak.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import backend_url, server_sessions, settle, unique

import agentrewind

# Timeouts and lease expiries measured to the second: alone, not beside an xdist worker.
pytestmark = pytest.mark.solo

WORKER = str(Path(__file__).with_name("_chaos_worker.py"))
TRIES = int(os.environ.get("AGENTREWIND_CHAOS_TRIES", "2"))
LEASE = 0.6  # the stopped owner's lease; the parent waits past it before taking over


@pytest.fixture(params=["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    pg_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with backend_url(request.param, tmp_path, redis_url, pg_url) as u:
        # Postgres: a write waits 2s at most on a row lock, and the server ends a transaction
        # of ours its paused client left idle for 1s (half of it).
        yield f"{u}&lock_timeout=2" if request.param == "postgres" else u


def spawn(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"child said {line!r}, expected {prefix!r}; stderr:\n{err}")
    return line.strip()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def report(name: str, url: str, tries: int, anomalies: list[str], locked: int = 0) -> None:
    store = url.split(":", 1)[0]
    print(f"\nCHAOS {name} {store} tries={tries} anomalies={len(anomalies)} locked_out={locked}")
    assert not anomalies, anomalies


def effects(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(int(i), int(p)) for i, p in (ln.split() for ln in path.read_text().splitlines())]


def quick(url: str) -> str:
    """The URL for the taking-over process: on SQLite it gives up waiting for the lock fast
    (on Postgres the fixture's `lock_timeout=2` is already short)."""
    return f"{url}&busy_timeout=0.5" if url.startswith("sqlite") else url


def locked_out(url: str, err: str) -> bool:
    """SQLite and Postgres: the owner was stopped inside a write transaction.

    SQLite's file lock then keeps every other connection out until the owner resumes, so no
    write can interleave with it; the taker-over fails with `StoreBusyError`. On Postgres the
    stopped owner's transaction keeps the lease row locked: when it stopped between two
    statements of its pipeline (the server waits for the rest, no timeout of PostgreSQL 15
    ends that), the taker's `lock_timeout` runs out and it fails with `StoreBusyError`
    naming the run; when it stopped idle in its transaction, the server ends that
    transaction after the idle timeout and the taker goes on. The try goes on as a kill (the
    stopped owner is resumed and killed), and is counted in `locked_out`.
    """
    return url.startswith(("sqlite", "postgresql")) and "StoreBusyError" in err


def unstick(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.communicate()


def stop_past_lease(proc: subprocess.Popen[str], rng: random.Random, span: float) -> None:
    """Let `proc` run a random while, SIGSTOP it and wait until its lease has run out."""
    time.sleep(rng.uniform(0.05, span))
    proc.send_signal(signal.SIGSTOP)
    time.sleep(LEASE + 0.4)


# -- the core journal --------------------------------------------------------------------------
def _journal_anomalies(
    store: agentrewind.Store, run_id: str, steps: int, done: list[tuple[int, int]], a: int, b: int
) -> list[str]:
    bad: list[str] = []
    current = [r for r in store.load_steps(run_id) if "@" not in r.key]  # not kept attempts
    records = {r.output["i"]: r for r in current if r.name == "work"}
    runs = Counter((i, p) for i, p in done)
    by_b = {i for i, p in done if p == b}
    by_a = {i for i, p in done if p == a}
    for i in range(steps):
        rec = records.get(i)
        if rec is None or rec.status != "completed":
            bad.append(f"step {i} not completed")
            continue
        writer = rec.output["pid"]
        if i in by_b and writer != b:
            bad.append(f"step {i}: run by the new owner, record written by the stale one")
        if writer == a and i in by_b:
            bad.append(f"step {i}: finished by the first owner, run again by the second")
    bad += [f"step {i} ran {n}x in pid {p}" for (i, p), n in runs.items() if n > 1]
    if len(by_a & by_b) > 1:
        bad.append(f"{len(by_a & by_b)} steps ran in both owners (only one was in flight)")
    info = store.get_run(run_id)
    if info is None or info.status != "completed":
        bad.append(f"run status {info and info.status}")
    return bad


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_journal(url: str, tmp_path: Path, fault: str) -> None:
    rng = random.Random()
    anomalies: list[str] = []
    locked = 0
    store = agentrewind.connect(url)
    try:
        for t in range(TRIES):
            run_id, log = unique("job"), tmp_path / f"effects-{t}"
            steps = 25
            a = spawn("journal", url, run_id, log, steps, LEASE, 0.02)
            expect(a, "ready")
            if fault == "sigkill":
                time.sleep(rng.uniform(0.05, 0.45))
                a.kill()
                a.communicate()
            else:
                stop_past_lease(a, rng, 0.45)
            b = spawn("journal", quick(url), run_id, log, steps, 5.0, 0.0)
            code, out, err = finish(b)
            stopped = fault == "sigstop"
            if code != 0 and stopped and locked_out(url, err):
                locked, stopped = locked + 1, False
                unstick(a)
                b = spawn("journal", url, run_id, log, steps, 5.0, 0.0)
                code, out, err = finish(b)
            if code != 0 or "done" not in out:
                anomalies.append(f"try {t}: the new owner failed: {out} {err[-500:]}")
                continue
            if stopped:
                a.send_signal(signal.SIGCONT)
                code_a, out_a, _ = finish(a)
                if code_a != 3 or "lost LeaseLostError" not in out_a:
                    anomalies.append(f"try {t}: the stale owner said {out_a!r} ({code_a})")
            anomalies += [
                f"try {t}: {x}"
                for x in _journal_anomalies(store, run_id, steps, effects(log), a.pid, b.pid)
            ]
    finally:
        store.close()
    report(f"journal-{fault}", url, TRIES, anomalies, locked)


def test_forced_delete_mid_run_leaves_nothing(url: str, tmp_path: Path) -> None:
    rng = random.Random()
    anomalies: list[str] = []
    store = agentrewind.connect(url)
    try:
        for t in range(TRIES):
            run_id = unique("doomed")
            a = spawn("journal", url, run_id, tmp_path / f"fx-{t}", 500, 5.0, 0.005)
            expect(a, "ready")
            time.sleep(rng.uniform(0.05, 0.4))
            try:
                store.delete_run(run_id)
                anomalies.append(f"try {t}: a leased run was deleted without force")
            except agentrewind.RunLockedError:
                pass
            store.delete_run(run_id, force=True)
            code, out, _ = finish(a)
            if code != 3 or "lost DataLostError" not in out:
                anomalies.append(f"try {t}: the owner said {out!r} ({code})")
            left = _leftovers(store, url, run_id)
            if left:
                anomalies.append(f"try {t}: left behind {left}")
    finally:
        store.close()
    report("forced-delete", url, TRIES, anomalies)


def _leftovers(store: agentrewind.Store, url: str, run_id: str) -> list[str]:
    left = []
    if store.get_run(run_id) is not None or store.load_steps(run_id):
        left.append("run or steps")
    if any(r.run_id == run_id for r in store.list_runs(limit=10_000)):
        left.append("listed")
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1].split("?", 1)[0]
        with sqlite3.connect(path) as conn:
            for table in ("ar_runs", "ar_steps", "ar_heads", "ar_leases"):
                n = conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,))
                if n.fetchone()[0]:
                    left.append(table)
    elif url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url.split("?", 1)[0]) as conn:
            for table in ("ar_runs", "ar_steps", "ar_heads", "ar_leases"):
                q = f"SELECT count(*) FROM {table} WHERE ns = %s AND run_id = %s"
                row = conn.execute(q, (store.namespace, run_id)).fetchone()
                if row is not None and row[0]:
                    left.append(table)
    else:
        client: Any = store.client  # type: ignore[attr-defined]
        keys = [k for k in client.scan_iter(match=f"*{run_id}*", count=1000)]
        left += [k.decode() for k in keys]
        index = f"{store.prefix}:{store.namespace}:runs"  # type: ignore[attr-defined]
        if client.zscore(index, run_id) is not None:
            left.append("index entry")
    return left


# -- the timeline -----------------------------------------------------------------------------
def _timeline_anomalies(store: agentrewind.Store, name: str, a: int, b: int | None) -> list[str]:
    bad: list[str] = []
    tl = agentrewind.Timeline(name, store=store)
    records = sorted(
        (r for r in store.load_steps(name) if r.kind == "checkpoint"), key=lambda r: r.seq
    )
    if not records:
        return ["no checkpoint"]
    heads = store.get_heads(name)
    head = heads.get("main")
    if head != records[-1].step_id:
        bad.append(f"torn head: main -> {head}, last checkpoint {records[-1].step_id}")
    nodes = {c.id: c for c in tl.checkpoints()}
    walked, cur = 0, nodes.get(head or "")
    while cur is not None and walked <= len(nodes):
        walked += 1
        cur = nodes.get(cur.parent_id) if cur.parent_id else None
        if cur is None:
            break
    if walked != len(records):
        bad.append(f"history of {walked} checkpoints, {len(records)} stored")
    if b is not None:
        pids = [tl.get_checkpoint(r.step_id).state["pid"] for r in records]
        first_b = pids.index(b) if b in pids else len(pids)
        if a in pids[first_b:]:
            bad.append("a checkpoint of the stale owner after the new owner's first")
    tl.close()
    return bad


def test_timeline_sigkill(url: str) -> None:
    rng = random.Random()
    anomalies: list[str] = []
    store = agentrewind.connect(url)
    try:
        for t in range(TRIES):
            name = unique("tl")
            before = server_sessions(url)
            a = spawn("timeline", url, name, 1000, LEASE, 0.002)
            expect(a, "ready")
            time.sleep(rng.uniform(0.1, 0.5))
            a.kill()
            a.communicate()
            settle(url, before)  # its last write, if the server had it whole, commits first
            anomalies += [f"try {t}: {x}" for x in _timeline_anomalies(store, name, a.pid, None)]
            try:  # the dead owner's lease is no obstacle: the next writer goes on at once
                with agentrewind.Timeline(name, store=store) as tl:
                    tl.checkpoint({"n": -1, "pid": os.getpid()})
            except agentrewind.RunLockedError as exc:
                anomalies.append(f"try {t}: takeover refused: {exc}")
    finally:
        store.close()
    report("timeline-sigkill", url, TRIES, anomalies)


def wrote(proc: subprocess.Popen[str]) -> bool:
    """Whether the timeline child says `written` next (False when it failed first)."""
    assert proc.stdout is not None
    return proc.stdout.readline().startswith("written")


def test_timeline_sigstop(url: str) -> None:
    rng = random.Random()
    anomalies: list[str] = []
    locked = 0
    store = agentrewind.connect(url)
    try:
        for t in range(TRIES):
            name = unique("tl")
            a = spawn("timeline", url, name, 1000, LEASE, 0.005)
            expect(a, "ready")
            stop_past_lease(a, rng, 0.4)
            b = spawn("timeline", quick(url), name, 5, 5.0, 0.0, 1)
            assert b.stdout is not None
            # (Postgres: the first write, not the open, waits on the stopped owner's rows)
            if not (b.stdout.readline().startswith("ready") and wrote(b)):
                _, out_b, err_b = finish(b)
                if not locked_out(url, err_b):
                    anomalies.append(f"try {t}: the new writer failed: {out_b} {err_b[-300:]}")
                    unstick(a)
                    continue
                locked += 1
                unstick(a)
                b = spawn("timeline", url, name, 5, 5.0, 0.0, 1)
                expect(b, "ready")
                expect(b, "written")
            # b holds the lease now
            if a.returncode is None:
                a.send_signal(signal.SIGCONT)
                code_a, out_a, _ = finish(a)
                if code_a != 3 or "lost" not in out_a:
                    anomalies.append(f"try {t}: the stale writer said {out_a!r} ({code_a})")
            assert b.stdin is not None
            b.stdin.write("go\n")
            b.stdin.flush()
            code_b, out_b, err_b = finish(b)
            if code_b != 0:
                anomalies.append(f"try {t}: the new writer failed: {out_b} {err_b[-300:]}")
            anomalies += [f"try {t}: {x}" for x in _timeline_anomalies(store, name, a.pid, b.pid)]
    finally:
        store.close()
    report("timeline-sigstop", url, TRIES, anomalies, locked)


def test_timeline_sigstop_past_a_new_owner_that_left(url: str) -> None:
    """A is stopped past its lease; B takes the timeline, checkpoints and closes (the lease is
    free again); A wakes: its next checkpoint is refused (`LeaseLostError`), B's head stays."""
    rng = random.Random()
    anomalies: list[str] = []
    locked = 0
    store = agentrewind.connect(url)
    try:
        for t in range(TRIES):
            name = unique("tl")
            a = spawn("timeline", url, name, 1000, LEASE, 0.005)
            expect(a, "ready")
            stop_past_lease(a, rng, 0.4)
            b = spawn("timeline", quick(url), name, 5, 5.0, 0.0)
            code_b, out_b, err_b = finish(b)
            if code_b != 0:
                if not locked_out(url, err_b):
                    anomalies.append(f"try {t}: the new writer failed: {out_b} {err_b[-300:]}")
                locked += 1
                unstick(a)
                continue
            head = store.get_heads(name).get("main")
            a.send_signal(signal.SIGCONT)
            code_a, out_a, _ = finish(a)
            if code_a != 3 or "lost LeaseLostError" not in out_a:
                anomalies.append(f"try {t}: the stale writer said {out_a!r} ({code_a})")
            if store.get_heads(name).get("main") != head:
                anomalies.append(f"try {t}: the stale writer moved the new owner's head")
            anomalies += [f"try {t}: {x}" for x in _timeline_anomalies(store, name, a.pid, b.pid)]
    finally:
        store.close()
    report("timeline-sigstop-left", url, TRIES, anomalies, locked)


# -- the LangGraph saver ------------------------------------------------------------------------
def _graph_anomalies(
    url: str, thread: str, nodes: int, done: list[tuple[int, int]], a: int, b: int
) -> list[str]:
    from agentrewind_langgraph import RewindSaver

    bad: list[str] = []
    cfg: Any = {"configurable": {"thread_id": thread}}
    with RewindSaver(url) as saver:
        latest = saver.get_tuple(cfg)
        history = list(saver.list(cfg))
    if latest is None:
        return ["no checkpoint"]
    items = latest.checkpoint["channel_values"].get("items", [])
    order = [int(x.split(":")[0]) for x in items]
    if order != list(range(nodes)):
        bad.append(f"final state runs nodes {order}")
    children = Counter(
        t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config
    )
    if any(n > 1 for n in children.values()):
        bad.append("history forked: two checkpoints share a parent")
    writer = {int(x.split(":")[0]): int(x.split(":")[1]) for x in items}
    ran: dict[int, set[int]] = defaultdict(set)
    for i, p in done:
        ran[i].add(p)
    for i, w in writer.items():
        if w == a and b in ran[i]:
            bad.append(f"node {i}: checkpointed by the first owner, run again by the second")
        if w != b and b in ran[i]:
            bad.append(f"node {i}: run by the new owner, stored result of the stale one")
    twice = [i for i, ps in ran.items() if len(ps) > 1]
    if len(twice) > 1:
        bad.append(f"nodes {twice} ran in both owners (only one was in flight)")
    return bad


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_langgraph_saver(url: str, tmp_path: Path, fault: str) -> None:
    pytest.importorskip("langgraph.graph")
    rng = random.Random()
    anomalies: list[str] = []
    locked = 0
    tries = max(TRIES // 2, 1)  # each try starts LangGraph in two processes
    for t in range(tries):
        thread, log, nodes = unique("thread"), tmp_path / f"lg-{t}", 20
        a = spawn("graph", url, thread, log, nodes, LEASE, 0.03)
        expect(a, "ready")
        if fault == "sigkill":
            time.sleep(rng.uniform(0.05, 0.5))
            a.kill()
            a.communicate()
        else:
            stop_past_lease(a, rng, 0.5)
        b = spawn("graph", quick(url), thread, log, nodes, 5.0, 0.0)
        code, out, err = finish(b)
        stopped = fault == "sigstop"
        if code != 0 and stopped and locked_out(url, err):
            locked, stopped = locked + 1, False
            unstick(a)
            b = spawn("graph", url, thread, log, nodes, 5.0, 0.0)
            code, out, err = finish(b)
        if code != 0 or "done" not in out:
            anomalies.append(f"try {t}: the new owner failed: {out} {err[-800:]}")
            continue
        if stopped:
            a.send_signal(signal.SIGCONT)
            code_a, out_a, err_a = finish(a)
            if code_a != 3 or "lost" not in out_a:
                anomalies.append(f"try {t}: the stale owner said {out_a!r} {err_a[-300:]}")
        found = _graph_anomalies(url, thread, nodes, effects(log), a.pid, b.pid)
        anomalies += [f"try {t}: {x}" for x in found]
    report(f"langgraph-{fault}", url, tries, anomalies, locked)


def test_langgraph_saver_delete_under_a_live_lease(url: str, tmp_path: Path) -> None:
    """Another process deletes the thread a leased saver is running: refused (the graph ends
    whole); forced, the owner stops with `DataLostError` and the thread stays deleted."""
    pytest.importorskip("langgraph.graph")
    from agentrewind_langgraph import RewindSaver

    rng = random.Random()
    anomalies: list[str] = []
    for t in range(TRIES):
        for force in (False, True):
            thread, log, nodes = unique("thread"), tmp_path / f"del-{t}-{force}", 20
            a = spawn("graph", url, thread, log, nodes, 5.0, 0.03)
            expect(a, "ready")
            time.sleep(rng.uniform(0.1, 0.4))
            cfg: Any = {"configurable": {"thread_id": thread}}
            with RewindSaver(url) as other:
                try:
                    other.delete_thread(thread, force=force)
                    refused = False
                except agentrewind.RunLockedError:
                    refused = True
            code, out, err = finish(a)
            with RewindSaver(url) as reader:
                latest = reader.get_tuple(cfg)
            if not force:
                if not refused:
                    anomalies.append(f"try {t}: a leased thread was deleted without force")
                if code != 0 or latest is None:
                    anomalies.append(f"try {t}: the owner did not finish whole: {out} {err[-300:]}")
                    continue
                items = latest.checkpoint["channel_values"].get("items", [])
                if [int(x.split(":")[0]) for x in items] != list(range(nodes)):
                    anomalies.append(f"try {t}: the final state lost nodes: {items}")
            else:
                if code != 3 or "lost DataLostError" not in out:
                    anomalies.append(f"try {t}: the forced-off owner said {out!r} ({code})")
                if latest is not None:
                    anomalies.append(f"try {t}: a late checkpoint brought the deleted thread back")
    report("langgraph-delete", url, TRIES, anomalies)
