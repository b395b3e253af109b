"""The Redis store's reads and deletes over many runs or steps, without reading them all.

A page of the runs index, deletes in pipelined batches, and a run's journal as an index.

The runs index (`_keys.runs_index`) is scored by update time, so `list_runs(limit=n)`
reads `n` members and their hashes in one pipeline whatever the namespace holds. Members of
runs that expired are skipped and removed (`DROP_GONE`: only if not written again since).
"""

from __future__ import annotations

import json
from typing import Any

from ...records import INDEX_FROM, RunInfo, RunMetrics, StepIndex, StepRecord, open_journal
from ..leases import cancel_meta, lease_owner_is_dead, run_status
from ..prune import BATCH
from . import _keys as K

__all__ = ["backfill", "delete_many", "list_page", "load_index", "run_info"]


def list_page(store: Any, limit: int, *, by_update: bool = True) -> list[RunInfo]:
    """Up to `limit` runs, most recently updated first, from the runs index.

    `by_update` False: the index is still scored by creation (a namespace of layout 2 opened
    read-only): every run is read and sorted.
    """
    client, index = store.client, store.runs_index
    infos: list[RunInfo] = []
    seen: set[str] = set()
    start = 0
    while len(infos) < limit or not by_update:
        stop = start + limit - len(infos) - 1 if by_update else -1
        with store.translate_errors():
            raw_page = client.zrevrange(index, start, stop, withscores=True)
            if not raw_page:
                break
            page = [(m.decode(), s) for m, s in raw_page if m.decode() not in seen]
            results = _read_runs(store, [run_id for run_id, _ in page])
        gone: list[Any] = []
        for (run_id, score), raw, holder in zip(page, results[::2], results[1::2], strict=True):
            seen.add(run_id)
            if raw:
                infos.append(run_info(run_id, raw, holder))
            else:
                gone += [run_id, repr(score)]
        dropped = (
            store.run_script("DROP_GONE", [index], gone) if gone and not store.read_only else 0
        )
        start += len(raw_page) - int(dropped)
        if not by_update:
            break
    if not by_update:
        infos.sort(key=lambda r: r.updated_at, reverse=True)
    return infos[:limit]


def _read_runs(store: Any, run_ids: list[str]) -> list[Any]:
    """Each run's hash (a dict) and lease holder, alternating.

    One script on a single Redis; one pipeline on a Cluster (the client splits it per node).
    """
    if store.cluster:
        pipe = store.client.pipeline(transaction=False)
        for run_id in run_ids:
            keys = store._keys(run_id)
            pipe.hgetall(keys.run)
            pipe.get(keys.lease)
        results: list[Any] = pipe.execute()
        return results
    keys = [k for ks in map(store._keys, run_ids) for k in (ks.run, ks.lease)]
    results = store.run_script("READ_RUNS", keys, []) if keys else []
    for i in range(0, len(results), 2):
        flat = results[i]
        results[i] = dict(zip(flat[::2], flat[1::2], strict=True))
    return results


def delete_many(store: Any, run_ids: list[str], force: bool) -> tuple[int, list[str]]:
    """Delete runs in batches, one pipeline of `DELETE_RUN` scripts per batch."""
    from . import _safety as safety

    deleted, skipped, source = 0, [], K.DELETE_RUN
    for i in range(0, len(run_ids), BATCH):
        batch = run_ids[i : i + BATCH]
        with store.translate_errors():
            pipe = store.client.pipeline(transaction=False)
            for run_id in batch:
                keys = store.delete_keys(run_id)
                args = ("1" if force else "", "", run_id)
                pipe.execute_command("EVAL", source, len(keys), *keys, *args)
            results = pipe.execute()
        done = []
        for run_id, (n, holder, _) in zip(batch, results, strict=True):
            if n >= 0:
                deleted += bool(n)
                done.append(run_id)
            elif lease_owner_is_dead(holder.decode()):  # rare: judged again, alone
                deleted += safety.delete_run(store, run_id, store.delete_keys(run_id), False)
                done.append(run_id)
            else:
                skipped.append(run_id)
        if store.cluster and done:  # the index lives in another slot: see `runs_index`
            with store.translate_errors():
                store.client.zrem(store.runs_index, *done)
    return deleted, skipped


