"""Redis I/O written once: operations as generators of commands, sent by a sync or async client.

An operation (a checkpoint write, a read with paging...) is a generator, a *flow*, that
yields what it needs sent to Redis and receives the reply at the `yield`:

- `Script(name, keys, args)`: a registered Lua script (one EVALSHA; EVAL once if the server
  lacks it). A fenced script's refusal is raised as `FenceFailure`.
- `Command(name, *args)`: one client method, such as `zadd` or `zrange`.
- `Pipeline(commands)`: several `Script`/`Command`s in one non-transactional pipeline (one
  round trip per node); the reply is the list of their replies.

`RedisIO.drive(flow)` runs a flow on the store's sync client; `await RedisIO.adrive(flow)`
on a `redis.asyncio` client of the running event loop (one per loop, with a bounded pool), so
async callers never wait on a thread. The async side sends the scripts that callers queue in
the same turn of the loop together in one pipeline: 64 writers in flight cost a handful of
round trips, not 64. Errors come out as `StoreUnavailableError` / `StoreError` either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeVar

from . import _redis_keys as K
from ._redis_safety import FenceFailure

__all__ = ["Command", "Pipeline", "RedisFlow", "RedisIO", "Script"]

T = TypeVar("T")
_POOL_SIZE = 16
"""Most connections of one event loop's async client (one per node on a cluster)."""
_MAX_BATCH = 128
"""Most queued scripts sent in one pipeline."""
_IN_FLIGHT = 4
"""Most pipelines of queued scripts on the wire at once (per event loop)."""


@dataclasses.dataclass(slots=True, frozen=True)
class Script:
    """Run the registered Lua script `name` with `keys` and `args`."""

    name: str
    keys: list[str]
    args: list[Any]


@dataclasses.dataclass(slots=True, frozen=True, init=False)
class Command:
    """Call the client method `name` with `args`."""

    name: str
    args: tuple[Any, ...]

    def __init__(self, name: str, *args: Any) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)


@dataclasses.dataclass(slots=True, frozen=True)
class Pipeline:
    """Send `commands` in one non-transactional pipeline; the reply is their replies."""

    commands: Sequence[Script | Command]


RedisFlow = Generator[Script | Command | Pipeline, Any, T]
"""An operation that yields what to send and receives each reply."""


class RedisIO:
    """The sync and async transports of `RedisStore` (mixed into it).

    Expects `client`, `cluster`, `_translate` and the connection settings `_connect` of the
    store (set by its constructor).
    """

    client: Any
    cluster: bool
    _scripts: dict[str, tuple[str, str]]
    _connect: tuple[str, dict[str, Any]]
    _aclients: dict[asyncio.AbstractEventLoop, _AsyncSide]

    def _translate(self, exc: Exception) -> Exception:  # pragma: no cover - the store's
        raise NotImplementedError

    def register_scripts(self, sources: Mapping[str, str]) -> None:
        """Make Lua scripts callable by name with `run_script` (adapters add their own)."""
        for name, source in sources.items():
            self._scripts[name] = (source, hashlib.sha1(source.encode()).hexdigest())

    def run_script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run a registered script: one EVALSHA (EVAL once if the server lacks it).

        Errors come out as `StoreUnavailableError` / `StoreError`, like every store call.
        """
        # EVALSHA straight from the client: this is the hot path of every write, so it skips
        # redis-py's Script wrapper and the generator-based error context manager.
        import redis

        source, sha = self._scripts[name]
        try:
            try:
                return self.client.evalsha(sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return self.client.eval(source, len(keys), *keys, *args)
        except redis.RedisError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: BaseException) -> Exception:
        import redis

        if isinstance(exc, redis.ResponseError) and str(exc).startswith(K.FENCE_MARK):
            return FenceFailure(str(exc))
        if isinstance(exc, redis.RedisError):
            return self._translate(exc)
        return exc  # type: ignore[return-value]

    # -- the sync transport ------------------------------------------------------------------
    def drive(self, flow: RedisFlow[T]) -> T:
        """Run `flow` on the sync client; returns its result."""
        reply: Any = None
        while True:
            try:
                item = flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply = self._send(item)

    def _send(self, item: Script | Command | Pipeline) -> Any:
        if isinstance(item, Script):
            return self.run_script(item.name, item.keys, item.args)
        import redis

        if isinstance(item, Pipeline) and self.cluster and _scripted(item):
            return [self._send(c) for c in item.commands]  # a cluster pipeline refuses scripts
        try:
            if isinstance(item, Command):
                return getattr(self.client, item.name)(*item.args)
            pipe = self.client.pipeline(transaction=False)
            for c in item.commands:
                _queue(pipe, c, self._scripts)
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self._error(exc) from exc
        return self._replies(item.commands, replies, self.run_script)

    def _replies(self, commands: Sequence[Script | Command], replies: list[Any], rerun: Any) -> Any:
        import redis

        out = []
        for c, r in zip(commands, replies, strict=True):
            if isinstance(r, redis.exceptions.NoScriptError) and isinstance(c, Script):
                r = rerun(c.name, c.keys, c.args)
            elif isinstance(r, BaseException):
                raise self._error(r) from r
            out.append(r)
        return out

    # -- the async transport -----------------------------------------------------------------
    async def adrive(self, flow: RedisFlow[T]) -> T:
        """Run `flow` on this event loop's `redis.asyncio` client; returns its result."""
        side = self._async_side()
        reply: Any = None
        while True:
            try:
                item = flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply = await side.send(item)

    def _async_side(self) -> _AsyncSide:
        loop = asyncio.get_running_loop()
        side = self._aclients.get(loop)
        if side is None:
            for old in [lp for lp in self._aclients if lp.is_closed()]:
                self._aclients.pop(old).close_now()
            side = self._aclients[loop] = _AsyncSide(self)
        return side

    async def aclose_async(self) -> None:
        """Close this event loop's async client (others are closed by `close_async`)."""
        loop = asyncio.get_running_loop()
        side = self._aclients.pop(loop, None)
        if side is not None:
            await side.aclose()

    def close_async(self) -> None:
        """Close every loop's async client now, without awaiting (for the sync `close`)."""
        sides, self._aclients = list(self._aclients.values()), {}
        for side in sides:
            side.close_now()


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


