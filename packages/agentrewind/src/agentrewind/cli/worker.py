"""`agentrewind worker`, `cancel` and `resume`: runs that come back by themselves.

The worker imports the user's module (the current directory on the path, as `celery -A`
does), recovers the crashed runs of the workflows it registers, then keeps claiming runs
whose leases lapse; on SIGTERM or SIGINT it drains: the runs in flight stop at their next
step and release their leases (another worker resumes them), and it exits.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import RunLockedError
from ..journal import Middleware
from ..journal.lifecycle import Claim, RecoveryOutcome, candidates, claim
from .common import CliError, open_store

__all__ = ["cmd_cancel", "cmd_resume", "cmd_worker", "load_app"]


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


def _line(outcome: RecoveryOutcome, seconds: float) -> str:
    how = outcome.outcome + (f": {type(outcome.error).__name__}" if outcome.error else "")
    return f"resumed {outcome.run_id} ({outcome.workflow}): {how} in {seconds:.2f}s"


class Worker:
    """Claims crashed runs of a middleware's workflows and resumes them on a thread pool."""

    def __init__(self, mw: Middleware, *, concurrency: int, poll: float) -> None:
        self.mw = mw
        self.concurrency = concurrency
        self.poll = poll
        self.stop = threading.Event()
        self.in_flight: dict[str, Future[RecoveryOutcome]] = {}
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="agentrewind-worker")
        self.done = 0

    def _resume(self, got: Claim) -> RecoveryOutcome:
        t0 = time.monotonic()
        outcome = got.resume()
        print(_line(outcome, time.monotonic() - t0), flush=True)
        return outcome

    def tick(self) -> None:
        """Claim as many crashed runs as free slots allow."""
        for run_id in [r for r, f in self.in_flight.items() if f.done()]:
            del self.in_flight[run_id]
            self.done += 1
        free = self.concurrency - len(self.in_flight)
        if free <= 0:
            return
        for info in candidates(self.mw, include_failed=False, limit=free + len(self.in_flight)):
            if self.stop.is_set() or len(self.in_flight) >= self.concurrency:
                return
            if info.run_id in self.in_flight:
                continue
            try:
                got = claim(self.mw, info, include_failed=False)
            except RunLockedError:
                continue
            if isinstance(got, Claim):
                self.in_flight[info.run_id] = self.pool.submit(self._resume, got)

    def serve(self, *, once: bool, drain_timeout: float) -> None:
        """Poll until stopped (or, with `once`, until nothing is left to claim), then drain."""
        while not self.stop.is_set():
            self.tick()
            if once and not self.in_flight:
                break
            self.stop.wait(self.poll)
        self.mw.draining.set()  # runs in flight stop at their next step, leases released
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + drain_timeout
        for future in list(self.in_flight.values()):
            try:
                future.result(timeout=max(deadline - time.monotonic(), 0.0))
            except Exception:
                continue


def cmd_worker(args: argparse.Namespace) -> int:
    """`agentrewind worker MODULE:ATTR`: recover crashed runs now and as their leases lapse."""
    if args.concurrency < 1 or args.poll <= 0:
        raise CliError("--concurrency must be at least 1 and --poll a positive number of seconds")
    mw = load_app(args.app)
    if not mw.workflows:
        raise CliError(f"{args.app} registers no workflow (use @middleware.workflow(name))")
    worker = Worker(mw, concurrency=args.concurrency, poll=args.poll)

    def stop(signum: int, _frame: Any) -> None:
        print(f"{signal.Signals(signum).name}: draining", flush=True)
        worker.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    names = ", ".join(sorted(mw.workflows))
    print(f"worker on {mw.store.url}: workflows {names}; {args.concurrency} at a time", flush=True)
    worker.serve(once=args.once, drain_timeout=args.drain_timeout)
    print(f"worker stopped: {worker.done + len(worker.in_flight)} run(s) resumed", flush=True)
    return 0


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
