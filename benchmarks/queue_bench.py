"""Durable queues (issue 27): enqueue latency, dequeue cost at depth, throughput, beside DBOS.

Run: `python benchmarks/queue_bench.py [--runs N] [--quick] [--stores sqlite,postgres]
[--no-dbos] [--json PATH]` (nox `bench`; DBOS 3.4 comes from the `bench` group).

Each store kind is measured with the anchor in the same run, on the same kind of database:
SQLite (files in a temporary directory) and PostgreSQL ($AGENTREWIND_TEST_POSTGRES, default
postgresql://postgres@127.0.0.1:5432/postgres: a scratch database `ar_qbench_<pid>` is created
there and dropped at the end; skipped with a note when unreachable).

1. Enqueue latency: median and p95 of `queue.enqueue(noop, i)` over `--runs` enqueues (default
   500), beside DBOS's `queue.enqueue(noop, i)` (a queue from `DBOS.register_queue`, the only
   way 3.4 makes one) in a process that listens to no queue (`DBOS.listen_queues([])`).
2. Dequeue at depth: `store.queues.take` of one entry with 100 and with 100,000 entries waiting
   (rows inserted with SQL into the backend's table), median over 200 takes of each, the two
   depths taken in turn (the same load on both); after each take, untimed, the entry is
   finished and a new one pushed, so the depth stays put. Once without
   limits and once with `QueueLimits(concurrency=10)` and 5 entries held in flight (that path
   counts them). Goal: depth 100,000 / depth 100 <= 1.25. Ours only (DBOS has no such call).
3. Throughput: 1,000 (`--quick`: 300) empty workflows through one queue with 4 worker
   processes. Workers start first (ours: `agentrewind worker app:mw --queue tp -c 8 --poll
   0.05 --no-recover`; DBOS: processes that `DBOS.launch()` with the queue registered with
   `polling_interval_sec=0.05, worker_concurrency=8`), and are idle when the clock starts at
   the first enqueue; one client process enqueues every run, then polls (every 0.1 s) until
   none is waiting or in flight. Runs/s = runs / (last completion seen - first enqueue), so
   the enqueues are inside the figure for both (one enqueuing process bounds it: the workers
   end the last run within a poll or two of the last enqueue). Goal: >= 3x DBOS on the same
   store.
4. Drain of a backlog (what the workers alone sustain): the same number of runs enqueued
   first, then the 4 worker processes started; runs/s = (runs - 1) / (last completion - first
   completion), from the runs' recorded end times (ours: `updated_at`; DBOS: the
   workflows' `updated_at`), so neither side's process start-up counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import agentrewind
from agentrewind.stores.queue import QueueEntry, QueueLimits

PG_URL = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
POLL = 0.05
WORKERS = 4
WORKER_THREADS = 8
DEPTHS = (100, 100_000)
FLAT_GOAL = 1.25
THROUGHPUT_GOAL = 3.0

APP = textwrap.dedent(
    """
    import os
    import agentrewind

    mw = agentrewind.Middleware(os.environ["AR_STORE"])

    @mw.workflow("noop")
    def noop(i):
        return i

    tp = mw.queue("tp")
    dr = mw.queue("dr")
    """
)
DBOS_APP = textwrap.dedent(
    """
    import json, os, sys, threading, time
    from dbos import DBOS

    role, n = sys.argv[1], int(sys.argv[2])
    DBOS(config={"name": "qbench", "system_database_url": os.environ["DBOS_DB"],
                 "log_level": "WARNING"})

    @DBOS.workflow()
    def noop(i):
        return i

    # workers listen to their queue only; the client enqueues only
    DBOS.listen_queues([os.environ["DBOS_QUEUE"]] if role == "worker" else [])
    DBOS.launch()
    name = os.environ["DBOS_QUEUE"]
    q = DBOS.register_queue(name, polling_interval_sec=float(os.environ["DBOS_POLL"]),
                            worker_concurrency=int(os.environ["DBOS_THREADS"]))
    if role == "worker":
        print("ready", flush=True)
        threading.Event().wait()
    elif role == "enqueue":
        for i in range(20):
            q.enqueue(noop, -i)
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            q.enqueue(noop, i)
            samples.append(time.perf_counter() - t0)
        print(json.dumps(samples), flush=True)
    elif role == "fill":
        for i in range(n):
            q.enqueue(noop, i)
    elif role == "drain":  # wait until none is waiting or running; completions' spread
        busy = ["ENQUEUED", "PENDING"]
        while DBOS.list_workflows(queue_name=name, status=busy, limit=1, load_input=False,
                                  load_output=False):
            time.sleep(0.2)
        ended = [w.updated_at for w in DBOS.list_workflows(
            queue_name=name, status="SUCCESS", load_input=False, load_output=False)]
        print(json.dumps({"seconds": (max(ended) - min(ended)) / 1000, "done": len(ended)}),
              flush=True)
    else:  # throughput: enqueue n, wait until none is waiting or running
        t0 = time.perf_counter()
        for i in range(n):
            q.enqueue(noop, i)
        enqueued = time.perf_counter() - t0
        busy = ["ENQUEUED", "PENDING"]
        while DBOS.list_workflows(queue_name=name, status=busy, limit=1, load_input=False,
                                  load_output=False):
            time.sleep(0.1)
        took = time.perf_counter() - t0
        done = len(DBOS.list_workflows(queue_name=name, status="SUCCESS", load_input=False,
                                       load_output=False))
        print(json.dumps({"seconds": took, "enqueue_seconds": enqueued, "done": done}),
              flush=True)
    os._exit(0)
    """
)


# -- helpers ------------------------------------------------------------------------------------
def _us(samples: list[float]) -> tuple[float, float]:
    """Median and p95 of `samples` (seconds), in µs."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered) * 1e6, p95 * 1e6


