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
from ..records import RunInfo, StepRecord
from ..stores import Store
from ..stores.leases import lease_owner_is_dead

__all__ = ["KINDS", "STATUSES", "RunView", "describe", "leases", "step_counts"]

KINDS = ("journal", "timeline", "fork", "import", "langgraph")
"""Kinds of run `runs --kind` filters on."""
STATUSES = (
    "queued", "running", "crashed", "cancelled", "completed", "failed", "partial", "paused",
    "active",
)  # fmt: skip
"""Statuses `runs` shows; `crashed`: `running` with no live lease (expired, or owner dead);
`cancelled`: marked by `cancel` (its lease holds the mark) until `resume`;
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


@dataclasses.dataclass(slots=True)
class _Facts:
    steps: int = 0
    lease: tuple[str, float] | None = None
    timeline: bool = False
    origin: Any = None
    lease_known: bool = True


_CHUNK = 500
"""Runs per batched query or pipeline."""


def _sqlite_facts(store: Store, ids: list[str], facts: dict[str, _Facts]) -> None:
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


def _redis_facts(store: Store, ids: list[str], facts: dict[str, _Facts]) -> None:
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


def _postgres_facts(store: Store, ids: list[str], facts: dict[str, _Facts]) -> None:
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


def _generic_facts(store: Store, ids: list[str], facts: dict[str, _Facts]) -> None:
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


def _facts(store: Store, run_ids: list[str]) -> dict[str, _Facts]:
    facts = {r: _Facts() for r in run_ids}
    readers = {"sqlite": _sqlite_facts, "redis": _redis_facts, "postgresql": _postgres_facts}
    read = readers.get(store.scheme, _generic_facts)
    for i in range(0, len(run_ids), _CHUNK):
        read(store, run_ids[i : i + _CHUNK], facts)
    return facts


def step_counts(store: Store, run_ids: list[str]) -> dict[str, int]:
    """How many steps each run holds (the run document record not counted)."""
    return {r: f.steps for r, f in _facts(store, run_ids).items()}


def leases(store: Store, run_ids: list[str]) -> dict[str, tuple[str, float] | None]:
    """`(owner, expires_at)` of each run's lease, None when no lease is held."""
    return {r: f.lease for r, f in _facts(store, run_ids).items()}


def describe(store: Store, infos: list[RunInfo]) -> list[RunView]:
    """The kind, true step count, lease and status of each run of the store."""
    facts = _facts(store, [i.run_id for i in infos])
    views = []
    for info in infos:
        f = facts[info.run_id]
        forked = f.origin.get("forked_from") if isinstance(f.origin, dict) else None
        if forked:
            kind = "fork"
        elif f.timeline:
            kind = "timeline"
        elif f.origin is not None:
            kind = "import"
        else:
            kind = "journal"
        status = info.status
        # A store that knows crashed runs (fenced stores) reports them itself; a timeline
        # holds no lease between writes, so "running without a lease" is its normal state.
        if status in ("running", "crashed") and kind == "timeline" and f.lease is None:
            status = "active"
        elif status == "running" and f.lease_known and not (f.lease and lease_alive(f.lease)):
            status = "crashed"
        views.append(RunView(info, "agentrewind", kind, status, f.steps, f.lease, forked))
    return views
