"""What the Redis store does about data it may lose or writers it must fence off.

Fenced writes, lease-safe deletes, detecting a server that lost its data, and the warning
about a server that persists nothing.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from ...errors import DataLostError, RedisPersistenceWarning, StoreError
from ..leases import LOST_CAUSES, check_fence, lease_owner_is_dead, leased_error
from . import _keys as K

__all__ = ["FenceFailure", "check_alive", "delete_run", "run_fenced", "warn_if_volatile"]

_WARNED_VOLATILE: set[str] = set()  # servers warned about (once per process)


class FenceFailure(Exception):
    """A fenced script refused a write: `holder`, `pttl` (ms) and whether the run exists.

    Parsed from the script's error reply (see `_keys._fence`).
    """

    def __init__(self, message: str) -> None:
        _, holder, pttl, exists = message.split("\t")
        super().__init__(message)
        self.holder = holder
        self.pttl = int(pttl)
        self.exists = exists == "1"


def warn_if_volatile(client: Any, url: str, enabled: bool | None) -> None:
    """Warn once per server and process when Redis keeps nothing across a restart.

    `enabled` None: on unless `$AGENTREWIND_REDIS_PERSISTENCE_WARNING` is `0`.
    """
    import redis

    if enabled is None:
        flag = os.environ.get("AGENTREWIND_REDIS_PERSISTENCE_WARNING", "1")
        enabled = flag.lower() not in ("0", "false", "no", "off")
    if not enabled or url in _WARNED_VOLATILE:
        return
    try:
        aof = client.config_get("appendonly").get("appendonly", "")
        save = client.config_get("save").get("save", "")
    except redis.RedisError:  # CONFIG disabled (managed services): cannot tell
        return
    if str(aof).lower() in ("no", "b'no'") and not str(save).strip(" '\"b"):
        _WARNED_VOLATILE.add(url)
        warnings.warn(
            RedisPersistenceWarning(
                f"Redis at {url} persists nothing (appendonly no, save ''): a restart loses "
                "every run and lease. agentrewind detects the loss at the next write of a run "
                "it was driving, but cannot bring the runs back. Turn on AOF (appendonly yes) "
                "or RDB snapshots (save), or silence this with persistence_warning=False or "
                "AGENTREWIND_REDIS_PERSISTENCE_WARNING=0"
            ),
            stacklevel=5,
        )


def run_fenced(
    store: Any,
    name: str,
    run_id: str,
    keys: list[str],
    owner: str | None,
    args: list[Any],
    now: float,
) -> Any:
    """Run the fenced write script `name` of one run; a refused write raises its named error."""
    try:
        return store.run_script(name, keys, [owner or "", *args])
    except FenceFailure as failed:
        assert owner is not None
        lease = (failed.holder, now + failed.pttl / 1000) if failed.holder else None
        check_fence(run_id, owner, lease, now, run_exists=failed.exists)
        raise AssertionError("unreachable: the fence check passed") from None


def delete_run(store: Any, run_id: str, keys: list[str], force: bool) -> bool:
    """Delete a run's keys in one script unless a live process holds its lease (or `force`)."""
    dead = ""
    for _ in range(3):
        args = ["1" if force else "", dead, run_id]
        deleted, holder, pttl = store.run_script("DELETE_RUN", keys, args)
        if deleted >= 0:
            return bool(deleted)
        holder = holder.decode() if isinstance(holder, bytes) else holder
        if not lease_owner_is_dead(holder):
            now = time.time()
            raise leased_error(run_id, (holder, now + int(pttl) / 1000), now)
        dead = holder  # judged dead here; deleted only if it still holds the lease
    raise StoreError(f"run {run_id!r}: its lease kept changing hands; not deleted")


def check_alive(store: Any, run_id: str) -> None:
    """Raise `DataLostError` once if the server lost its data since `store` connected.

    The schema key is written on connect; a restart without persistence or a flush removes
    it. It is written again (as `_check_schema` does), so the next attempt starts afresh.
    """
    key = K.SCHEMA_KEY.format(prefix=store.prefix)
    if store._call(lambda: store.client.set(key, 1, nx=True)):
        raise DataLostError(
            run_id,
            f"Redis at {store.url} lost its data since this store connected ({LOST_CAUSES}); "
            "runs it held are gone, so this run would start again from nothing and re-run its "
            "finished steps. Nothing was written; retrying starts the run afresh",
        )