def _with_db(url: str, database: str, namespace: str | None = None) -> str:
    parts = urlsplit(url)
    query = f"namespace={namespace}" if namespace else ""
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", query, ""))


class Scratch:
    """A scratch PostgreSQL database `ar_qbench_<pid>` (created here, dropped on exit)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.admin = url
        self.name = f"ar_qbench_{os.getpid()}"
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def url(self, namespace: str | None = None) -> str:
        return _with_db(self.admin, self.name, namespace)

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# -- 1. enqueue latency -------------------------------------------------------------------------
def enqueue_ours(url: str, n: int) -> list[float]:
    """Seconds of each of `n` `queue.enqueue(noop, i)` (after 20 to warm up)."""
    mw = agentrewind.Middleware(url)
    noop = mw.workflow("noop", lambda i: i)
    q = mw.queue("enq")
    for i in range(20):
        q.enqueue(noop, -i)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        q.enqueue(noop, i)
        samples.append(time.perf_counter() - t0)
    mw.close()
    return samples


def _dbos(directory: Path, db: str, queue: str, role: str, n: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DBOS_DB": db,
        "DBOS_QUEUE": queue,
        "DBOS_POLL": str(POLL),
        "DBOS_THREADS": str(WORKER_THREADS),
    }
    out = subprocess.PIPE if role != "worker" else open(directory / f"{role}-{queue}.out", "a")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, str(directory / "dbos_app.py"), role, str(n)],
        env=env,
        stdout=out,
        stderr=subprocess.PIPE if role != "worker" else subprocess.DEVNULL,
        text=True,
        cwd=directory,
    )


def enqueue_dbos(directory: Path, db: str, n: int) -> list[float] | str:
    proc = _dbos(directory, db, "enq", "enqueue", n)
    out, err = proc.communicate(timeout=300)
    try:
        samples: list[float] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"DBOS enqueue failed: {err.strip()[-300:]}"
    return samples


# -- 2. dequeue at depth ------------------------------------------------------------------------
def _fill(store: Any, queue: str, n: int) -> None:
    """`n` waiting entries in `queue`, inserted with SQL into the backend's table."""
    now = time.time()
    if store.scheme == "sqlite":
        store.queues._tables()
        rows = [(store.namespace, queue, f"d{i}", now) for i in range(n)]
        with store.db.write() as conn:
            conn.executemany(
                "INSERT INTO ar_queue (ns, queue, run_id, priority, part, dedup_id, not_before,"
                " enqueued_at, deliveries) VALUES (?, ?, ?, 0, '', NULL, 0, ?, 0)",
                rows,
            )
        with store.db.write() as conn:
            conn.execute("ANALYZE")
    else:
        store.queues._tables()
        table = store.render("{s}.ar_queue")
        sql = (
            f"INSERT INTO {table} (ns, queue, run_id, priority, part, dedup_id, not_before,"
            " enqueued_at, deliveries) SELECT %s, %s, 'd' || g, 0, '', NULL, 0, %s, 0"
            " FROM generate_series(0, %s - 1) g"
        )
        store.write([(sql, (store.namespace, queue, now, n)), (f"ANALYZE {table}", ())])


