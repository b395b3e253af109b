"""`agentrewind worker`, `cancel` and `resume`: runs that come back by themselves.

The worker imports the user's module (the current directory on the path, as `celery -A`
does) and runs `journal.serving.Worker`: it takes queued runs of the queues named with
`--queue` as their limits allow, recovers the crashed runs of the workflows it registers, and
keeps doing both; on SIGTERM or SIGINT it drains: the runs in flight stop at their next step
and release their leases and slots (another worker resumes them), and it exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import signal
import sys
import time
from typing import Any

from ..errors import QueueError
from ..journal import Middleware
from ..journal.serving import Worker
from .common import CliError, dumps, open_store

__all__ = ["cmd_cancel", "cmd_queues", "cmd_resume", "cmd_worker", "load_app"]


def load_app(spec: str) -> Middleware:
    """The middleware named by `MODULE:ATTR` (ATTR a `Middleware`, or a function returning one).

    Raises:
        CliError: The module or attribute cannot be found, or is not a middleware.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"{spec!r}: name the middleware as MODULE:ATTR (e.g. myapp.tasks:mw)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import {module_name!r} (from {os.getcwd()}): {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Middleware):
        obj = obj()
    if not isinstance(obj, Middleware):
        raise CliError(f"{spec} is a {type(obj).__name__}, not an agentrewind.Middleware")
    return obj


def cmd_worker(args: argparse.Namespace) -> int:
    """`agentrewind worker MODULE:ATTR [--queue NAME...]`: run queued runs, recover crashed ones."""
    mw = load_app(args.app)
    if not mw.workflows:
        raise CliError(f"{args.app} registers no workflow (use @middleware.workflow(name))")
    try:
        queues = [mw._declared(name) for name in args.queues]
    except QueueError as exc:
        raise CliError(f"{args.app}: {exc}") from None
    worker = Worker(
        mw,
        queues=queues,
        concurrency=args.concurrency,
        poll=args.poll,
        recover=args.recover,
        report=lambda line: print(line, flush=True),
    )

    def stop(signum: int, _frame: Any) -> None:
        print(f"{signal.Signals(signum).name}: draining", flush=True)
        worker.stop.set()
        worker._wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    names = ", ".join(sorted(mw.workflows))
    served = f"; queues {', '.join(q.name for q in queues)}" if queues else ""
    print(
        f"worker on {mw.store.url}: workflows {names}{served}; {args.concurrency} at a time",
        flush=True,
    )
    worker.serve(once=args.once, drain_timeout=args.drain_timeout)
    print(f"worker stopped: {worker.done + len(worker.in_flight)} run(s) ended here", flush=True)
    return 0


def cmd_queues(args: argparse.Namespace) -> int:
    """`agentrewind queues [QUEUE] [--app MODULE:ATTR]`: what each queue holds now."""
    declared = load_app(args.app).queues if args.app else {}
    with open_store(args, write=False) as store:
        url = store.url
        stats = store.queues.stats(args.name)
    empty = args.name is not None and not (stats[0].queued + stats[0].in_flight)
    if empty and args.name not in declared:
        raise CliError(f"no queue {args.name!r} holds runs in {url}")
    rows = []
    for s in stats:
        q = declared.get(s.queue)
        limits = None
        if q is not None:
            limits = dataclasses.asdict(q.limits) | {"worker_concurrency": q.worker_concurrency}
        rows.append(s.as_dict() | {"limits": limits})
    if args.json:
        print(dumps(rows))
        return 0
    if not rows:
        print("no queue holds runs")
        return 0
    now = time.time()
    print(f"{'queue':<24} {'waiting':>8} {'delayed':>8} {'in flight':>9} {'oldest':>9}  limits")
    for row in rows:
        oldest = row["oldest_enqueued_at"]
        age = "-" if oldest is None else f"{now - oldest:.1f}s"
        print(
            f"{row['queue']:<24} {row['queued']:>8} {row['delayed']:>8} {row['in_flight']:>9} "
            f"{age:>9}  {_limits(row['limits'])}"
        )
    return 0


def _limits(limits: dict[str, Any] | None) -> str:
    if limits is None:
        return "(--app shows them)"
    parts = []
    if limits["concurrency"] is not None:
        parts.append(f"concurrency={limits['concurrency']}")
    if limits["worker_concurrency"] is not None:
        parts.append(f"worker_concurrency={limits['worker_concurrency']}")
    if limits["limiter"] is not None:
        n, seconds = limits["limiter"]
        parts.append(f"limiter={n}/{seconds:g}s")
    if limits["partitioned"]:
        parts.append("partitioned")
    return " ".join(parts) or "none"


def cmd_cancel(args: argparse.Namespace) -> int:
    """`agentrewind cancel RUN...`: mark runs cancelled (their owners stop at the next step)."""
    store = open_store(args, write=True)
    try:
        mw = Middleware(store)
        for run_id in args.runs:
            changed = mw.cancel(run_id)
            print(f"{run_id}: {'cancelled' if changed else 'already cancelled'}")
    finally:
        store.close()
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """`agentrewind resume RUN`: clear a cancel mark; with --app, run the workflow here."""
    if args.app:
        mw = load_app(args.app)
        result = mw.resume(args.run)
        print(f"{args.run}: completed; result {result!r}"[:2000])
        return 0
    store = open_store(args, write=True)
    try:
        from ..journal.lifecycle import uncancel_mark

        uncancel_mark(store, args.run)
    finally:
        store.close()
    print(f"{args.run}: cancel mark cleared; a worker (or recover()) resumes it")
    return 0
