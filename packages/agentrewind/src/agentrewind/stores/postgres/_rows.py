"""Rows of the PostgreSQL store read back as records: a run and its metrics."""

from __future__ import annotations

import json
from typing import Any

from ...errors import StoreError
from ...records import RunInfo, RunMetrics

__all__ = ["run_info"]


def run_info(row: tuple[Any, ...]) -> RunInfo:
    """A `RunInfo` from a row of `RUN_COLUMNS`."""
    run_id, status, created, updated, expires, metrics = row
    try:
        # numeric sums come back as Decimal/int from jsonb: from_dict keeps the dataclass's types
        m = RunMetrics.from_dict(metrics if isinstance(metrics, dict) else json.loads(metrics))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run metrics are not readable: {exc}") from exc
    return RunInfo(
        run_id,
        status,
        float(created),
        float(updated),
        None if expires is None else float(expires),
        m,
    )
