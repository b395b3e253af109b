"""Connections of the sync hot path (`RedisIO.run_script`), without redis-py's pool checkout.

redis-py's `Redis.execute_command` takes a connection from its pool for every command: a
lock, observability bookkeeping and a `poll` syscall (is stale data waiting?) before the
command is sent, then the check-in. On loopback that is ~25 µs of a ~70 µs script call.
`Pins` keeps its own stack of idle connections, made from the pool's settings (URL, TLS,
timeouts, retry) but outside it: a caller pops one, sends, reads the reply and pushes it
back. Nothing is ever left unread on a pushed connection (any interruption between send and
reply drops the socket), so no check is needed. Threads share the stack: a thread pool made
per graph run does not open connections of its own.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

__all__ = ["Pins"]


class Pins:
    """Idle connections to one client's server, reused by every thread; see the module."""

    def __init__(self) -> None:
        self._idle: list[Any] = []  # list.pop / append are atomic: no lock
        self._pid = os.getpid()

    def call(self, client: Any, *args: Any) -> Any:
        """Send one command on an idle (or new) connection to `client`'s server; its reply.

        Errors are redis-py's, raised as from `client.execute_command` (see `pipeline`).
        """
        reply = self.pipeline(client, [args])[0]
        if isinstance(reply, Exception):  # an error reply, read whole: the connection is fine
            raise reply
        return reply

    def pipeline(self, client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send `commands` in one write on an idle connection; their replies, in order.

        An error reply is returned in its place, not raised (as `pipe.execute(raise_on_error=
        False)` does), so every reply is read and the connection stays usable. Only for
        commands whose raw reply is what the caller wants (EVALSHA: redis-py has no response
        callback for it). Retried as the client's connections are (the store's `Retry`: the
        whole batch once more on a fresh connection after a connection error).
        """
        import redis

        conn = self._take(client)

        def once() -> list[Any]:
            conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies

        try:
            replies: list[Any] = conn.retry.call_with_retry(once, lambda _: conn.disconnect())
        except BaseException:
            conn.disconnect()  # replies may be left unread: never reuse this socket as is
            raise
        self._idle.append(conn)
        return replies

    def _take(self, client: Any) -> Any:
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            self._idle, self._pid = [], os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            pass  # none idle: make one below, outside the handler, so that an error making
            # it is not reported "during handling of IndexError" (a defect it is not)
        pool = client.connection_pool
        return pool.connection_class(**pool.connection_kwargs)

    def close(self) -> None:
        """Close the idle connections (a later call connects again, as redis-py does)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):  # closing: nothing to do about a broken socket
                conn.disconnect()
