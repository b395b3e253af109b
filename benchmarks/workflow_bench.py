"""Workflows and recovery (issue 24): what `workflow.run` adds, crash-to-resume, mass recovery.

Run: `python benchmarks/workflow_bench.py [--runs N] [--recover N] [--no-dbos]` (nox `bench`).

1. `workflow.run` over `middleware.run` on SQLite: the median of N runs of an empty body each
   way, and the store writes each makes (goal: one write more, <= 30 µs).
2. Crash to resumed by a waiting `agentrewind worker` (poll 0.2 s, lease TTL 2 s): a process
   SIGKILLed inside step two, the time until the worker printed the run resumed. On one host
   the dead owner is seen at once (the bound is one poll period); across hosts the lease must
   lapse first (goal: <= lease TTL + one poll period).
3. Recovery of M crashed runs (killed in step two) by 4 processes running `recover()` at once
   on SQLite, in runs/s, beside DBOS 3.4 recovering M pending workflows at `DBOS.launch()` on a
   SQLite system database in the same run.
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

import agentrewind

APP = textwrap.dedent(
    """
    import os, sys, time
    import agentrewind

    mw = agentrewind.Middleware(os.environ["AR_STORE"], lease_ttl=2)

    @mw.step("one")
    def one(i):
        return i

    @mw.step("two")
    def two(i):
        if os.environ.get("AR_HANG"):
            sys.stdout.write(f"in-two {i}\\n"); sys.stdout.flush()
            time.sleep(600)
        return i

    @mw.workflow("bench")
    def bench(i):
        return one(i) + two(i)
    """
)
CRASH_MANY = textwrap.dedent(
    """
    import os, sys
    import app
    from agentrewind.journal.workflow import _begin

    n = int(sys.argv[1])
    for i in range(n):  # open each run, record its arguments and step one, never finish it
        ctx = app.mw.run(f"m{i:05d}")
        run = ctx.__enter__()
        _begin(run, "bench", {"args": [i], "kwargs": {}})
        app.one(i)
        run._stop_keeper(False, wait=False)
    print("crashed", n, flush=True)
    os._exit(9)
    """
)
DBOS_APP = textwrap.dedent(
    """
    import os, sys, threading, time
    from dbos import DBOS

    DBOS(config={"name": "wf-bench", "system_database_url": os.environ["DBOS_DB"],
                 "log_level": "WARNING"})
    hang = threading.Event()

    @DBOS.step()
    def one(i):
        return i

    @DBOS.step()
    def two(i):
        if os.environ.get("AR_HANG"):
            hang.wait()
        return i

    @DBOS.workflow()
    def bench(i):
        return one(i) + two(i)

    DBOS.launch()
    n = int(sys.argv[1])
    if os.environ.get("AR_HANG"):
        for i in range(n):
            DBOS.start_workflow(bench, i)
        while len(DBOS.list_workflows(status="PENDING")) < n:
            time.sleep(0.05)
        time.sleep(0.5)  # every workflow is past its first step
        print("crashed", n, flush=True)
        os._exit(9)
    t0 = time.perf_counter()  # launch above already started recovering
    while len(DBOS.list_workflows(status="SUCCESS")) < n:
        time.sleep(0.01)
    print(time.perf_counter() - t0, flush=True)
    os._exit(0)
    """
)


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def overhead(directory: Path, runs: int) -> dict[str, float]:
    """Median µs of `middleware.run` and `workflow.run` with empty bodies, and writes each."""
    mw = agentrewind.Middleware(f"sqlite:///{directory / 'overhead.db'}")
    wf = mw.workflow("empty", lambda: None)
    writes = {"n": 0}
    put = mw.store.put_steps

    def counting(*args: object, **kwargs: object) -> None:
        writes["n"] += 1
        put(*args, **kwargs)  # type: ignore[arg-type]

    mw.store.put_steps = counting  # type: ignore[method-assign]
    plain: list[float] = []
    flow: list[float] = []
    for i in range(runs):
        t0 = time.perf_counter()
        with mw.run(f"p{i}"):
            pass
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        wf.run(run_id=f"w{i}")
        flow.append(time.perf_counter() - t0)
    writes["n"] = 0
    with mw.run("p-count"):
        pass
    plain_writes = writes["n"]
    writes["n"] = 0
    wf.run(run_id="w-count")
    mw.close()
    return {
        "middleware.run": _median_us(plain),
        "workflow.run": _median_us(flow),
        "writes": float(writes["n"] - plain_writes),
    }


def _env(directory: Path, store: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "AR_STORE": store, "PYTHONPATH": str(directory), **extra}


def crash_to_resume(directory: Path, tries: int = 3) -> list[float]:
    """Seconds from a SIGKILL inside step two to a waiting worker's `resumed` line."""
    store = f"sqlite:///{directory / 'latency.db'}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentrewind", "worker", "app:mw", "--poll", "0.2"],
        env=_env(directory, store), cwd=directory, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert worker.stdout is not None
    worker.stdout.readline()
    took = []
    try:
        for k in range(tries):
            code = f"import app; app.bench.run({k}, run_id='lat{k}')"
            env = _env(directory, store, AR_HANG="1")
            child = subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, text=True
            )
            assert child.stdout is not None
            child.stdout.readline()
            t0 = time.perf_counter()
            child.send_signal(signal.SIGKILL)
            child.communicate()
            line = worker.stdout.readline()
            assert line.startswith(f"resumed lat{k}"), line
            took.append(time.perf_counter() - t0)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    return took


