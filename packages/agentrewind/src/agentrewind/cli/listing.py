"""CLI commands over many runs: `runs` (with true counts, kinds and statuses) and `metrics`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..numbers import with_steps
from ..records import RunMetrics
from .common import dumps, iso, open_store
from .sources import all_runs, hidden, locate
from .status import RunView, describe

__all__ = ["cmd_metrics", "cmd_runs", "run_json"]


def refs(runs: list[RunView]) -> dict[int, str]:
    """What each listed run is named by in every command.

    A run source's run that shares its id with a journal run (a wrapped graph saved by
    `RewindSaver`) is `<source>:<id>`.
    """
    journal = {v.run_id for v in runs if v.source == "agentrewind"}
    return {
        id(v): f"{v.source}:{v.run_id}" if v.source != "agentrewind" and v.run_id in journal
        else v.run_id
        for v in runs
    }  # fmt: skip


def run_json(v: RunView, ref: str | None = None) -> dict[str, Any]:
    """A listed run as JSON data (times in ISO-8601 UTC); `ref` what commands take for it."""
    r = v.info
    return {
        "run_id": r.run_id,
        "ref": ref or r.run_id,
        "source": v.source,
        "kind": v.kind,
        "status": v.status,
        "stored_status": r.status,
        "steps": v.steps,
        "replay_hits": r.metrics.replay_hits,
        "created_at": iso(r.created_at) if r.created_at else None,
        "updated_at": iso(r.updated_at) if r.updated_at else None,
        "expires_at": iso(r.expires_at),
        "lease_owner": v.lease[0] if v.lease else None,
        "forked_from": v.forked_from,
        "metrics": with_steps(r, v.steps).as_dict(),  # the figures every surface shows
    }


def cmd_runs(args: argparse.Namespace) -> int:
    """`agentrewind runs`: runs newest first, with kind, status and true step counts."""
    filtered = bool(args.status or args.kind or args.since is not None)
    with open_store(args) as store:
        runs = all_runs(store, 1_000_000 if filtered else args.limit)
        url, ns = store.url, store.namespace
        for note in hidden(store):  # never a silent "no runs" over threads we cannot show
            print(f"note: {note.sentence()}", file=sys.stderr)
    if args.status:
        runs = [v for v in runs if v.status in args.status]
    if args.kind:
        runs = [v for v in runs if v.kind in args.kind]
    if args.since is not None:
        runs = [v for v in runs if v.info.updated_at >= args.since]
    runs = runs[: args.limit]
    names = refs(runs)
    if args.json:
        print(dumps([run_json(v, names[id(v)]) for v in runs]))
        return 0
    if not runs:
        print(f"no runs in {url} (namespace {ns})" + (" match the filters" if filtered else ""))
        return 0
    width = max(36, *(len(n) for n in names.values()))
    print(f"{'RUN':<{width}} {'KIND':<9} {'STATUS':<9} {'STEPS':>6} {'REPLAYED':>8}  UPDATED (UTC)")
    for v in runs:
        print(
            f"{names[id(v)]:<{width}} {v.kind:<9} {v.status:<9} {v.steps:>6} "
            f"{v.info.metrics.replay_hits:>8}  {iso(v.info.updated_at) or '-'}"
        )
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    """`agentrewind metrics [RUN]`: the figures of one run, or their totals over every run.

    The same figures as `runs --json`, the viewer and the OpenTelemetry run span
    (`agentrewind.numbers`).
    """
    with open_store(args) as store:
        if args.run:
            where = locate(store, args.run)
            assert where.info is not None
            steps = (
                describe(store, [where.info])[0].steps
                if where.source is None
                else where.info.metrics.steps
            )
            figures = [with_steps(where.info, steps)]
        else:
            figures = [with_steps(v.info, v.steps) for v in all_runs(store, 1_000_000)]
    total = RunMetrics()
    for m in figures:
        total.add(m)
    if args.json:
        print(dumps({**total.as_dict(), "runs": len(figures)}))
        return 0
    print(f"runs             {len(figures)}")
    print(f"executions       {total.executions}")
    print(f"steps            {total.steps}")
    print(f"attempts         {total.attempts}")
    print(f"replay hits      {total.replay_hits}")
    print(f"cache hits       {total.cache_hits}")
    print(f"seconds saved    {total.seconds_saved:.3f}")
    print(f"tokens saved     {total.tokens_saved}")
    print(f"failures         {total.failures}")
    print(f"reruns           {total.reruns}")
    return 0
