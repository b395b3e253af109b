"""psycopg_pool's warnings during an outage, folded into one line of ours per outage.

While the server is down or restarting, `psycopg_pool` logs a warning for each connection it
discards or fails to open ("discarding broken connection", "error connecting in ..."): dozens
of lines for an outage the store recovers from on its own. Warnings about the pools a store
opened (recognised by the pool's name, its worker threads' names, or the operation in
progress) are not shown; the store logs one warning when the first one arrives, and one
info line, with how many it folded, once an operation succeeds again. Warnings about other
pools of the application pass through untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Iterator

__all__ = ["Outages"]

log = logging.getLogger("agentrewind.stores.postgres")
_ACTIVE: contextvars.ContextVar[Outages | None] = contextvars.ContextVar(
    "agentrewind_pg_outages", default=None
)
_BY_NAME: weakref.WeakValueDictionary[str, Outages] = weakref.WeakValueDictionary()
_IDS = itertools.count(1)


class Outages:
    """One store's outage state, and the names its pools are opened with.

    Args:
        url: The server (redacted), for the messages.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"agentrewind-{next(_IDS)}"
        """The sync pool's name (the async pools': `name` + `-async`)."""
        self.since: float | None = None
        self.folded = 0
        self._lock = threading.Lock()
        _BY_NAME[self.name] = self
        _BY_NAME[f"{self.name}-async"] = self

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Mark the operation in progress (and the pool tasks it starts) as this store's."""
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)

    def fold(self, record: logging.LogRecord) -> None:
        """A pool warning of this store: counted; the first of an outage says so, once."""
        with self._lock:
            self.folded += 1
            first = self.since is None
            if first:
                self.since = time.monotonic()
        if first:
            log.warning(
                "PostgreSQL at %s: connections lost or refused (%s); operations fail with "
                "StoreUnavailableError while it is down; the pool reconnects by itself",
                self.url,
                record.getMessage().split(":", 1)[0],
            )

    def ok(self) -> None:
        """An operation succeeded: an outage in progress is over (one info line)."""
        if self.since is None:
            return
        with self._lock:
            since, folded = self.since, self.folded
            self.since, self.folded = None, 0
        if since is not None:
            log.info(
                "PostgreSQL at %s answers again after %.1fs (%d connection warnings of "
                "psycopg_pool folded)",
                self.url,
                time.monotonic() - since,
                folded,
            )


def _owner(record: logging.LogRecord) -> Outages | None:
    """The store whose pool `record` is about, or None (not one of ours)."""
    active = _ACTIVE.get()
    if active is not None:
        return active
    thread = record.threadName or ""
    for suffix in ("-scheduler", "-worker-"):
        if suffix in thread:
            found = _BY_NAME.get(thread.split(suffix, 1)[0])
            if found is not None:
                return found
    args = record.args if isinstance(record.args, tuple) else ()
    for arg in args:  # "error connecting in %r: %s" names the pool
        if isinstance(arg, str) and arg in _BY_NAME:
            return _BY_NAME.get(arg)
    return None


class _FoldOurs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        outages = _owner(record)
        if outages is None:
            return True
        outages.fold(record)
        return False


def _install() -> None:
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, _FoldOurs) for f in pool_log.filters):
        pool_log.addFilter(_FoldOurs())


_install()
