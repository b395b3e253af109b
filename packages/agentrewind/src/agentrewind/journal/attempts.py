"""Attempts are history: a killed or failed attempt of a call is kept beside the one replacing it.

A call whose recording is `started` (its process died) or `failed` (it raised, and failures
are not replayed) runs again as a new record with a new step id; before that record is written
the earlier one is re-keyed to `<key>@<n>` (n its attempt number, the most recent
`ATTEMPTS_KEPT` kept) in the same atomic write, with its seq, error and timings unchanged. The
replay decision reads only `<key>`, so an attempt never replays; `log`, `show`, `export` and the
viewer read every record, so they show each attempt under its own seq.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Any

from ..records import StepRecord, base_key

__all__ = ["ATTEMPTS_KEPT", "attempt_key", "base_key", "replaced", "replacing"]

ATTEMPTS_KEPT = 10
"""How many replaced attempts of one call are kept (the most recent), as records under
`<key>@<n>`: a call retried forever stays bounded (and they count in retention)."""


def attempt_key(key: str, attempt: int) -> str:
    """Where attempt number `attempt` (1-based) of the call under `key` is kept."""
    return f"{key}@{(attempt - 1) % ATTEMPTS_KEPT + 1}"


def _number(prior: StepRecord) -> int:
    n = prior.meta.get("attempt", 1)
    return n if isinstance(n, int) and n >= 1 else 1


def replacing(prior: StepRecord, now: float) -> dict[str, Any]:
    """Meta of the attempt that replaces `prior`: its number and the resume marker."""
    why = "crashed" if prior.status == "started" else "failed"
    return {
        "attempt": _number(prior) + 1,
        "replaces": {"step_id": prior.step_id, "seq": prior.seq, "status": prior.status},
        "resumed": {"why": why, "at": now, "pid": os.getpid(), "host": socket.gethostname()},
    }


def replaced(prior: StepRecord, by: str) -> StepRecord:
    """`prior` re-keyed as history, linked to the step id `by` of the attempt replacing it."""
    n = _number(prior)
    meta = {**prior.meta, "attempt": n, "replaced_by": by}
    return dataclasses.replace(prior, key=attempt_key(prior.key, n), meta=meta)