def dequeue_pair(store: Any, name: str, limits: QueueLimits, takes: int) -> dict[int, float]:
    """Median µs of `take` of one entry at each depth of `DEPTHS` (interleaved rounds).

    After each take, untimed, the entry is finished and a new one pushed: the depth stays.
    With a concurrency limit, 5 entries of each queue are held in flight all along.
    """
    qs = store.queues
    queues = {depth: f"{name}-{depth}" for depth in DEPTHS}
    for depth, queue in queues.items():
        _fill(store, queue, depth)
        if limits.concurrency is not None:
            assert len(qs.take(queue, limits, "holder", 5, 3600)) == 5
    samples: dict[int, list[float]] = {depth: [] for depth in DEPTHS}
    for i in range(takes + 10):
        for depth, queue in queues.items():
            t0 = time.perf_counter()
            got = qs.take(queue, limits, "bench", 1, 60)
            took = time.perf_counter() - t0
            assert len(got) == 1, got
            qs.finish(queue, got[0].run_id)
            qs.push(QueueEntry(queue, f"n{i}"))
            if i >= 10:  # the first ones warm the caches
                samples[depth].append(took)
    return {depth: statistics.median(s) * 1e6 for depth, s in samples.items()}


def dequeue(url: str, takes: int) -> dict[str, float]:
    store: Any = agentrewind.connect(url)
    out = {}
    try:
        for label, limits in (("", QueueLimits()), (" c=10", QueueLimits(concurrency=10))):
            got = dequeue_pair(store, f"deq{label.strip()}", limits, takes)
            out.update({f"{depth}{label}": us for depth, us in got.items()})
    finally:
        store.close()
    return out


# -- 3. throughput ------------------------------------------------------------------------------
def _stop(procs: list[subprocess.Popen[Any]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _wait_lines(files: list[Path], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(f.exists() and f.read_text().strip() for f in files):
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers did not start: {[f.read_text() for f in files]}")
        time.sleep(0.05)


def throughput_ours(directory: Path, url: str, n: int) -> dict[str, float]:
    """Runs/s of `n` empty workflows through one queue served by 4 CLI worker processes."""
    env = {**os.environ, "AR_STORE": url, "PYTHONPATH": str(directory)}
    cmd = [sys.executable, "-m", "agentrewind", "worker", "app:mw", "--queue", "tp"]
    cmd += ["-c", str(WORKER_THREADS), "--poll", str(POLL), "--no-recover"]
    files = [directory / f"ar-worker-{k}-{time.time_ns()}.out" for k in range(WORKERS)]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=directory, stdout=f.open("w"), stderr=subprocess.STDOUT)
        for f in files
    ]
    try:
        _wait_lines(files)
        time.sleep(1.5)  # as long as DBOS's workers are given to settle
        sys.path.insert(0, str(directory))
        os.environ["AR_STORE"] = url
        import app  # the workers' module: the same workflow and queue

        t0 = time.perf_counter()
        for i in range(n):
            app.tp.enqueue(app.noop, i)
        enqueued = time.perf_counter() - t0
        while (s := app.tp.stats()).queued + s.in_flight:
            time.sleep(0.1)
        took = time.perf_counter() - t0
        done = sum(r.status == "completed" for r in app.mw.store.list_runs(limit=n + 10))
        assert done == n, f"{done} of {n} runs completed"
        app.mw.close()
        del sys.modules["app"]
        sys.path.remove(str(directory))
    finally:
        _stop(procs)
    return {"runs_s": n / took, "seconds": took, "enqueue_seconds": enqueued}


def _dbos_workers(directory: Path, db: str, queue: str, wait: bool) -> list[Any] | str:
    procs = [_dbos(directory, db, queue, "worker", 0) for _ in range(WORKERS)]
    out = directory / f"worker-{queue}.out"
    deadline = time.monotonic() + 120
    while wait and (not out.exists() or out.read_text().count("ready") < WORKERS):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            _stop(procs)
            return "DBOS workers did not start"
        time.sleep(0.05)
    return procs


def throughput_dbos(directory: Path, db: str, n: int) -> dict[str, float] | str:
    procs = _dbos_workers(directory, db, "tp", wait=True)
    if isinstance(procs, str):
        return procs
    try:
        time.sleep(1.5)  # DBOS's queue manager starts a queue's thread within 1 s
        client = _dbos(directory, db, "tp", "throughput", n)
        out, err = client.communicate(timeout=600)
        try:
            got = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"DBOS throughput failed: {err.strip()[-300:]}"
        if got["done"] != n:
            return f"DBOS completed {got['done']} of {n}"
        return {"runs_s": n / got["seconds"], **got}
    finally:
        _stop(procs)
        (directory / "worker-tp.out").unlink(missing_ok=True)


def drain_ours(directory: Path, url: str, n: int) -> float:
    """Runs/s of 4 CLI workers draining a backlog of `n`: (n - 1) / completions' spread."""
    mw = agentrewind.Middleware(url)
    noop = mw.workflow("noop", lambda i: i)
    q = mw.queue("dr")
    for i in range(n):
        q.enqueue(noop, i)
    env = {**os.environ, "AR_STORE": url, "PYTHONPATH": str(directory)}
    cmd = [sys.executable, "-m", "agentrewind", "worker", "app:mw", "--queue", "dr"]
    cmd += ["-c", str(WORKER_THREADS), "--poll", str(POLL), "--no-recover"]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=directory, stdout=subprocess.DEVNULL)
        for _ in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 600
        while (s := q.stats()).queued + s.in_flight and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        _stop(procs)
    ended = [r.updated_at for r in mw.store.list_runs(limit=n + 10) if r.status == "completed"]
    mw.close()
    assert len(ended) == n, f"{len(ended)} of {n} runs completed"
    return (n - 1) / (max(ended) - min(ended))


