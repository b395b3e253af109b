"""The Redis store (Redis, Valkey, Redis Cluster): the store, its key layout, scripts and I/O.

An operation is a flow (a generator yielding `Script` / `Command` / `Pipeline` requests), run
by `RedisStore.drive` on the sync client or `adrive` on the loop's async one. Importing this
package does not import `redis`; `RedisStore` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._flow import Command, Pipeline, RedisFlow, Script

if TYPE_CHECKING:
    from .readonly import ReadOnlyRedisStore
    from .store import RedisStore

__all__ = ["Command", "Pipeline", "ReadOnlyRedisStore", "RedisFlow", "RedisStore", "Script"]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from .store import RedisStore

        return RedisStore
    if name == "ReadOnlyRedisStore":
        from .readonly import ReadOnlyRedisStore

        return ReadOnlyRedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
