"""Redis I/O written once: operations as generators of commands, sent by a sync or async client.

An operation (a checkpoint write, a read with paging...) is a generator, a *flow*, that
yields what it needs sent to Redis and receives the reply at the `yield`:

- `Script(name, keys, args)`: a registered Lua script (one EVALSHA; EVAL once if the server
  lacks it). A fenced script's refusal is raised as `FenceFailure`.
- `Command(name, *args)`: one client method, such as `zadd` or `zrange`.
- `Pipeline(commands)`: several `Script`/`Command`s in one non-transactional pipeline (one
  round trip per node); the reply is the list of their replies.

These live in `_flow`. `RedisIO.drive(flow)` runs a flow on the store's sync client;
`await RedisIO.adrive(flow)` on a `redis.asyncio` client of the running event loop (one per
loop, with a bounded pool: `_async.AsyncSide`), so async callers never wait on a
thread. The async side sends the scripts and pipelines that callers queue in the same turn of
the loop together in one pipeline: 64 writers in flight cost a handful of round trips, not 64.
Errors come out as `StoreUnavailableError` / `StoreError` either way.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from ..._flowsteps import FlowSteps
from . import _keys as K
from ._flow import Command, Pipeline, RedisFlow, Script, queue, scripted
from ._pin import Pins
from ._safety import FenceFailure

__all__ = ["Command", "Pipeline", "RedisFlow", "RedisIO", "Script"]

T = TypeVar("T")


class RedisIO:
    """The sync and async transports of `RedisStore` (mixed into it).

    Expects `client`, `cluster`, `_translate` and the connection settings `_connect` of the
    store (set by its constructor).
    """

    client: Any
    cluster: bool
    _scripts: dict[str, tuple[str, str]]
    _connect: tuple[str, dict[str, Any]]
    _aclients: dict[asyncio.AbstractEventLoop, Any]  # `_async.AsyncSide`s
    _pins: Pins

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
        # Not on a cluster: on an idle connection without redis-py's checkout (`_pin`).
        call = (
            self.client.execute_command if self.cluster else partial(self._pins.call, self.client)
        )
        try:
            try:
                return call("EVALSHA", sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return call("EVAL", source, len(keys), *keys, *args)
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
        steps = FlowSteps(flow)
        for item in steps:
            steps.value = self._send(item)
        return steps.result

    def _send(self, item: Script | Command | Pipeline) -> Any:
        if isinstance(item, Script):
            return self.run_script(item.name, item.keys, item.args)
        import redis

        if isinstance(item, Pipeline) and self.cluster and scripted(item):
            return [self._send(c) for c in item.commands]  # a cluster pipeline refuses scripts
        try:
            if isinstance(item, Command):
                return getattr(self.client, item.name)(*item.args)
            scripts = [c for c in item.commands if isinstance(c, Script)]
            if not self.cluster and len(scripts) == len(item.commands):
                # Scripts only (a put carrying held writes): on an idle connection, as
                # `run_script` (EVALSHA replies are raw: nothing for a response callback).
                replies = self._pins.pipeline(self.client, [self._evalsha(c) for c in scripts])
            else:
                pipe = self.client.pipeline(transaction=False)
                for c in item.commands:
                    queue(pipe, c, self._scripts)
                replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self._error(exc) from exc
        return self._replies(item.commands, replies, self.run_script)

    def _evalsha(self, s: Script) -> tuple[Any, ...]:
        return ("EVALSHA", self._scripts[s.name][1], len(s.keys), *s.keys, *s.args)

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
        steps = FlowSteps(flow)
        for item in steps:
            steps.value = await side.send(item)
        return steps.result

    def _async_side(self) -> Any:
        loop = asyncio.get_running_loop()
        side = self._aclients.get(loop)
        if side is None:
            for old in [lp for lp in self._aclients if lp.is_closed()]:
                self._aclients.pop(old).close_now()
            from ._async import AsyncSide

            side = self._aclients[loop] = AsyncSide(self)
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
