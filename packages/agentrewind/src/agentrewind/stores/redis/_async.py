"""The async side of the Redis store: one event loop's `redis.asyncio` client and its batches.

Scripts and pipelines that callers queue in the same turn of the loop go out together in one
pipeline (a pipeline's commands contiguous and in order): 64 writers in flight cost a handful
of round trips, not 64. Made per loop by `RedisIO._async_side`; `store` is the `RedisStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from ._flow import Command, Pipeline, Script, queue, scripted

__all__ = ["AsyncSide"]

_POOL_SIZE = 16
"""Most connections of one event loop's async client (one per node on a cluster)."""
_MAX_BATCH = 128
"""Most queued scripts sent in one pipeline."""
_IN_FLIGHT = 4
"""Most pipelines of queued scripts on the wire at once (per event loop)."""


def _packer_class() -> Any:
    """A plain TCP connection of `redis.asyncio` packing commands with hiredis, when it is there.

    redis-py's async connections pack every argument in Python (its sync ones use hiredis):
    with many writers in flight that is a tenth of the event loop's time.
    """
    import redis.asyncio as aredis

    try:
        from redis.connection import HiredisRespSerializer
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:  # pragma: no cover - an older redis-py
        return aredis.Connection
    if not HIREDIS_AVAILABLE:  # pragma: no cover - hiredis is an optional extra of redis
        return aredis.Connection
    packer = HiredisRespSerializer()

    class HiredisPacked(aredis.Connection):
        def pack_command(self, *args: Any) -> list[bytes]:
            return packer.pack(*args)  # type: ignore[no-any-return]

    return HiredisPacked


