"""The PostgreSQL store's journal writes as flows: one statement, behind the lease fence.

`put_steps` and `set_head` (and their async twins) drive these flows (`drive`, or `adrive` on
the event loop's async pool, no thread). The functions are the store's methods (`self` is the
store).
"""

from __future__ import annotations

import time
from typing import Any

from ...records import StepRecord, site_json
from ._flow import BigIntArray, BytesArray, PgFlow, TextArray

__all__ = ["heads_args", "put_steps", "set_head"]


def put_steps(
    self: Any,
    records: list[StepRecord],
    heads: dict[str, str] | None,
    owner: str | None,
    notify: tuple[str, str] | None,
    durable: bool,
) -> PgFlow[None]:
    """Steps and heads of one run (or unfenced, several) and the runs' clocks: one write."""
    head_run = self._heads_run(records, heads)
    if not records and not heads:
        return
    now = time.time()
    runs = list(dict.fromkeys(r.run_id for r in records))
    if head_run is not None and head_run not in runs:
        runs.append(head_run)
    args = {  # typed arrays: dumped in binary, no per-call element discovery (`_send`)
        "ns": self.namespace,
        "runs": TextArray(runs),
        "now": now,
        "runs_of": TextArray([r.run_id for r in records]),
        "keys": TextArray([r.key for r in records]),
        "ids": TextArray([r.step_id for r in records]),
        "seqs": BigIntArray([r.seq for r in records]),
        "datas": BytesArray([r.encode() for r in records]),
        "sites": TextArray([site_json(r.site) for r in records]),
    }
    args |= heads_args(self, head_run or "", heads if head_run is not None and heads else {})
    if owner is not None and len(runs) > 1:
        raise ValueError("a fenced put_steps writes records of one run")
    statement = (self.sql("PUT_STEPS"), args)
    yield from self._fenced_flow(runs[0], owner, statement, notify, durable=durable)


def set_head(
    self: Any,
    run_id: str,
    branch: str,
    step_id: str | None,
    owner: str | None,
    notify: tuple[str, str] | None,
) -> PgFlow[None]:
    """Move (or, `step_id=None`, delete) one branch head of `run_id`."""
    if step_id is None:
        args0 = {"ns": self.namespace, "run": run_id, "b": branch}
        yield from self._fenced_flow(run_id, owner, (self.sql("DELETE_HEAD"), args0), notify)
        return
    args: dict[str, Any] = {"runs": TextArray([run_id]), "now": time.time()}
    args |= {"runs_of": TextArray(), "keys": TextArray(), "ids": TextArray()}
    args |= {"seqs": BigIntArray(), "datas": BytesArray(), "sites": TextArray()}
    heads = args | heads_args(self, run_id, {branch: step_id})
    yield from self._fenced_flow(run_id, owner, (self.sql("PUT_STEPS"), heads), notify)


def heads_args(self: Any, run_id: str, heads: dict[str, str]) -> dict[str, Any]:
    """The `PUT_STEPS` arguments that move `heads` of `run_id` (none: moves nothing)."""
    return {
        "ns": self.namespace,
        "run": run_id,
        "branches": TextArray(heads),
        "heads": TextArray(heads.values()),
    }
