"""The `agentrewind` command line."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

from .errors import AgentRewindError
from .stores import Store, connect, default_url


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _open(args: argparse.Namespace) -> Store:
    return connect(args.store, namespace=args.namespace)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    with _open(args) as store:
        run_demo(store)
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    with _open(args) as store:
        runs = store.list_runs(limit=args.limit)
    if args.json:
        print(json.dumps([_run_json(r) for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs in {store.url} (namespace {store.namespace})")
        return 0
    print(f"{'RUN':<36} {'STATUS':<10} {'STEPS':>5} {'REPLAYED':>8}  UPDATED")
    for r in runs:
        print(
            f"{r.run_id:<36} {r.status:<10} {r.metrics.steps:>5} {r.metrics.replay_hits:>8}  "
            f"{_when(r.updated_at)}"
        )
    return 0


def _run_json(r: Any) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "expires_at": r.expires_at,
        "metrics": r.metrics.as_dict(),
    }


def _cmd_log(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if store.get_run(args.run) is None:
            print(f"error: no run {args.run!r} in {store.url}", file=sys.stderr)
            return 1
        steps = store.load_steps(args.run)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "step_id": s.step_id,
                        "seq": s.seq,
                        "key": s.key,
                        "kind": s.kind,
                        "name": s.name,
                        "status": s.status,
                        "parent_id": s.parent_id,
                        "meta": s.meta,
                    }
                    for s in steps
                ],
                indent=2,
            )
        )
        return 0
    for s in steps:
        ms = float(s.meta.get("duration", 0.0)) * 1000
        print(f"{s.seq:>5}  {s.status:<9} {s.kind:<6} {s.name:<28} {ms:8.1f} ms  {s.step_id}")
    return 0


def _cmd_metrics(args: argparse.Namespace) -> int:
    with _open(args) as store:
        runs = [store.get_run(args.run)] if args.run else store.list_runs(limit=1_000_000)
    if args.run and runs[0] is None:
        print(f"error: no run {args.run!r}", file=sys.stderr)
        return 1
    from .records import RunMetrics

    total = RunMetrics()
    for r in runs:
        if r is not None:
            total.add(r.metrics)
    if args.json:
        print(json.dumps(total.as_dict(), indent=2))
        return 0
    print(f"steps recorded   {total.steps}")
    print(f"replay hits      {total.replay_hits}")
    print(f"seconds saved    {total.seconds_saved:.3f}")
    print(f"tokens saved     {total.tokens_saved}")
    print(f"failures         {total.failures}")
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    with _open(args) as store:
        deleted = store.prune(keep_last=args.keep_last, older_than=args.older_than)
    print(json.dumps({"deleted": deleted}) if args.json else f"deleted {deleted} run(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `agentrewind` command."""
    parser = argparse.ArgumentParser(prog="agentrewind", description=__doc__)
    parser.add_argument("--store", default=None, help=f"store URL (default: {default_url()})")
    parser.add_argument("--namespace", default=None, help="store namespace (default: default)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="offline demo: a run fails, resumes, and replays")
    p = sub.add_parser("runs", help="list runs, newest first")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("log", help="list the steps of a run")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("metrics", help="steps, replay hits, seconds and tokens saved")
    p.add_argument("run", nargs="?")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("prune", help="delete expired, old or surplus runs")
    p.add_argument("--keep-last", type=int, default=None)
    p.add_argument("--older-than", type=float, default=None, help="seconds since last write")
    p.add_argument("--json", action="store_true")
    from .plugins import load_group

    for register in load_group("agentrewind.cli_commands"):
        register(sub)
    return parser


_COMMANDS = {
    "demo": _cmd_demo,
    "runs": _cmd_runs,
    "log": _cmd_log,
    "metrics": _cmd_metrics,
    "prune": _cmd_prune,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentrewind` command."""
    args = build_parser().parse_args(argv)
    try:
        handler = _COMMANDS.get(args.command) or args.func
        return int(handler(args))
    except AgentRewindError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