def _scripted(item: Pipeline) -> bool:
    return any(isinstance(c, Script) for c in item.commands)


def _queue(pipe: Any, c: Script | Command, scripts: dict[str, tuple[str, str]]) -> None:
    if isinstance(c, Script):
        pipe.evalsha(scripts[c.name][1], len(c.keys), *c.keys, *c.args)
    else:
        getattr(pipe, c.name)(*c.args)


class _AsyncSide:
    """One event loop's `redis.asyncio` client and the queue of scripts waiting to be sent.

    A script sent while another batch is on the wire waits for the next turn of the loop and
    goes out with every script queued by then, in one pipeline.
    """

    def __init__(self, store: RedisIO) -> None:
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
        self.queue: list[tuple[Script, asyncio.Future[Any]]] = []
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

        if isinstance(item, Script):
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.queue.append((item, fut))
            self._schedule()
            return await fut
        if isinstance(item, Pipeline) and self.store.cluster and _scripted(item):
            return [await self.send(c) for c in item.commands]  # in order, one by one
        try:
            async with self.gate:
                if isinstance(item, Command):
                    return await getattr(self.client, item.name)(*item.args)
                pipe = self.client.pipeline(transaction=False)
                for c in item.commands:
                    _queue(pipe, c, self.store._scripts)
                replies = await pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self.store._error(exc) from exc
        out = []
        for c, r in zip(item.commands, replies, strict=True):
            if isinstance(r, redis.exceptions.NoScriptError) and isinstance(c, Script):
                r = await self._eval(c)
            elif isinstance(r, BaseException):
                raise self.store._error(r) from r
            out.append(r)
        return out

    in_flight = _IN_FLIGHT

    def _schedule(self) -> None:
        if not self.scheduled and self.sending < self.in_flight:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self.scheduled = False
        if not self.queue:
            return
        batch, self.queue = self.queue[:_MAX_BATCH], self.queue[_MAX_BATCH:]
        self.sending += 1
        task = asyncio.get_running_loop().create_task(self._send_batch(batch))
        task.add_done_callback(self._sent)

    def _sent(self, _: object) -> None:
        self.sending -= 1
        if self.queue:
            self._schedule()

    async def _send_batch(self, batch: list[tuple[Script, asyncio.Future[Any]]]) -> None:
        import redis

        try:
            if len(batch) == 1 or self.store.cluster:  # a cluster pipeline refuses scripts
                replies = await asyncio.gather(*(self._one(s) for s, _ in batch))
            else:
                pipe = self.client.pipeline(transaction=False)
                for s, _ in batch:
                    _queue(pipe, s, self.store._scripts)
                async with self.gate:
                    replies = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the connection failed: every script of the batch
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(self.store._error(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for (s, fut), r in zip(batch, replies, strict=True):
            if fut.done():  # its caller was cancelled
                continue
            if isinstance(r, redis.exceptions.NoScriptError):
                try:
                    r = await self._eval(s)
                except Exception as exc:
                    r = exc
            if isinstance(r, BaseException):
                fut.set_exception(self.store._error(r))
            else:
                fut.set_result(r)

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
