"""What a run's records note for viewers: the replays before each write, divergence, takeover.

A replay writes nothing (so it stays cheap); the replays since the last write are noted on the
next record the run writes (`meta["replayed"]`, `meta["replayed_count"]`), and a call that ran
because its input changed is marked `meta["diverged"]`. `agentrewind ui` draws them.
"""

from __future__ import annotations

import logging
from typing import Any

from .._callsite import warn_at_caller
from ..errors import DivergenceWarning, RerunWarning
from ..records import RunInfo

MAX_NOTED = 1000
"""At most this many replayed keys are noted on one record (the count is always kept)."""

_CARRIED = ("replayed", "replayed_count", "diverged", "attempt", "replaces", "resumed")


class Notes:
    """Replays not yet written down and the keys that diverged, for one execution of a run."""

    __slots__ = ("diverged", "replayed")

    def __init__(self) -> None:
        self.replayed: list[str] = []
        self.diverged: set[str] = set()

    def diverge(self, run_id: str, key: str, *, strict: bool) -> None:
        """Note that `key` diverged (its input changed since the run was recorded)."""
        self.diverged.add(key)
        logging.getLogger("agentrewind.journal").debug(
            "run %r: divergence at %s (strict=%s)", run_id, key, strict
        )

    def apply(self, key: str, meta: dict[str, Any], started: dict[str, Any] | None) -> None:
        """Add the notes to `meta` of the record being written for `key`.

        `started` is the meta of the call's `started` record, whose notes its completion keeps.
        """
        if started:
            for name in _CARRIED:
                if name in started:
                    meta.setdefault(name, started[name])
        if self.replayed:
            meta["replayed"] = self.replayed[:MAX_NOTED]
            meta["replayed_count"] = len(self.replayed)
            self.replayed = []
        if key in self.diverged:
            meta["diverged"] = True


def taken_over(prior: RunInfo | None) -> bool:
    """A run still `running` when a new owner gets its lease: the last owner died or stalled."""
    return prior is not None and prior.status in ("running", "crashed")


def divergence_message(run_id: str, kind: str, name: str, key: str, pending: int) -> str:
    """What a divergence warning or error says: the call, its key, the unreplayed records."""
    return (
        f"run {run_id!r} diverged: {kind} call {name!r} has no recording under {key!r} "
        f"while {pending} recorded call(s) of the same site were not replayed; its "
        "input changed since the run was recorded, so it runs again"
    )


def warn_rerun(run_id: str, key: str) -> None:
    """A `RerunWarning` at the user's line: the call that runs again, and why it matters."""
    warn_at_caller(
        RerunWarning(
            f"run {run_id!r}: {key!r} started in an earlier attempt and was never recorded as "
            "completed (its process died in it, or its end could not be written); it runs "
            "again, so an effect it had may happen twice "
            "(pass agentrewind.idempotency_key() downstream, or on_incomplete='skip'/'raise')"
        )
    )


def warn_divergence(message: str) -> None:
    """A `DivergenceWarning` at the user's line."""
    warn_at_caller(DivergenceWarning(message))