class AsyncSide:
    """One event loop's `redis.asyncio` client and the queue of scripts and pipelines to send.

    A script or pipeline (not on a cluster) sent while another batch is on the wire waits for
    the next turn of the loop and goes out with everything queued by then, in one pipeline.
    """

    def __init__(self, store: Any) -> None:
        import redis.asyncio as aredis

        self.store = store
        url, options = store._connect
        if store.cluster:
            from redis.asyncio.cluster import RedisCluster

            self.client: Any = RedisCluster.from_url(url, max_connections=_POOL_SIZE, **options)
        else:
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            pool = aredis.BlockingConnectionPool.from_url(
                url,
                max_connections=_POOL_SIZE,
                timeout=options.get("socket_timeout"),
                retry=Retry(NoBackoff(), 1, supported_errors=(aredis.ConnectionError,)),
                **options,
            )
            if pool.connection_class is aredis.Connection:
                pool.connection_class = _packer_class()
            self.client = aredis.Redis(connection_pool=pool)
        self.queue: list[tuple[Script | Pipeline, asyncio.Future[Any]]] = []
        self.scheduled = False  # a send of the queue is due in this turn of the loop
        self.sending = 0  # batches on the wire
        # A cluster client's node pools refuse a connection past their size instead of
        # waiting for one: at most that many commands are on the wire at once.
        self.gate = asyncio.Semaphore(_POOL_SIZE)
        self.ready = not store.cluster

    async def send(self, item: Script | Command | Pipeline) -> Any:
        import redis

        if not self.ready:  # a cluster client learns its slots once, before any command
            async with self.gate:
                if not self.ready:
                    try:
                        await self.client.initialize()
                    except redis.RedisError as exc:
                        raise self.store._error(exc) from exc
                    self.ready = True

        if isinstance(item, Script) or (isinstance(item, Pipeline) and not self.store.cluster):
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.queue.append((item, fut))
            self._schedule()
            return await fut
        if isinstance(item, Pipeline) and scripted(item):  # a cluster pipeline refuses scripts
            return [await self.send(c) for c in item.commands]  # in order, one by one
        try:
            async with self.gate:
                if isinstance(item, Command):
                    return await getattr(self.client, item.name)(*item.args)
                pipe = self.client.pipeline(transaction=False)
                for c in item.commands:
                    queue(pipe, c, self.store._scripts)
                replies = await pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self.store._error(exc) from exc
        return self.store._replies(item.commands, replies, None)  # no script to re-run

    in_flight = _IN_FLIGHT

    def _schedule(self) -> None:
        if not self.scheduled and self.sending < self.in_flight:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        if not self.queue:
            return
        n = size = 0
        for item, _ in self.queue:  # a pipeline counts as its commands
            size += len(item.commands) if isinstance(item, Pipeline) else 1
            if n and size > _MAX_BATCH:
                break
            n += 1
        batch, self.queue = self.queue[:n], self.queue[n:]
        self.sending += 1
        task = asyncio.get_running_loop().create_task(self._send_batch(batch))
        task.add_done_callback(self._sent)

    def _sent(self, _: object) -> None:
        self.sending -= 1
        if self.queue:
            self._schedule()

    async def _send_batch(self, batch: list[tuple[Script | Pipeline, asyncio.Future[Any]]]) -> None:
        try:
            if len(batch) == 1 and isinstance(batch[0][0], Script):
                replies: list[Any] = [await self._one(batch[0][0])]
            elif self.store.cluster:  # a cluster pipeline refuses scripts (only scripts queue)
                replies = await asyncio.gather(*(self._one(s) for s, _ in batch))  # type: ignore[arg-type]
            else:
                pipe = self.client.pipeline(transaction=False)
                for item, _ in batch:
                    for c in item.commands if isinstance(item, Pipeline) else (item,):
                        queue(pipe, c, self.store._scripts)
                async with self.gate:
                    replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection failed: every item of the batch
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(self.store._error(exc))
            if not isinstance(exc, Exception):
                raise
            return
        i = 0
        for item, fut in batch:
            if isinstance(item, Pipeline):
                mine, i = replies[i : i + len(item.commands)], i + len(item.commands)
                if not fut.done():  # else its caller was cancelled
                    await self._settle(fut, item.commands, mine, many=True)
            else:
                i += 1
                if not fut.done():
                    await self._settle(fut, (item,), replies[i - 1 : i], many=False)

    async def _settle(
        self,
        fut: asyncio.Future[Any],
        commands: Sequence[Script | Command],
        replies: list[Any],
        *,
        many: bool,
    ) -> None:
        """Give `fut` the replies of its commands (a pipeline's list) or the first error."""
        import redis

        out = []
        for c, r in zip(commands, replies, strict=True):
            if isinstance(r, redis.exceptions.NoScriptError) and isinstance(c, Script):
                try:
                    r = await self._eval(c)
                except Exception as exc:
                    r = exc
            if isinstance(r, BaseException):
                if not fut.done():
                    fut.set_exception(self.store._error(r))
                return
            out.append(r)
        if not fut.done():
            fut.set_result(out if many else out[0])

    async def _one(self, s: Script) -> Any:
        """One script's reply, or its error as the reply (as a pipeline gives them)."""
        import redis

        sha = self.store._scripts[s.name][1]
        try:
            async with self.gate:
                return await self.client.evalsha(sha, len(s.keys), *s.keys, *s.args)
        except redis.RedisError as exc:
            return exc

    async def _eval(self, s: Script) -> Any:
        import redis

        try:
            async with self.gate:
                return await self.client.eval(self.store._scripts[s.name][0], len(s.keys),
                                              *s.keys, *s.args)  # fmt: skip
        except redis.RedisError as exc:
            raise self.store._error(exc) from exc

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.aclose()
            if not self.store.cluster:  # a client handed its pool leaves it open
                await self.client.connection_pool.disconnect()

    def close_now(self) -> None:
        """Close every connection without awaiting (its loop may be elsewhere or closed)."""
        if self.store.cluster:
            manager = self.client.nodes_manager
            nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
            conns = [c for n in nodes for c in getattr(n, "_connections", [])]
            self.client._initialize = True  # what its `aclose` sets: closed, not to warn
        else:
            pool = self.client.connection_pool
            conns = [*pool._available_connections, *pool._in_use_connections]
        for conn in conns:
            with contextlib.suppress(Exception):
                _drop(conn)


def _drop(conn: Any) -> None:
    """Close an asyncio connection of redis-py now, from outside its loop's turn.

    The loop may be closed, or never run again (a sync `close` at the end of `asyncio.run`),
    so nothing is left for it to do: the socket leaves the selector and is closed here. A
    transport of another kind (TLS) is closed the way redis-py's own `_close` does.
    """
    writer = getattr(conn, "_writer", None)
    if writer is None:
        return
    transport = writer.transport
    sock, fd = getattr(transport, "_sock", None), getattr(transport, "_sock_fd", None)
    if sock is None or fd is None:
        conn._close()
        return
    transport._closing = True
    loop = transport._loop
    with contextlib.suppress(Exception):
        loop._remove_reader(fd)
        loop._remove_writer(fd)
    sock.close()
    transport._sock = None
    conn._writer = conn._reader = None
