"""Key layout versions of a Redis namespace, and moving one from layout 1 or 2 to layout 3.

Layout 1 (agentrewind 0.1) built keys from raw ids: `PREFIX:NS:run:{ID}:part` and, for the
LangGraph saver, `PREFIX:NS:lg:{ID}:part`, with the namespace's indexes at `PREFIX:NS:runs` and
`PREFIX:NS:lg:threads`. Layout 2 encodes namespace and ids (`_keys.id_base`).

The layout is tracked per namespace (`PREFIX:NS:layout`), so a new namespace starts at 2 without
touching anyone else's keys. A namespace without that key is probed: if its indexes name runs
or threads whose layout-1 keys exist, it holds old data and must be migrated; otherwise it is
marked 2. The migration reads the indexes (the only unambiguous names of layout 1), copies each
listed run's and thread's keys to their layout-2 names (DUMP/RESTORE keeps their expiry and
works across Cluster slots) and deletes the old ones. Keys no index names were unreachable by
any reader already and are left to expire. It then sets the prefix's schema version to 3, so
processes of the old version refuse to open the store instead of writing layout-1 keys.

Writers of the old version must be stopped first: a key they write after its move is not seen.

Layout 3 scores the runs index by each run's last update instead of its creation. Opening a
namespace of layout 2 rescores its index from the run hashes (`_runs.backfill`; no
flag needed: nothing moves) and, if it held runs, sets the prefix's schema version to 3, so
processes of layout 2 (which would leave their writes at a stale place in the index) refuse
to open it: upgrade them too.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import SchemaVersionError
from . import _keys as K
from ._runs import backfill

# family segment -> (index name after the namespace, a part every id of the family has)
_FAMILIES = {"run": ("runs", "run"), "lg": ("lg:threads", "th")}
_PROBE = 20
_LOCK_MS = 120_000


def _s(raw: bytes | str) -> str:
    return raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def holds_layout_1(client: Any, prefix: str, namespace: str) -> bool:
    """True when the namespace's indexes name runs or threads stored under layout 1."""
    for family, (index, part) in _FAMILIES.items():
        ids = client.zrange(f"{prefix}:{namespace}:{index}", 0, _PROBE - 1)
        for ident in ids:
            if client.exists(f"{prefix}:{namespace}:{family}:{{{_s(ident)}}}:{part}"):
                return True
    return False


def check_layout(client: Any, prefix: str, namespace: str, *, migrate: bool, where: str) -> None:
    """Make sure the namespace is at layout 2: mark it, migrate it, or refuse.

    Raises:
        SchemaVersionError: The namespace holds layout-1 data and `migrate` is False, or
            another process has held the migration lock for too long.
    """
    layout_key = K.namespace_key(prefix, namespace, "layout")
    layout = int(client.get(layout_key) or 0)
    if layout >= K.REDIS_SCHEMA_VERSION:
        return
    if layout >= 2 or not holds_layout_1(client, prefix, namespace):
        _rescore(client, prefix, namespace)
        return
    if not migrate:
        raise SchemaVersionError(
            f"{where}: namespace {namespace!r} (prefix {prefix!r}) holds runs stored with key "
            f"layout 1; this agentrewind uses layout {K.REDIS_SCHEMA_VERSION} (encoded ids). "
            "Stop the processes of the old version, then connect once with migrate=True (or "
            "?migrate=1 in the URL) to move the keys"
        )
    migrate_namespace(client, prefix, namespace, where)


def migrate_namespace(client: Any, prefix: str, namespace: str, where: str) -> int:
    """Move every indexed run and thread of a namespace to layout 2; return how many moved."""
    layout_key = K.namespace_key(prefix, namespace, "layout")
    lock = f"{layout_key}:migrating"
    deadline = time.monotonic() + _LOCK_MS / 1000
    while not client.set(lock, "1", nx=True, px=_LOCK_MS):
        if time.monotonic() > deadline:
            raise SchemaVersionError(
                f"{where}: another process has been migrating namespace {namespace!r} for over "
                f"{_LOCK_MS // 1000} s; if it died, delete the key {lock!r} and reconnect"
            )
        time.sleep(0.2)
    try:
        if int(client.get(layout_key) or 0) >= K.REDIS_SCHEMA_VERSION:
            return 0  # another process finished while we waited
        head = f"{prefix}:{namespace}:"
        keys = {_s(k) for k in client.scan_iter(match=_glob_escape(head) + "*", count=1000)}
        moved = sum(
            _move_family(client, keys, prefix, namespace, family, index)
            for family, (index, _) in _FAMILIES.items()
        )
        backfill(client, prefix, namespace)
        client.set(layout_key, K.REDIS_SCHEMA_VERSION)
        client.set(K.SCHEMA_KEY.format(prefix=prefix), K.REDIS_SCHEMA_VERSION)
        return moved
    finally:
        client.delete(lock)


def _rescore(client: Any, prefix: str, namespace: str) -> None:
    """Layout 2 to 3: score the runs index by update time, then mark the namespace."""
    if backfill(client, prefix, namespace):
        schema = K.SCHEMA_KEY.format(prefix=prefix)
        if int(client.get(schema) or 0) < K.REDIS_SCHEMA_VERSION:
            client.set(schema, K.REDIS_SCHEMA_VERSION)  # layout-2 writers now refuse
    client.set(K.namespace_key(prefix, namespace, "layout"), K.REDIS_SCHEMA_VERSION)


def _move_family(
    client: Any, keys: set[str], prefix: str, namespace: str, family: str, index: str
) -> int:
    old_index = f"{prefix}:{namespace}:{index}"
    moved = 0
    for ident in (_s(i) for i in client.zrange(old_index, 0, -1)):
        old = f"{prefix}:{namespace}:{family}:{{{ident}}}:"
        new = K.id_base(prefix, namespace, family, ident) + ":"
        parts = [k[len(old) :] for k in keys if k.startswith(old) and ":" not in k[len(old) :]]
        for part in parts:
            _move(client, old + part, new + part)
        moved += bool(parts)
    new_index = K.namespace_key(prefix, namespace, index)
    if new_index != old_index:
        _move(client, old_index, new_index)
    return moved


def _move(client: Any, src: str, dst: str) -> None:
    dumped = client.dump(src)
    if dumped is None:
        return  # expired meanwhile
    pttl = client.pttl(src)
    client.restore(dst, max(int(pttl), 0), dumped, replace=True)
    client.delete(src)
