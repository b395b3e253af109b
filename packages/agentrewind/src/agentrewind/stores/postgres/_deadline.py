"""A client-side deadline on every PostgreSQL operation: a frozen server cannot hang a run.

`connect_timeout` covers new connections only and `lock_timeout` is enforced by the server,
so a server that stops answering (its processes stopped, a network partition that keeps the
TCP connection open) would block an operation for as long as it lasts: the kernel still
acknowledges the bytes, so TCP timeouts and keepalives never fire. One watchdog thread per
store keeps the deadline of each connection checked out for an operation; past it, it shuts
the connection's socket down, which wakes the blocked call (sync or on the event loop) with a
connection error, and the operation ends in `StoreUnavailableError` naming the server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from typing import Any

from ...errors import StoreUnavailableError

__all__ = ["Deadlines", "Ticket"]

_TICK = 0.1  # how late past its deadline a connection may be shut (well under the 1 s allowed)


class Ticket:
    """One checked-out connection's deadline; `fired` once the watchdog shut it."""

    __slots__ = ("conn", "deadline", "fired")

    def __init__(self, conn: Any, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.fired = False


class Deadlines:
    """The watchdog of one store's connections (started on first use, a daemon thread).

    Args:
        seconds: How long one operation (a checkout: one transaction, or one flow's worth)
            may take. None: no deadline.
        url: The server, for the error's message.
    """

    def __init__(self, seconds: float | None, url: str) -> None:
        self.seconds = seconds
        self.url = url
        self._tickets: dict[int, Ticket] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def wait(self, connect_timeout: float) -> float:
        """How long to wait for a pooled connection, within the deadline.

        It leaves the 2 s libpq needs at least to open a connection beside a pool that cannot
        connect.
        """
        if self.seconds is None:
            return connect_timeout
        return min(connect_timeout, max(self.seconds - 2, self.seconds / 2))

    def left(self, start: float) -> float | None:
        """Seconds left of an operation that started at `start` (None: no deadline)."""
        return None if self.seconds is None else self.seconds - (time.monotonic() - start)

    def arm(self, conn: Any, start: float) -> tuple[int, Ticket] | None:
        """Start the deadline of `conn`'s operation, which began at `start` (monotonic)."""
        if self.seconds is None:
            return None
        ticket = Ticket(conn, start + self.seconds)
        key = next(self._ids)
        with self._lock:
            self._tickets[key] = ticket
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="agentrewind-pg-deadline", daemon=True
                )
                self._thread.start()
        return key, ticket

    def disarm(self, armed: tuple[int, Ticket] | None) -> None:
        """The operation ended (either way): forget its deadline."""
        if armed is not None:
            with self._lock:
                self._tickets.pop(armed[0], None)

    def error(self, armed: tuple[int, Ticket] | None, exc: BaseException | None) -> BaseException:
        """`exc`, or the deadline's `StoreUnavailableError` when the watchdog caused it.

        With `exc` None: the deadline's error because no connection could be had in time.
        """
        if exc is not None and (armed is None or not armed[1].fired):
            return exc
        return StoreUnavailableError(
            f"PostgreSQL at {self.url} did not answer within {self.seconds:g}s (the server is "
            "stopped, overloaded or cut off): the connection was dropped; a write in flight "
            "may or may not have been applied (a fenced write is safe to retry: its lease "
            "check runs again)"
        )

    def _watch(self) -> None:
        while True:
            time.sleep(_TICK)
            now = time.monotonic()
            with self._lock:
                due = [t for t in self._tickets.values() if not t.fired and t.deadline <= now]
                for ticket in due:
                    ticket.fired = True
            for ticket in due:
                _shut(ticket.conn)


def _shut(conn: Any) -> None:
    """Shut `conn`'s socket down from this thread: the call blocked on it wakes with an error."""
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        dup = socket.socket(fileno=os.dup(fd))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()
