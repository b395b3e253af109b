"""What the CLI reports about a run beyond `RunInfo`: kind, true step count, lease, status.

The status tells a crashed run from a running one.

The store interface has no calls for step counts or lease holders yet, so `step_counts` and
`leases` read them per backend here, in one place; when the store grows those calls
(`Store.lease_info`, a store-level `crashed` status), only this module changes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..documents.document import DOC_KEY, DOC_KIND
from ..records import RunInfo
from ..stores import Store
from ..stores._base import lease_owner_is_dead

__all__ = ["KINDS", "STATUSES", "RunView", "describe", "leases", "step_counts"]

KINDS = ("journal", "timeline", "fork", "import", "langgraph")
"""Kinds of run `runs --kind` filters on."""
STATUSES = ("running", "crashed", "completed", "failed", "partial", "paused", "active")
"""Statuses `runs` shows; `crashed`: `running` with no live lease (expired, or owner dead);
`active`: a timeline (it holds no lease between writes)."""


@dataclasses.dataclass(slots=True)
class RunView:
    """A run as the CLI lists it."""

    info: RunInfo
    source: str
    kind: str
    status: str
    steps: int
    lease: tuple[str, float] | None = None
    forked_from: str | None = None

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.info.run_id

    @property
    def leased(self) -> bool:
        """True while a live process holds the run's lease."""
        return self.lease is not None and lease_alive(self.lease)


def lease_alive(lease: tuple[str, float]) -> bool:
    """A lease `(owner, expires_at)` that has not expired and whose owner is not dead."""
    owner, expires = lease
    return expires > time.time() and not lease_owner_is_dead(owner)


def step_counts(store: Store, run_ids: list[str]) -> dict[str, int]:
    """How many steps each run holds (the run document record not counted)."""
    if not run_ids:
        return {}
    if store.scheme == "sqlite":
        db: Any = store.db  # type: ignore[attr-defined]
        marks = ",".join("?" * len(run_ids))
        with db.read() as conn:
            rows = conn.execute(
                f"SELECT run_id, count(*) FROM ar_steps WHERE ns = ? AND run_id IN ({marks}) "
                "AND key != ? GROUP BY run_id",
                (store.namespace, *run_ids, DOC_KEY),
            ).fetchall()
        return {r: 0 for r in run_ids} | {str(r): int(n) for r, n in rows}
    if store.scheme == "redis":
        keys = [store._keys(r) for r in run_ids]  # type: ignore[attr-defined]
        with store.translate_errors():  # type: ignore[attr-defined]
            pipe = store.client.pipeline(transaction=False)  # type: ignore[attr-defined]
            for k in keys:
                pipe.hlen(k.steps)
                pipe.hexists(k.steps, DOC_KEY)
            raw = pipe.execute()
        return {r: int(raw[2 * i]) - int(bool(raw[2 * i + 1])) for i, r in enumerate(run_ids)}
    return {r: sum(s.kind != DOC_KIND for s in store.load_steps(r)) for r in run_ids}


def leases(store: Store, run_ids: list[str]) -> dict[str, tuple[str, float] | None]:
    """`(owner, expires_at)` of each run's lease, None when no lease is held."""
    found: dict[str, tuple[str, float] | None] = dict.fromkeys(run_ids)
    if not run_ids:
        return found
    if store.scheme == "sqlite":
        db: Any = store.db  # type: ignore[attr-defined]
        marks = ",".join("?" * len(run_ids))
        with db.read() as conn:
            rows = conn.execute(
                f"SELECT run_id, owner, expires_at FROM ar_leases WHERE ns = ? "
                f"AND run_id IN ({marks})",
                (store.namespace, *run_ids),
            ).fetchall()
        found |= {str(r): (str(o), float(e)) for r, o, e in rows}
    elif store.scheme == "redis":
        keys = [store._keys(r).lease for r in run_ids]  # type: ignore[attr-defined]
        with store.translate_errors():  # type: ignore[attr-defined]
            pipe = store.client.pipeline(transaction=False)  # type: ignore[attr-defined]
            for k in keys:
                pipe.get(k)
                pipe.pttl(k)
            raw = pipe.execute()
        now = time.time()
        for i, r in enumerate(run_ids):
            owner, pttl = raw[2 * i], raw[2 * i + 1]
            if owner is not None:
                owner = owner.decode() if isinstance(owner, bytes) else str(owner)
                found[r] = (owner, now + max(int(pttl), 0) / 1000)
    elif store.scheme == "memory":
        runs = store._runs  # type: ignore[attr-defined]
        for r in run_ids:
            run = runs.get(r)
            found[r] = None if run is None else run.lease
    return found


def describe(store: Store, infos: list[RunInfo]) -> list[RunView]:
    """The kind, true step count, lease and status of each run of the store."""
    ids = [i.run_id for i in infos]
    counts = step_counts(store, ids)
    held = leases(store, ids)
    views = []
    for info in infos:
        heads = store.get_heads(info.run_id)
        doc = store.get_step(info.run_id, f"document-{info.run_id}")
        origin = doc.output if doc is not None and doc.kind == DOC_KIND else None
        forked = origin.get("forked_from") if isinstance(origin, dict) else None
        if forked:
            kind = "fork"
        elif "HEAD" in heads:
            kind = "timeline"
        elif origin is not None:
            kind = "import"
        else:
            kind = "journal"
        lease = held.get(info.run_id)
        status = info.status
        if status == "running" and kind == "timeline" and lease is None:
            status = "active"
        elif status == "running" and (lease is None or not lease_alive(lease)):
            status = "crashed"
        views.append(
            RunView(info, "agentrewind", kind, status, counts.get(info.run_id, 0), lease, forked)
        )
    return views
