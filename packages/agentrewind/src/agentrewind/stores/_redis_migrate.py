"""Moving a Redis store written with key layout 1 (raw ids in keys) to layout 2 (encoded ids).

Layout 1 built keys as `PREFIX:NS:run:{ID}:part` and `PREFIX:NS:lg:{ID}:part` (the LangGraph
saver), with the namespace's index at `PREFIX:NS:runs` / `PREFIX:NS:lg:threads`. Those index
keys are the only unambiguous names in that layout, so the migration reads them: every run or
thread an index lists has its keys copied (DUMP/RESTORE, keeping their expiry) to the keys
`id_base` gives now and the old keys deleted. Keys no index names (already unreachable by any
reader) are left to expire. Copies work across Cluster slots, so this runs on a cluster too.

Writers of the old version must be stopped first: a key they write after its move is not seen.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import SchemaVersionError
from . import _redis_keys as K

# family segment in the key -> index name after the namespace
_FAMILIES = {"run": "runs", "lg": "lg:threads"}
_LOCK_MS = 120_000


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _s(raw: bytes | str) -> str:
    return raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw


def migrate_v1(client: Any, prefix: str, where: str) -> int:
    """Move every indexed run and thread under `prefix` to layout 2; return how many moved.

    Takes a lock key so that two upgraded processes do not move keys at once; a second one
    waits for the first to finish.

    Raises:
        SchemaVersionError: Another process holds the migration lock for too long.
    """
    lock = f"{prefix}:migrating"
    deadline = time.monotonic() + _LOCK_MS / 1000
    while not client.set(lock, "1", nx=True, px=_LOCK_MS):
        if time.monotonic() > deadline:
            raise SchemaVersionError(
                f"{where}: another process has been migrating prefix {prefix!r} to key layout "
                f"{K.REDIS_SCHEMA_VERSION} for over {_LOCK_MS // 1000} s; if it died, delete "
                f"the key {lock!r} and reconnect"
            )
        time.sleep(0.2)
    try:
        schema_key = K.SCHEMA_KEY.format(prefix=prefix)
        if int(client.get(schema_key) or 0) >= K.REDIS_SCHEMA_VERSION:
            return 0  # another process finished while we waited
        keys = {_s(k) for k in client.scan_iter(match=_glob_escape(prefix) + ":*", count=1000)}
        moved = 0
        head = prefix + ":"
        for key in sorted(keys):
            for family, index in _FAMILIES.items():
                if key.startswith(head) and key.endswith(":" + index):
                    namespace = key[len(head) : -len(index) - 1]
                    moved += _move_family(client, keys, prefix, namespace, family, key, index)
                    break
        client.set(schema_key, K.REDIS_SCHEMA_VERSION)
        return moved
    finally:
        client.delete(lock)


def _move_family(
    client: Any, keys: set[str], prefix: str, namespace: str, family: str, index: str, name: str
) -> int:
    ids = [_s(i) for i in client.zrange(index, 0, -1)]
    moved = 0
    for ident in ids:
        old = f"{prefix}:{namespace}:{family}:{{{ident}}}:"
        new = K.id_base(prefix, namespace, family, ident) + ":"
        parts = [k[len(old) :] for k in keys if k.startswith(old) and ":" not in k[len(old) :]]
        for part in parts:
            _move(client, old + part, new + part)
        moved += bool(parts)
    new_index = K.namespace_key(prefix, namespace, name)
    if new_index != index:
        _move(client, index, new_index)
    return moved


def _move(client: Any, src: str, dst: str) -> None:
    dumped = client.dump(src)
    if dumped is None:
        return  # expired meanwhile
    pttl = client.pttl(src)
    client.restore(dst, max(int(pttl), 0), dumped, replace=True)
    client.delete(src)
