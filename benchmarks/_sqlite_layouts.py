"""SQLite journal writes beside main's, in the same process (used by core_bench).

* `MainWritesStore`: the SQLite store with main's journal write (every write re-sets the
  step's step id and seq, so all three indexes of `ar_steps` are rewritten, and touches the
  run row): the anchor.
* `WithoutRowidStore`: this store's writes on `ar_steps` as a WITHOUT ROWID table (the layout
  the performance audit proposed), measured so the choice against it stays visible: its rows
  hold their data in the key b-tree, so a record over ~1 KB spills to an overflow page.

`compare` times them, interleaved:

* WAL pages per journal write: frames the WAL gains over N `run.step` calls (each a `started`
  and a `completed` write), checkpoints off, divided by the writes; for a small step and for
  one whose output is 1.5 KB of text (an LLM answer's size), with the file's pages per step.
* µs per journal step: median `run.step` (started + completed) over interleaved rounds.
* the open of a recorded run of `open_steps` steps (median of 3 interleaved rounds).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agentrewind
from agentrewind.errors import SchemaVersionError
from agentrewind.records import StepRecord
from agentrewind.stores import SQLiteStore
from agentrewind.stores.sqlite import _sql
from agentrewind.stores.sqlite.db import apply_migrations

__all__ = ["MainWritesStore", "WithoutRowidStore", "compare", "report"]


class MainWritesStore(SQLiteStore):
    """The SQLite store with main's `put_steps`."""

    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,
    ) -> None:
        assert not heads, "the benchmark writes no heads"
        rows = [(self.namespace, r.run_id, r.key, r.step_id, r.seq, r.encode()) for r in records]
        now = time.time()
        run_ids = {r.run_id for r in records}
        with self.db.write(durable=durable) as conn:
            for run_id in run_ids:
                self._fence_txn(conn, run_id, owner, now)
                self._drop_expired_txn(conn, self.namespace, run_id, now)
            conn.executemany(_sql.UPSERT_STEP, rows)
            for run_id in run_ids:
                conn.execute(_sql.TOUCH_RUN, (self.namespace, run_id, now))


class WithoutRowidStore(SQLiteStore):
    """This store's code on `ar_steps` created WITHOUT ROWID (same key, same indexes)."""

    def _migrate(self) -> None:
        v1 = [f"{s} WITHOUT ROWID" if "TABLE IF NOT EXISTS ar_steps" in s else s for s in _sql.V1]
        with self.db.write() as conn:
            apply_migrations(conn, "ar_schema_version", [v1], 1, SchemaVersionError)


Layout = tuple[str, Callable[[Path], SQLiteStore]]
LAYOUTS: list[Layout] = [
    ("main", MainWritesStore),
    ("WITHOUT ROWID", WithoutRowidStore),
    ("this", SQLiteStore),
]


def _pages_and_us(
    make: Callable[[Path], SQLiteStore], path: Path, steps: int, output: Any
) -> tuple[float, float, list[float]]:
    """WAL frames per write and µs per `run.step` over `steps` steps of a fresh store."""
    store = make(path)
    for n in range(20):  # other runs in the namespace, as in any store in use
        store.begin_run(f"other-{n}")
    mw = agentrewind.Middleware(store)
    samples = []
    try:
        with mw.run("bench") as run:
            conn = store.db.connection()
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for i in range(steps):
                t0 = time.perf_counter()
                run.step("work", lambda i: output, i)
                samples.append(time.perf_counter() - t0)
            frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            file_pages = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        mw.close()
    return frames / (2 * steps), file_pages / steps, samples


def compare(
    directory: Path,
    steps: int,
    open_steps: int,
    record_run: Callable[[agentrewind.Store, int], None],
) -> dict[str, dict[str, float]]:
    """Per layout: pages per write (small, 1.5 KB), µs per step, and (with `open_steps`) the
    median seconds to open run "open" that `record_run` recorded."""
    out: dict[str, dict[str, float]] = {name: {} for name, _ in LAYOUTS}
    samples: dict[str, list[float]] = {name: [] for name, _ in LAYOUTS}
    for rnd in range(3):  # interleaved rounds: a shared machine drifts
        for n, (name, make) in enumerate(LAYOUTS):
            pages, _, us = _pages_and_us(make, directory / f"steps-{rnd}-{n}.db", steps, 1)
            out[name]["pages"] = pages
            samples[name] += us
    for n, (name, make) in enumerate(LAYOUTS):
        big = _pages_and_us(make, directory / f"big-{n}.db", steps, "x" * 1500)
        out[name]["pages_big"], out[name]["file_big"] = big[0], big[1]
        out[name]["step_us"] = statistics.median(samples[name]) * 1e6
    if open_steps:
        stores = [make(directory / f"open-{n}.db") for n, (_, make) in enumerate(LAYOUTS)]
        opens: dict[str, list[float]] = {name: [] for name, _ in LAYOUTS}
        try:
            for store in stores:
                record_run(store, open_steps)
            for _ in range(3):
                for (name, _), store in zip(LAYOUTS, stores, strict=True):
                    mw = agentrewind.Middleware(store)
                    gc.collect()
                    t0 = time.perf_counter()
                    with mw.run("open"):
                        opens[name].append(time.perf_counter() - t0)
        finally:
            for store in stores:
                store.close()
        for name, seconds in opens.items():
            out[name]["open_s"] = statistics.median(seconds)
    return out


def report(rows: dict[str, dict[str, float]], open_steps: int) -> list[str]:
    """Lines printing each figure of every layout beside main's, with the ratio."""
    names = list(rows)
    anchor = rows[names[0]]
    lines = [
        "SQLite journal writes, measured in this run beside main's (ratio = x / main):",
        f"  {'':<46}" + "".join(f"{n:>22}" for n in names),
    ]
    labels = [
        ("pages", "WAL pages per journal write (small step)", "{:.2f}"),
        ("pages_big", "WAL pages per journal write (1.5 KB output)", "{:.2f}"),
        ("file_big", "file pages per step (1.5 KB output)", "{:.2f}"),
        ("step_us", "µs per journal step (started+completed)", "{:.1f}"),
        ("open_s", f"seconds to open a {open_steps}-step run", "{:.3f}"),
    ]
    for key, label, fmt in labels:
        if key in anchor:
            cells = [fmt.format(anchor[key])] + [
                f"{fmt.format(rows[n][key])} ({rows[n][key] / anchor[key]:.2f}x)" for n in names[1:]
            ]
            lines.append(f"  {label:<46}" + "".join(f"{c:>22}" for c in cells))
    return lines
