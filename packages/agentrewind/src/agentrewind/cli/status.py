"""What the CLI reports about a run beyond `RunInfo`: kind, true step count, lease, status.

The status tells a crashed run from a running one. Step counts and lease holders are read per
backend in `documents.facts`.
"""

from __future__ import annotations

import dataclasses
import time

from ..documents.facts import run_facts
from ..records import RunInfo
from ..stores import Store
from ..stores.leases import lease_owner_is_dead

__all__ = ["KINDS", "STATUSES", "RunView", "describe"]

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


def describe(store: Store, infos: list[RunInfo]) -> list[RunView]:
    """The kind, true step count, lease and status of each run of the store."""
    facts = run_facts(store, [i.run_id for i in infos])
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
