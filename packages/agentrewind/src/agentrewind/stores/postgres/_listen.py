"""PostgreSQL LISTEN/NOTIFY for subscriptions: a dedicated connection and a listener thread."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from ...errors import StoreError

__all__ = ["listen"]

log = logging.getLogger("agentrewind.stores.postgres")


def listen(db: Any, channel: str, callback: Callable[[str], None]) -> Callable[[], None]:
    """Deliver each `NOTIFY` payload on `channel` to `callback` from a background thread.

    LISTEN needs a session of its own, so it opens a dedicated connection (not from the
    pool, and not through a transaction-mode pooler). It is listening when this returns.

    Returns:
        A function that stops listening and closes that connection.
    """
    if not db.conninfo:
        raise StoreError("subscriptions need the store's URL or pool (not a bare connection)")
    try:
        conn = psycopg.connect(db.conninfo, autocommit=True)
        conn.execute(f'LISTEN "{channel}"')
    except psycopg.Error as exc:
        raise db.translate(exc) from exc
    stopping = threading.Event()

    def loop() -> None:
        while not stopping.is_set():
            try:
                for note in conn.notifies(timeout=0.2):
                    callback(note.payload)
            except psycopg.Error:
                if not stopping.is_set():
                    log.warning("PostgreSQL subscription on %s lost its connection", channel)
                return

    thread = threading.Thread(target=loop, name="agentrewind-pg-listen", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=2.0)
        with contextlib.suppress(Exception):
            conn.close()

    return stop
