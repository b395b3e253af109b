"""What the stores hold about runs beyond `RunInfo`: step counts, lease holders, run kinds.

The store interface has no calls for step counts or lease holders yet, so they are read per
backend here, in one place (batched: `_CHUNK` runs per query or pipeline); `cli.status`
derives each run's kind and status from them and `agentrewind.numbers` its figures.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..records import StepRecord
from ..stores import Store
from .document import DOC_KEY, DOC_KIND

__all__ = ["Facts", "run_facts", "step_counts"]


@dataclasses.dataclass(slots=True)
class Facts:
    """What one run's rows say: its step count, lease, timeline head, document origin."""

    steps: int = 0
    lease: tuple[str, float] | None = None
    timeline: bool = False
    origin: Any = None
    lease_known: bool = True


_CHUNK = 500
"""Runs per batched query or pipeline."""


def _sqlite_facts(store: Store, ids: list[str], facts: dict[str, Facts]) -> None:
    db: Any = store.db  # type: ignore[attr-defined]
    marks = ",".join("?" * len(ids))
    ns = store.namespace
    with db.read() as conn:
        for r, n in conn.execute(
            f"SELECT run_id, count(*) FROM ar_steps WHERE ns = ? AND run_id IN ({marks}) "
            "AND key != ? GROUP BY run_id",
            (ns, *ids, DOC_KEY),
        ):
            facts[r].steps = int(n)
        for r, o, e in conn.execute(
            f"SELECT run_id, owner, expires_at FROM ar_leases WHERE ns = ? AND run_id IN ({marks})",
            (ns, *ids),
        ):
            facts[r].lease = (str(o), float(e))
        for (r,) in conn.execute(
            f"SELECT run_id FROM ar_heads WHERE ns = ? AND branch = 'HEAD' AND run_id IN ({marks})",
            (ns, *ids),
        ):
            facts[r].timeline = True
        for r, data in conn.execute(
            f"SELECT run_id, data FROM ar_steps WHERE ns = ? AND key = ? AND run_id IN ({marks})",
            (ns, DOC_KEY, *ids),
        ):
            facts[r].origin = StepRecord.decode(data).output


def _redis_facts(store: Store, ids: list[str], facts: dict[str, Facts]) -> None:
    keys = [store._keys(r) for r in ids]  # type: ignore[attr-defined]
    with store.translate_errors():  # type: ignore[attr-defined]
        pipe = store.client.pipeline(transaction=False)  # type: ignore[attr-defined]
        for k in keys:
            pipe.hlen(k.steps)
            pipe.hget(k.steps, DOC_KEY)
            pipe.get(k.lease)
            pipe.pttl(k.lease)
            pipe.hexists(k.heads, "HEAD")
        raw = pipe.execute()
    now = time.time()
    for i, r in enumerate(ids):
        n, doc, owner, pttl, timeline = raw[5 * i : 5 * i + 5]
        f = facts[r]
        f.steps = int(n) - (doc is not None)
        f.origin = None if doc is None else StepRecord.decode(doc).output
        if owner is not None:
            owner = owner.decode() if isinstance(owner, bytes) else str(owner)
            f.lease = (owner, now + max(int(pttl), 0) / 1000)
        f.timeline = bool(timeline)


def _postgres_facts(store: Store, ids: list[str], facts: dict[str, Facts]) -> None:
    db: Any = store.db  # type: ignore[attr-defined]
    s = store._q  # type: ignore[attr-defined]  # the quoted schema
    ns = store.namespace
    for r, n in db.fetchall(
        f"SELECT run_id, count(*) FROM {s}.ar_steps WHERE ns = %s AND run_id = ANY(%s) "
        "AND key <> %s GROUP BY run_id",
        (ns, ids, DOC_KEY),
    ):
        facts[r].steps = int(n)
    for r, o, e in db.fetchall(
        f"SELECT run_id, owner, expires_at FROM {s}.ar_leases WHERE ns = %s AND run_id = ANY(%s)",
        (ns, ids),
    ):
        facts[r].lease = (str(o), float(e))
    for (r,) in db.fetchall(
        f"SELECT run_id FROM {s}.ar_heads WHERE ns = %s AND branch = 'HEAD' AND run_id = ANY(%s)",
        (ns, ids),
    ):
        facts[r].timeline = True
    for r, data in db.fetchall(
        f"SELECT run_id, data FROM {s}.ar_steps WHERE ns = %s AND key = %s AND run_id = ANY(%s)",
        (ns, DOC_KEY, ids),
    ):
        facts[r].origin = StepRecord.decode(bytes(data)).output


def _generic_facts(store: Store, ids: list[str], facts: dict[str, Facts]) -> None:
    runs = getattr(store, "_runs", {})  # the memory store keeps its leases here
    for r in ids:
        steps = store.load_steps(r)
        doc = [s for s in steps if s.kind == DOC_KIND]
        facts[r].steps = len(steps) - len(doc)
        facts[r].origin = doc[0].output if doc else None
        facts[r].timeline = "HEAD" in store.get_heads(r)
        run = runs.get(r)
        facts[r].lease = getattr(run, "lease", None)
        facts[r].lease_known = store.scheme == "memory"  # other stores: no way to tell


def run_facts(store: Store, run_ids: list[str]) -> dict[str, Facts]:
    """What the store holds about each run of `run_ids` (batched per backend)."""
    facts = {r: Facts() for r in run_ids}
    readers = {"sqlite": _sqlite_facts, "redis": _redis_facts, "postgresql": _postgres_facts}
    read = readers.get(store.scheme, _generic_facts)
    for i in range(0, len(run_ids), _CHUNK):
        read(store, run_ids[i : i + _CHUNK], facts)
    return facts


def step_counts(store: Store, run_ids: list[str]) -> dict[str, int]:
    """How many steps each run holds (the run document record not counted)."""
    return {r: f.steps for r, f in run_facts(store, run_ids).items()}
