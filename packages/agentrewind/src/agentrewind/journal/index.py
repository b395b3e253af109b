"""Opening a run: its journal as an index of keys (or every record), and records on demand.

A store that can read an index (a `_load_index(run_id)` method, with `_load_step(run_id, key)`
for the records behind it; every store of the core has them, and PostgreSQL an async
`_aload_index` too) lets a run open without decoding
its outputs: a replay hit then reads its one record. Other stores hand over every record
(`load_steps`).
"""

from __future__ import annotations

import asyncio
from typing import cast

from ..records import Site, StepIndex, StepRecord
from ..stores.base import Store

__all__ = ["all_records", "aread_journal", "journal_state", "read_journal", "site_of", "stored"]

State = tuple[dict[str, StepRecord | Site], dict[tuple[str, str], set[str]], int, str | None]
"""What a run knows on open: records (or sites) by key, unconsumed keys per site, last seq
and last step id."""


def read_journal(store: Store, run_id: str) -> list[StepRecord] | StepIndex:
    """The run's journal: an index of it when the store can read one, else every record."""
    load = getattr(store, "_load_index", None)
    journal: list[StepRecord] | StepIndex | None = None if load is None else load(run_id)
    return store.load_steps(run_id) if journal is None else journal


async def aread_journal(store: Store, run_id: str) -> list[StepRecord] | StepIndex:
    """Async twin of `read_journal` (natively where the store has `_aload_index`)."""
    aload = getattr(store, "_aload_index", None)
    if aload is not None:
        journal: list[StepRecord] | StepIndex = await aload(run_id)
        return journal
    if getattr(store, "_load_index", None) is None:
        return await store.aload_steps(run_id)
    return await asyncio.to_thread(read_journal, store, run_id)


def all_records(
    store: Store, run_id: str, known: dict[str, StepRecord | Site], indexed: bool
) -> list[StepRecord]:
    """Every record of the run: the ones in memory, and (`indexed`) the rest from the store."""
    if not indexed:
        return [r for r in known.values() if isinstance(r, StepRecord)]
    stored = {r.key: r for r in store.load_steps(run_id)}
    for key, value in known.items():
        if isinstance(value, StepRecord):
            stored[key] = value
    return sorted(stored.values(), key=lambda r: r.seq)


def journal_state(journal: list[StepRecord] | StepIndex) -> State:
    """The replay state of a run opened on `journal` (see `State`)."""
    unconsumed: dict[tuple[str, str], set[str]] = {}
    if isinstance(journal, StepIndex):
        by_site: dict[Site, set[str]] = {}  # the sites are shared tuples: few distinct ones
        for key, site in journal.sites.items():
            if site[2]:
                keys = by_site.get(site)
                if keys is None:
                    keys = by_site[site] = set()
                keys.add(key)
        unconsumed = {(kind, name): keys for (kind, name, _), keys in by_site.items()}
        sites = cast(dict[str, StepRecord | Site], journal.sites)  # written to as the run goes
        return sites, unconsumed, journal.seq, journal.last_step_id
    records: dict[str, StepRecord | Site] = {}
    seq = 0
    for record in journal:
        records[record.key] = record
        seq = max(seq, record.seq)
        if record.status == "completed" or record.meta.get("recorded"):
            unconsumed.setdefault((record.kind, record.name), set()).add(record.key)
    return records, unconsumed, seq, journal[-1].step_id if journal else None


def stored(
    store: Store, run_id: str, key: str, found: StepRecord | Site | None
) -> StepRecord | None:
    """The record behind what a run found under `key`: a `Site` is read from the store now."""
    if isinstance(found, tuple):
        record: StepRecord | None = store._load_step(run_id, key)  # type: ignore[attr-defined]
        return record
    return found


def site_of(found: StepRecord | Site | None) -> tuple[str, str] | None:
    """`(kind, name)` of what a run found under a key, or None."""
    if isinstance(found, StepRecord):
        return found.kind, found.name
    return None if found is None else (found[0], found[1])