def backfill(client: Any, prefix: str, namespace: str) -> int:
    """Score the runs index by each run's update time (layout 2 scored it by creation).

    Members whose run is gone are removed. `GT` keeps a newer score a writer set meanwhile.
    Returns how many runs were rescored.
    """
    index = K.runs_index(prefix, namespace)
    ids = [m.decode() for m in client.zrange(index, 0, -1)]
    moved = 0
    for i in range(0, len(ids), BATCH):
        batch = ids[i : i + BATCH]
        pipe = client.pipeline(transaction=False)
        for run_id in batch:
            pipe.hget(K.RunKeys.of(prefix, namespace, run_id).run, "updated_at")
        updated = pipe.execute()
        scores = {r: float(u) for r, u in zip(batch, updated, strict=True) if u is not None}
        if scores:
            client.zadd(index, scores, gt=True)
        gone = [r for r, u in zip(batch, updated, strict=True) if u is None]
        if gone:
            client.zrem(index, *gone)
        moved += len(scores)
    return moved


AHEAD = 256
"""Records a replay hit on Redis reads past its own (by seq): the ones it will likely hit next."""


def load_ahead(store: Any, run_id: str, key: str) -> bytes | None:
    """The encoded record of `key`, from what an earlier hit read ahead or with the next ones.

    Replays hit records in the order they were written, so a hit that finds nothing read
    ahead reads its record and the `AHEAD` next in one script: one round trip per 257 hits.
    Each record is handed out once; a write of its key drops it (`put_steps`).
    """
    ahead = store._ahead.get(run_id)
    if ahead is not None and key in ahead:
        return ahead.pop(key)  # type: ignore[no-any-return]
    keys = store._keys(run_id)
    found, datas = store.run_script("READ_AHEAD", [keys.steps, keys.order], [key, AHEAD])
    if len(store._ahead) > 64:
        store._ahead.clear()  # runs opened and left: keep the memory bounded
    fresh = {k.decode(): d for k, d in zip(found[1:], datas[1:], strict=True) if d is not None}
    store._ahead[run_id] = fresh
    return datas[0]  # type: ignore[no-any-return]


def load_index(store: Any, run_id: str) -> StepIndex | list[StepRecord]:
    """The run's journal: every record decoded when short, else an index (`StepIndex`).

    A long run is indexed from its `sites` hash (key to `[kind, name, replayable]`, written
    with each record) without reading a record: each is decoded, and its checksum verified,
    when a replay hit reads it. A run whose sites hash is incomplete (records written before
    it existed) is indexed from its records (`StepIndex.scan`).
    """
    keys = store._keys(run_id)
    with store.translate_errors():
        pipe = store.client.pipeline(transaction=False)  # one slot: the run's hash tag
        pipe.exists(keys.run)
        pipe.hlen(keys.steps)
        pipe.hlen(keys.sites)
        pipe.zrevrange(keys.order, 0, 0, withscores=True)
        exists, n_steps, n_sites, last = pipe.execute()
        if not exists:
            return []
        from_sites = n_steps >= INDEX_FROM and n_sites == n_steps
        raw = store.client.hgetall(keys.sites if from_sites else keys.steps)

    def last_step() -> tuple[int, str] | None:
        if not last:
            return None
        record = store._load_step(run_id, last[0][0].decode())
        return None if record is None else (int(last[0][1]), record.step_id)

    if not from_sites:
        rows = [(k.decode(), v) for k, v in raw.items()]
        return open_journal(rows, run_id=run_id, last=last_step)
    index = StepIndex.of_sites([k.decode() for k in raw], list(raw.values()), run_id=run_id)
    found = last_step()
    if found is not None:
        index.seq, index.last_step_id = found
    return index


def run_info(run_id: str, raw: dict[bytes, bytes], holder: bytes | None = b"") -> RunInfo:
    """A run hash as `RunInfo`; with its lease `holder` (None: none), a dead owner's `crashed`."""

    def get(name: str) -> str | None:
        value = raw.get(name.encode())
        return None if value is None else value.decode()

    updated = float(get("updated_at") or 0)
    status = get("status") or "running"
    meta: dict[str, float] = {}
    if holder != b"":
        lease = None if holder is None else (holder.decode(), float("inf"))
        status = run_status(status, lease, updated)
        meta = cancel_meta(lease) if status == "cancelled" else {}
    ttl_ms = get("ttl_ms")
    metrics_text = get("metrics")
    metrics = RunMetrics.from_dict(json.loads(metrics_text)) if metrics_text else RunMetrics()
    return RunInfo(
        run_id=run_id,
        status=status,
        created_at=float(get("created_at") or updated),
        updated_at=updated,
        expires_at=updated + int(ttl_ms) / 1000 if ttl_ms else None,
        metrics=metrics,
        meta=dict(meta),
    )
