"""Ids for runs the caller did not name."""

from __future__ import annotations

import uuid
from collections.abc import Callable

__all__ = ["new_run_id"]


def _uuid4_hex() -> str:
    return uuid.uuid4().hex


try:  # the core's time-ordered ids sort runs by age; it has no public name for them yet
    from agentrewind._ids import new_id as _new_id
except ImportError:  # pragma: no cover - moved or renamed in the core
    _new_id = _uuid4_hex

_make: Callable[[], str] = _new_id


def new_run_id() -> str:
    """A new unique run id: time-ordered like the core's step ids (uuid4 hex as a fallback)."""
    return _make()
