"""Bulk work of the PostgreSQL store: deleting many runs, and opening a long run from an index.

The functions are the store's methods (`self` is the store).
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import StoreBusyError, StoreError
from ...records import INDEX_FROM, StepIndex, StepRecord, open_journal
from ..leases import lease_is_live
from ._flow import PgFlow

__all__ = ["delete_many", "delete_runs", "load_index", "load_step"]


def delete_runs(self: Any, runs: list[str], *, check: dict[str, Any] | None = None) -> int:
    """Delete runs in one transaction (after `check`: the lease check of `delete_run`)."""
    args = {"ns": self.namespace, "runs": runs}
    statements = [(s, args) for s in self.sql("DELETE_RUN")]
    if check is not None:
        statements = [(self.sql(name), check) for name in ("LOCK_LEASE", "LIVE_LEASE_REFUSES")]
        statements += [(s, args) for s in self.sql("DELETE_RUN")]
    run = runs[0] if len(runs) == 1 else None
    return len(self.write(statements, fetch=len(statements) - 1, guard=True, run=run))


def delete_many(self: Any, run_ids: list[str], *, force: bool) -> tuple[int, list[str]]:
    """`Store._delete_many`: one query for the leases, one transaction for the deletes."""
    if force:
        return self._delete_runs(run_ids), []
    # One query for the leases, then one transaction deletes the rest, checking them again
    # as `delete_run` does (lease rows locked, a live one refuses the whole transaction).
    rows = self.db.fetchall(self.sql("LEASES"), (self.namespace, run_ids))
    now = float(rows[0][3]) if rows else time.time()  # lease times are the server's
    leases = {r: (str(owner), float(until)) for r, owner, until, _ in rows}
    skipped = [r for r in run_ids if r in leases and lease_is_live(leases[r], now)]
    doomed = [r for r in run_ids if r not in set(skipped)]
    if not doomed:
        return 0, skipped
    dead = [leases[r][0] for r in doomed if r in leases and leases[r][1] > now]
    check = {"ns": self.namespace, "runs": doomed, "now": now, "dead": dead}
    statements = [(self.sql(n), check) for n in ("LOCK_LEASES", "LIVE_LEASES_REFUSE")]
    statements += [(s, check) for s in self.sql("DELETE_RUN")]
    try:
        return len(self.write(statements, fetch=len(statements) - 1, guard=True)), skipped
    except StoreBusyError:
        raise
    except StoreError as exc:
        if "agentrewind: lease of run" not in str(exc):
            raise
    from ..prune import delete_each  # a lease was taken meanwhile: run by run

    deleted, more = delete_each(self, doomed, False)
    return deleted, skipped + more


def load_index(self: Any, run_id: str) -> PgFlow[StepIndex | list[StepRecord]]:
    """The run's journal: its records when short, else an index (see `journal.index`).

    A long run is indexed from the steps' `site` entries, no record read (each is decoded,
    and its checksum verified, on its replay hit); a row without one (written before schema
    version 3) from its record (`StepIndex.scan`, checksum verified now). A flow: the store's
    `_load_index` drives it on the sync pool, `_aload_index` on the loop's async pool.
    """
    if (yield from self._get_run(run_id)) is None:
        return []
    ns, read = self.namespace, self._read
    if self.schema_version < 3:
        rows = yield read("LOAD_RECORDS", (ns, run_id))
        pairs = [(k, bytes(d)) for k, d in rows]
        found = None
        if len(pairs) >= INDEX_FROM:  # the last step, which `open_journal` asks for then
            last = yield read("LAST_STEP", (ns, run_id))
            found = (int(last[0][0]), str(last[0][1])) if last else None
        return open_journal(pairs, run_id=run_id, last=lambda: found)
    rows = yield read("LOAD_INDEX", {"ns": ns, "run": run_id, "short": INDEX_FROM})
    if len(rows) < INDEX_FROM:  # every record was read: all decoded now
        pairs = [(k, bytes(d)) for k, _, _, d in rows]
        return open_journal(pairs, run_id=run_id, last=lambda: None)
    keys, sites, seqs = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    if None not in sites:
        index = StepIndex.of_sites(keys, sites, run_id=run_id)
    else:
        have = [i for i, s in enumerate(sites) if s is not None]
        index = StepIndex.of_sites([keys[i] for i in have], [sites[i] for i in have], run_id=run_id)
        unsited = [(k, bytes(d)) for k, s, _, d in rows if s is None]
        index.sites.update(StepIndex.scan(unsited, run_id=run_id).sites)
    # The last step (by seq) from the rows read, not a second scan of them: its step id by key.
    index.seq = max(seqs)
    key = keys[seqs.index(index.seq)]
    found_id = yield read("STEP_ID_BY_KEY", (ns, run_id, key))
    index.last_step_id = str(found_id[0][0]) if found_id else None
    return index


def load_step(self: Any, run_id: str, key: str) -> StepRecord | None:
    """The record of the run under `key`, or None."""
    row = self.db.fetchone(self.sql("STEP_BY_KEY"), (self.namespace, run_id, key))
    return None if row is None else StepRecord.decode(row[0], where=f"run {run_id!r} {key!r}")
