"""CLI commands that delete: `rm RUN...` and `prune`.

Each lists what goes, asks first on a terminal, refuses leased runs unless forced, and
reclaims the space afterwards.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sqlite3
import time
from typing import Any

from ..errors import RunLockedError
from ..stores import Store
from .common import CliError, confirm, dumps, iso, open_store
from .sources import all_runs, locate
from .status import RunView, describe

__all__ = ["cmd_prune", "cmd_rm", "reclaim"]


def _size(store: Store) -> int | None:
    if store.scheme != "sqlite":
        return None
    path = str(store.db.path)  # type: ignore[attr-defined]
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def reclaim(store: Store) -> int | None:
    """Give the space of deleted runs back to the file system; bytes freed (None: not SQLite).

    SQLite keeps freed pages for reuse: a store created with `auto_vacuum=INCREMENTAL` runs
    `incremental_vacuum`, any other runs `VACUUM`; the WAL is then truncated. A store busy
    with other connections keeps its pages (the deletion itself is done either way).
    """
    before = _size(store)
    if before is None:
        return None
    conn = store.db.connection()  # type: ignore[attr-defined]
    try:
        mode = conn.execute("PRAGMA auto_vacuum").fetchone()[0]
        conn.execute("PRAGMA incremental_vacuum" if mode == 2 else "VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError as exc:
        print(f"warning: space not reclaimed ({exc}); it is reused by later writes")
    return max(before - (_size(store) or 0), 0)


def _delete(store: Store, views: list[RunView], force: bool) -> tuple[int, list[RunView]]:
    """Delete `views`: how many went, and those a live lease kept (LangGraph threads).

    Stores that fence deletes take `force` (a leased run is refused without it); the CLI has
    already left leased runs out unless --force was given. A run source that fences its own
    deletes (a `RewindSaver(lease=True)` thread) refuses a leased one with `RunLockedError`.
    """
    fenced = "force" in inspect.signature(store.delete_run).parameters
    deleted, refused = 0, []
    ours = [v.run_id for v in views if v.source == "agentrewind"]
    if ours and fenced:  # in batches: one transaction, or one Redis pipeline per batch
        deleted += store._delete_many(ours, force=force)[0]
    for v in views:
        if v.source == "agentrewind":
            if not fenced:
                deleted += store.delete_run(v.run_id)
        else:
            source = _sources().get(v.source)
            if source is None or not hasattr(source, "delete_run"):
                continue
            kwargs = {"force": force} if _takes_force(source.delete_run) else {}
            try:
                deleted += bool(source.delete_run(store, v.run_id, **kwargs))
            except RunLockedError as exc:
                v.lease = (exc.owner, time.time() + exc.expires_in)
                refused.append(v)
    return deleted, refused


def _takes_force(fn: Any) -> bool:
    return "force" in inspect.signature(fn).parameters


def _sources() -> dict[str, Any]:
    from .sources import run_sources

    return {s.name: s for s in run_sources()}


def _report(
    args: argparse.Namespace, action: str, doomed: list[RunView], refused: list[RunView],
    done: int, freed: int | None, expired: int = 0,
) -> None:  # fmt: skip
    if args.json:
        print(dumps({
            "dry_run": args.dry_run,
            action: [v.run_id for v in doomed],
            "refused": [{"run_id": v.run_id, "lease_owner": v.lease[0] if v.lease else None}
                        for v in refused],
            "deleted_count": done,
            "expired_purged": expired,
            "bytes_freed": freed,
        }))  # fmt: skip
        return
    verb = "would delete" if args.dry_run else "deleted"
    for v in doomed:
        print(f"{verb} {v.run_id}  ({v.kind}, {v.status}, {v.steps} step(s), "
              f"updated {iso(v.info.updated_at)})")  # fmt: skip
    if refused:
        print(
            f"skipped {len(refused)} run(s) another process is driving (live lease): "
            f"{', '.join(v.run_id for v in refused)}; pass --force to delete them anyway"
        )
    summary = f"{verb} {len(doomed) if args.dry_run else done} run(s)"
    if expired:
        summary += f" and {expired} expired run(s)"
    if freed is not None and not args.dry_run:
        summary += f"; {freed} bytes freed"
    print(summary)


def _run(args: argparse.Namespace, store: Store, doomed: list[RunView], action: str) -> int:
    refused = [v for v in doomed if v.leased and not args.force]
    doomed = [v for v in doomed if v not in refused]
    expired = 0
    if args.dry_run or not (doomed or action == "prune"):
        _report(args, action, doomed, refused, 0, None)
        return 1 if refused and not doomed else 0
    names = ", ".join(v.run_id for v in doomed[:5]) + (" ..." if len(doomed) > 5 else "")
    if doomed and not confirm(f"delete {len(doomed)} run(s) ({names})?", yes=args.yes):
        print("nothing deleted")
        return 1
    done, kept = _delete(store, doomed, args.force)
    doomed = [v for v in doomed if v not in kept]
    refused += kept
    if action == "prune":
        expired = int(store.prune())  # runs whose TTL ran out: not listed, purged here
    freed = reclaim(store) if done or expired else (None if _size(store) is None else 0)
    _report(args, action, doomed, refused, done, freed, expired)
    return 1 if refused and not doomed else 0


def cmd_rm(args: argparse.Namespace) -> int:
    """`agentrewind rm RUN...`: delete runs (LangGraph threads too)."""
    with open_store(args, write=not args.dry_run) as store:
        views: list[RunView] = []
        for run_id in dict.fromkeys(args.runs):
            where = locate(store, run_id)
            assert where.info is not None
            if where.source is None:
                views += describe(store, [where.info])
            else:
                info = where.info
                views.append(RunView(info, where.name, where.name, info.status, info.metrics.steps))
        return _run(args, store, views, "delete")


def cmd_prune(args: argparse.Namespace) -> int:
    """`agentrewind prune`: delete expired runs, runs idle too long, runs beyond the newest N."""
    if args.keep_last is None and args.older_than is None and not args.expired:
        raise CliError("say what to prune: --older-than DURATION, --keep-last N or --expired")
    with open_store(args, write=not args.dry_run) as store:
        views = all_runs(store, 1_000_000)
        now = time.time()
        doomed = []
        for i, v in enumerate(views):
            surplus = args.keep_last is not None and i >= args.keep_last
            idle = args.older_than is not None and now - v.info.updated_at > args.older_than
            if surplus and v.status == "active" and not (idle or args.force):
                continue  # a timeline in use is never "surplus"
            if surplus or idle:
                doomed.append(v)
        return _run(args, store, doomed, "prune")