def mass_recovery(directory: Path, n: int, processes: int = 4) -> float:
    """Runs/s of `processes` processes recovering `n` crashed runs at once (SQLite)."""
    store = f"sqlite:///{directory / 'mass.db'}"
    (directory / "crash_many.py").write_text(CRASH_MANY)
    subprocess.run([sys.executable, str(directory / "crash_many.py"), str(n)],
                   env=_env(directory, store), cwd=directory, capture_output=True)  # fmt: skip
    with agentrewind.connect(store) as s:
        crashed = len(s.crashed_runs(limit=n + 10))
    assert crashed == n, f"{crashed} crashed runs, expected {n}"
    code = "import app, json; r = app.mw.recover(limit=100000); print(len(r.resumed))"
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=_env(directory, store),
            cwd=directory,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    resumed = sum(int(p.communicate()[0].strip() or 0) for p in procs)
    seconds = time.perf_counter() - t0
    assert resumed == n, f"{resumed} resumed, expected {n}"
    return n / seconds


def dbos_recovery(directory: Path, n: int) -> float | str:
    """Workflows/s DBOS recovers at launch (`n` pending on SQLite); a reason if it can't."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return "the dbos package is not installed"
    (directory / "dbos_app.py").write_text(DBOS_APP)
    env = {**os.environ, "DBOS_DB": f"sqlite:///{directory / 'dbos.sqlite'}"}
    crash = subprocess.run([sys.executable, str(directory / "dbos_app.py"), str(n)],
                           env={**env, "AR_HANG": "1"}, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    if "crashed" not in crash.stdout:
        return f"could not leave {n} pending workflows: {crash.stderr[-300:]}"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, str(directory / "dbos_app.py"), str(n)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    total = time.perf_counter() - t0
    try:
        after_launch = float(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"recovery did not finish: {done.stderr[-300:]}"
    return n / max(after_launch, 1e-9) if after_launch else n / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="runs for the overhead")
    parser.add_argument("--recover", type=int, default=1000, help="crashed runs to recover")
    parser.add_argument("--no-dbos", action="store_true", help="skip DBOS's recovery")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "app.py").write_text(APP)
        o = overhead(directory, args.runs)
        print(f"workflow.run over middleware.run, SQLite, empty body ({args.runs} runs each):")
        print(f"  middleware.run {o['middleware.run']:8.1f} µs   workflow.run "
              f"{o['workflow.run']:8.1f} µs   added {o['workflow.run'] - o['middleware.run']:6.1f}"
              f" µs, {o['writes']:.0f} write(s)   (goal: one write, <= 30 µs)")  # fmt: skip
        lat = crash_to_resume(directory)
        print(f"crash to resumed by a waiting worker (poll 0.2 s, lease TTL 2 s, one host): "
              f"{', '.join(f'{s:.2f}' for s in lat)} s   (goal: <= 2.2 s)")  # fmt: skip
        rate = mass_recovery(directory, args.recover)
        anchor = "--no-dbos given" if args.no_dbos else dbos_recovery(directory, args.recover)
        print(f"recovery of {args.recover} crashed runs, SQLite:")
        print(f"  agentrewind, 4 processes running recover(): {rate:8.1f} runs/s")
        if isinstance(anchor, float):
            print(f"  DBOS 3.4 at launch (one process):          {anchor:8.1f} workflows/s"
                  f"   ratio {rate / anchor:.2f}x")  # fmt: skip
        else:
            print(f"  DBOS 3.4: not measured ({anchor})")
    print(json.dumps({"overhead": o, "latency": lat, "recovery": rate,
                      "dbos": anchor if isinstance(anchor, float) else None}))  # fmt: skip


if __name__ == "__main__":
    main()