def drain_dbos(directory: Path, db: str, n: int) -> float | str:
    fill = _dbos(directory, db, "dr", "fill", n)
    _, err = fill.communicate(timeout=600)
    if fill.returncode:
        return f"DBOS enqueue failed: {err.strip()[-300:]}"
    procs = _dbos_workers(directory, db, "dr", wait=False)
    if isinstance(procs, str):
        return procs
    try:
        client = _dbos(directory, db, "dr", "drain", n)
        out, err = client.communicate(timeout=600)
    finally:
        _stop(procs)
        (directory / "worker-dr.out").unlink(missing_ok=True)
    try:
        got = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"DBOS drain failed: {err.strip()[-300:]}"
    if got["done"] != n:
        return f"DBOS completed {got['done']} of {n}"
    return float((n - 1) / got["seconds"])


# -- the run ------------------------------------------------------------------------------------
def measure(
    kind: str, directory: Path, url: str, dbos_db: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Every figure of one store kind; `url(namespace)` gives our store's URL."""
    res: dict[str, Any] = {"store": kind}
    res["enqueue"] = _us(enqueue_ours(url.format(ns="enq"), args.runs))
    res["dbos_enqueue"] = None
    if dbos_db is not None:
        d = enqueue_dbos(directory, dbos_db.format(what="enq"), args.runs)
        res["dbos_enqueue"] = _us(d) if isinstance(d, list) else d
    res["dequeue"] = dequeue(url.format(ns="deq"), args.takes)
    res["throughput"] = throughput_ours(directory, url.format(ns="tp"), args.throughput)
    res["dbos_throughput"] = None
    if dbos_db is not None:
        res["dbos_throughput"] = throughput_dbos(
            directory, dbos_db.format(what="tp"), args.throughput
        )
    res["drain"] = drain_ours(directory, url.format(ns="dr"), args.throughput)
    res["dbos_drain"] = None
    if dbos_db is not None:
        res["dbos_drain"] = drain_dbos(directory, dbos_db.format(what="dr"), args.throughput)
    return res


def _row(metric: str, ours: str, anchor: str, ratio: str) -> str:
    return f"  {metric:<44} {ours:>14} {anchor:>14} {ratio:>9}"


def report(res: dict[str, Any], runs: int, n: int) -> None:
    print(f"\n{res['store']}:")
    print(_row("metric", "agentrewind", "DBOS 3.4", "ratio"))
    d = res["dbos_enqueue"]
    for k, label in ((0, "median"), (1, "p95")):
        ours = res["enqueue"][k]
        if isinstance(d, tuple | list):
            anchor, ratio = f"{d[k]:.0f} µs", f"{d[k] / ours:.2f}x"
        else:
            anchor, ratio = "-", ""
        print(_row(f"enqueue {label} ({runs}; ratio DBOS/ours)", f"{ours:.0f} µs", anchor, ratio))
    deq = res["dequeue"]
    for label in ("", " c=10"):
        lo, hi = deq[f"{DEPTHS[0]}{label}"], deq[f"{DEPTHS[1]}{label}"]
        limit = " concurrency=10" if label else ""
        print(_row(f"take 1 at depth {DEPTHS[0]:,}{limit}", f"{lo:.0f} µs", "-", ""))
        goal = "ok" if hi / lo <= FLAT_GOAL else "over"
        print(_row(f"take 1 at depth {DEPTHS[1]:,}{limit}", f"{hi:.0f} µs", "-", ""))
        print(_row(f"  depth ratio (goal <= {FLAT_GOAL}){limit}", f"{hi / lo:.2f}x", "", goal))
    t, dt = res["throughput"], res["dbos_throughput"]
    if isinstance(dt, dict):
        anchor = f"{dt['runs_s']:.0f} runs/s"
        ratio = f"{t['runs_s'] / dt['runs_s']:.2f}x"
        enq = f"{dt['enqueue_seconds']:.2f} s"
    else:
        anchor, ratio, enq = "-", "", "-"
    print(_row(f"throughput, {n} runs, 4 processes (goal >= 3x)", f"{t['runs_s']:.0f} runs/s",
               anchor, ratio))  # fmt: skip
    print(_row("  of which enqueueing them all", f"{t['enqueue_seconds']:.2f} s", enq, ""))
    dd = res["dbos_drain"]
    anchor, ratio = "-", ""
    if isinstance(dd, float):
        anchor, ratio = f"{dd:.0f} runs/s", f"{res['drain'] / dd:.2f}x"
    print(_row(f"drain of a backlog of {n}, 4 processes", f"{res['drain']:.0f} runs/s", anchor,
               ratio))  # fmt: skip
    for key in ("dbos_enqueue", "dbos_throughput", "dbos_drain"):
        if isinstance(res[key], str):
            print(f"  DBOS not measured: {res[key]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="enqueues timed")
    parser.add_argument("--takes", type=int, default=200, help="dequeues timed per depth")
    parser.add_argument("--throughput", type=int, default=1000, help="runs through the queue")
    parser.add_argument("--stores", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument("--quick", action="store_true", help="fewer runs (about a minute)")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS anchor")
    parser.add_argument("--json", type=Path, help="also write the results there")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.takes, args.throughput = min(args.runs, 200), 100, 300
    use_dbos = not args.no_dbos
    if use_dbos:
        try:
            import dbos  # noqa: F401
        except ImportError:
            print("DBOS not measured: the dbos package is not installed (the bench group)")
            use_dbos = False
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "app.py").write_text(APP)
        (directory / "dbos_app.py").write_text(DBOS_APP)
        for kind in args.stores.split(","):
            if kind == "sqlite":
                url = f"sqlite:///{directory}/ours-{{ns}}.db"
                db = f"sqlite:///{directory}/dbos-{{what}}.sqlite"
                results.append(measure(kind, directory, url, db if use_dbos else None, args))
            elif kind == "postgres":
                try:
                    scratch = Scratch(PG_URL)
                except Exception as exc:
                    print(f"PostgreSQL not measured: {PG_URL} unreachable ({exc})")
                    continue
                try:
                    url = scratch.url("{ns}")
                    db = scratch.url() if use_dbos else None
                    results.append(measure(kind, directory, url, db, args))
                finally:
                    scratch.drop()
            else:
                parser.error(f"unknown store {kind!r}")
    print(f"\nqueue_bench: poll {POLL} s for both; {WORKERS} worker processes x {WORKER_THREADS}"
          " threads (DBOS: worker_concurrency=8); workers started first, clock from the first"
          " enqueue")  # fmt: skip
    for res in results:
        report(res, args.runs, args.throughput)
    blob = json.dumps({"queue_bench": results, "argv": sys.argv[1:]})
    print(blob)
    if args.json:
        args.json.write_text(blob + "\n")


if __name__ == "__main__":
    main()
