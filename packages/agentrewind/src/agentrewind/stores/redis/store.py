"""Redis store: shared between processes and machines; runs on Redis Cluster."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import SchemaVersionError, StoreError, StoreUnavailableError
from ...records import RunInfo, RunMetrics, StepIndex, StepRecord, site_json
from ..base import LeaseResult, Store
from ..cache import CacheBackend
from ..leases import lease_owner_is_dead
from ..queue import QueueBackend
from ..urls import redact_url
from . import _keys as K
from . import _safety as safety
from ._io import RedisIO
from ._migrate import check_layout
from ._pin import Pins
from ._runs import delete_many, list_page, load_ahead, load_index, run_info
from ._safety import warn_if_volatile

try:
    import redis as _redis
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - exercised in the core session without redis
    raise ImportError(
        'the Redis store needs the redis client: pip install "agentrewind[redis]"'
    ) from exc

__all__ = ["RedisStore"]

T = TypeVar("T")
_OUR_PARAMS = ("namespace", "prefix", "cluster", "migrate")


def redact(url: str) -> str:
    """Return `url` with every secret-bearing part replaced by `***` (see `stores.urls`)."""
    return redact_url(url)


class RedisStore(RedisIO, Store):
    """Runs and steps in Redis (or Redis Cluster), core commands only.

    Args:
        url: `redis://[user:password@]host:port/db` or `rediss://` for TLS. A server with
            cluster mode enabled is detected and used through `RedisCluster`; `?cluster=1`
            forces it.
        namespace: Key prefix segment; nothing in one namespace is visible from another.
        prefix: First segment of every key (default `ar`).
        socket_timeout: Seconds before a command to an unresponsive server fails (once: a
            timed-out command is not sent again, since it may have been applied).
        migrate: Move the keys of a store written by an older key layout (stop the old
            version's processes first); without it such a store raises `SchemaVersionError`.
        persistence_warning: Warn (`RedisPersistenceWarning`, once per server and process)
            when the server keeps nothing across a restart (no AOF, no RDB snapshots).
            Default: on, unless `$AGENTREWIND_REDIS_PERSISTENCE_WARNING` is `0`.
    """

    scheme = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "default",
        prefix: str = "ar",
        cluster: bool | None = None,
        socket_timeout: float = 5.0,
        migrate: bool = False,
        persistence_warning: bool | None = None,
    ) -> None:
        super().__init__(url=redact(url), namespace=namespace)
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"Redis key prefix {prefix!r} must not hold '{{' or '}}'")
        _check_db(url)
        self.prefix = prefix
        self.migrate = migrate
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": min(socket_timeout, 2.0),
        }
        if cluster is not True:
            # redis-py retries a timed-out command 3 times by default: that multiplies the
            # timeout and may apply a write twice. Retry once only on a connection error
            # (a pooled connection the server closed), never on a timeout.
            options["retry"] = Retry(NoBackoff(), 1, supported_errors=(_redis.ConnectionError,))
        self._connect = (url, {k: v for k, v in options.items() if k != "retry"})  # `RedisIO`
        self._aclients = {}
        self._pins = Pins()
        with self.translate_errors():
            if cluster is None:
                probe = _redis.Redis.from_url(url, **options)
                try:
                    info = probe.info("cluster")
                finally:
                    probe.close()
                cluster = bool(info.get("cluster_enabled"))
            self.cluster = cluster
            if cluster:
                options.pop("retry", None)  # RedisCluster takes no per-node retry
            self.client: Any = (
                RedisCluster.from_url(url, **options)
                if cluster
                else _redis.Redis.from_url(url, **options)
            )
            self._scripts: dict[str, tuple[str, str]] = {}
            self.register_scripts(
                {
                    name: getattr(K, name)
                    for name in (
                        "PUT_STEPS",
                        "BEGIN_RUN",
                        "END_RUN",
                        "SET_TTL",
                        "SET_HEAD",
                        "ACQUIRE_LEASE",
                        "RENEW_LEASE",
                        "RELEASE_LEASE",
                        "DELETE_RUN",
                        "DROP_GONE",
                        "READ_RUNS",
                        "READ_AHEAD",
                    )
                }
            )
            self._key_cache: dict[str, K.RunKeys] = {}
            self.runs_index = K.runs_index(prefix, self.namespace)
            self.by_update = True  # the runs index is scored by update time (layout 3)
            self.read_only = False  # True: list_runs leaves members of expired runs in place
            self._ahead: dict[str, dict[str, bytes]] = {}  # run -> records read ahead
            try:
                self._check_schema()
                warn_if_volatile(self.client, self.url, persistence_warning)
            except BaseException:
                _close_client(self.client)  # the store never existed for the caller
                raise

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStore:
        """Build from a URL whose query may carry `namespace`, `prefix` and `cluster`."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        ours = {k: query.pop(k) for k in _OUR_PARAMS if k in query}
        clean = urlunsplit(parts._replace(query=urlencode(query)))
        if "cluster" in ours:
            kwargs.setdefault("cluster", ours["cluster"].lower() in ("1", "true", "yes"))
        if "migrate" in ours:
            kwargs.setdefault("migrate", ours["migrate"].lower() in ("1", "true", "yes"))
        if "prefix" in ours:
            kwargs.setdefault("prefix", ours["prefix"])
        if "namespace" in ours:
            kwargs.setdefault("namespace", ours["namespace"])
        return cls(clean, **kwargs)

    @contextlib.contextmanager
    def translate_errors(self) -> Iterator[None]:
        """Map redis-py errors to `StoreUnavailableError` / `StoreError` (for adapters too)."""
        try:
            yield
        except _redis.RedisError as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: Exception) -> StoreError:
        if isinstance(exc, _redis.AuthenticationError):
            return StoreUnavailableError(f"Redis at {self.url} refused the credentials")
        if isinstance(exc, _redis.TimeoutError):
            return StoreUnavailableError(
                f"Redis at {self.url} did not answer in time ({exc}): the operation may have "
                "been applied (the reply may be what was lost); check before redoing it"
            )
        if isinstance(exc, _redis.ConnectionError):
            return StoreUnavailableError(
                f"Redis at {self.url} is unreachable ({type(exc).__name__}: {exc}); if the "
                "connection dropped after the command was sent, it may have been applied"
            )
        if isinstance(exc, _redis.exceptions.OutOfMemoryError) or "used memory >" in str(exc):
            return StoreError(
                f"Redis at {self.url} is out of memory (used memory > maxmemory, and its "
                "policy evicts nothing it may): nothing was written; free memory or raise "
                "maxmemory, then retry"
            )
        # A cluster that lost its nodes raises its own error types; all mean "unavailable".
        if "cluster" in type(exc).__name__.lower() or "connection" in str(exc).lower():
            return StoreUnavailableError(f"Redis at {self.url}: {exc}")
        return StoreError(f"Redis at {self.url}: {exc}")

    def _call(self, fn: Callable[[], T]) -> T:
        with self.translate_errors():
            return fn()

    def _check_schema(self) -> None:
        key = K.SCHEMA_KEY.format(prefix=self.prefix)
        # 1 until a namespace is migrated from layout 1 (see `_migrate`): processes of
        # agentrewind 0.1 sharing the server keep working on namespaces they own.
        self.client.set(key, 1, nx=True)
        raw = self.client.get(key)
        current = int(raw) if raw is not None else 1
        if current > K.REDIS_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"Redis at {self.url} (prefix {self.prefix!r}) has schema version {current}; this "
                f"agentrewind knows up to {K.REDIS_SCHEMA_VERSION}: upgrade agentrewind"
            )
        check_layout(
            self.client,
            self.prefix,
            self.namespace,
            migrate=self.migrate,
            where=f"Redis at {self.url}",
        )

    def _fenced(
        self, name: str, run_id: str, owner: str | None, args: list[Any], now: float
    ) -> Any:
        """Run a fenced write script of one run (see `_keys._fence`).

        The script moves the run to the top of the runs index (on a Cluster, a ZADD after it).
        """
        keys = self._keys(run_id).all()
        if not self.cluster:
            keys = [*keys, self.runs_index]
            return safety.run_fenced(self, name, run_id, keys, owner, [run_id, *args], now)
        result = safety.run_fenced(self, name, run_id, keys, owner, ["", *args], now)
        self._call(lambda: self.client.zadd(self.runs_index, {run_id: now}))
        return result

    def delete_keys(self, run_id: str) -> list[str]:
        """The keys of the `DELETE_RUN` script: the run's, and the runs index unless a Cluster."""
        keys = self._keys(run_id).all()
        return keys if self.cluster else [*keys, self.runs_index]

    def _keys(self, run_id: str) -> K.RunKeys:
        keys = self._key_cache.get(run_id)
        if keys is None:
            if len(self._key_cache) > 1024:
                self._key_cache.clear()
            keys = self._key_cache[run_id] = K.RunKeys.of(self.prefix, self.namespace, run_id)
        return keys

    def key_base(self, family: str, ident: str) -> str:
        """The start of every key of one run or thread, for adapters that keep their own keys.

        Namespace and id are encoded (distinct pairs never share a key) and hashed into one
        non-empty hash tag (all keys of one id share a Cluster slot, whatever the id holds).

        Args:
            family: A short name for the kind of object (`run` for the core, `lg` for the
                LangGraph saver); no `:`, `{` or `}`.
            ident: The run or thread id.
        """
        return K.id_base(self.prefix, self.namespace, family, ident)

    def namespace_key(self, name: str) -> str:
        """A key for the namespace as a whole (an index), such as `lg:threads`."""
        return K.namespace_key(self.prefix, self.namespace, name)

    # -- runs -------------------------------------------------------------------------------
    def begin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        ttl_ms = "" if ttl is None else str(int(ttl * 1000))
        if owner is not None:
            safety.check_alive(self, run_id)
        now = time.time()
        raw = self._fenced(
            "BEGIN_RUN", run_id, owner, [now, ttl_ms, "running", "1" if owner else "0"], now
        )
        it = iter(raw)
        return run_info(run_id, dict(zip(it, it, strict=True)))

    def end_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        now = time.time()
        self._fenced("END_RUN", run_id, owner, [now, status, json.dumps(metrics.as_dict())], now)

    def get_run(self, run_id: str) -> RunInfo | None:
        keys = self._keys(run_id)
        with self.translate_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(keys.run)
            pipe.get(keys.lease)
            raw, holder = pipe.execute()
        return run_info(run_id, raw, holder) if raw else None

    def list_runs(self, *, limit: int = 100) -> list[RunInfo]:
        return list_page(self, limit, by_update=self.by_update)

    def delete_run(self, run_id: str, *, force: bool = False) -> bool:
        deleted = safety.delete_run(self, run_id, self.delete_keys(run_id), force)
        if self.cluster:  # the index lives in another slot: see `_keys.runs_index`
            self._call(lambda: self.client.zrem(self.runs_index, run_id))
        return deleted

    def _delete_many(self, run_ids: list[str], *, force: bool) -> tuple[int, list[str]]:
        return delete_many(self, run_ids, force)

    def set_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        ttl_ms = "" if ttl is None else str(max(int(ttl * 1000), 1))
        now = time.time()
        self._fenced("SET_TTL", run_id, owner, [now, ttl_ms], now)

    def _purge_expired(self) -> int:
        return 0  # Redis expires keys itself; list_runs drops their index entries.

    # -- steps ------------------------------------------------------------------------------
    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,  # no per-write disk wait to skip (the server's AOF policy rules)
    ) -> None:
        for r in records:  # what was read ahead of these keys is stale now
            self._ahead.get(r.run_id, {}).pop(r.key, None)
        head_run = self._heads_run(records, heads)
        by_run: dict[str, list[Any]] = {}
        for r in records:
            site = site_json(r.site)  # see `_runs.load_index`
            by_run.setdefault(r.run_id, []).extend((r.key, r.step_id, r.seq, r.encode(), site))
        for run_id, args in by_run.items():
            head_args: list[Any] = []
            if run_id == head_run and heads:
                for branch, step_id in heads.items():
                    head_args += [branch, step_id]
            now = time.time()
            self._fenced(
                "PUT_STEPS", run_id, owner, [now, len(head_args) // 2, *head_args, *args], now
            )

    def load_steps(self, run_id: str) -> list[StepRecord]:
        raw = self._call(lambda: self.client.hgetall(self._keys(run_id).steps))
        records = [
            StepRecord.decode(data, where=f"run {run_id!r} key {key.decode()!r}")
            for key, data in raw.items()
        ]
        records.sort(key=lambda r: r.seq)
        return records

    def _load_index(self, run_id: str) -> StepIndex | list[StepRecord]:
        self._ahead.pop(run_id, None)  # a new open reads afresh
        return load_index(self, run_id)

    def _load_step(self, run_id: str, key: str) -> StepRecord | None:
        data = load_ahead(self, run_id, key)
        return None if data is None else StepRecord.decode(data, where=f"run {run_id!r} {key!r}")

    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        keys = self._keys(run_id)
        key = self._call(lambda: self.client.hget(keys.ids, step_id))
        if key is None:
            return None
        data = self._call(lambda: self.client.hget(keys.steps, key))
        if data is None:
            return None
        record = StepRecord.decode(data, where=f"run {run_id!r}")
        # The id index may still name a step id whose key was since rewritten with another id.
        return record if record.step_id == step_id else None

    # -- heads ------------------------------------------------------------------------------
    def set_head(
        self, run_id: str, branch: str, step_id: str | None, *, owner: str | None = None
    ) -> None:
        now = time.time()
        self._fenced("SET_HEAD", run_id, owner, [now, branch, step_id or ""], now)

    def get_heads(self, run_id: str) -> dict[str, str]:
        raw = self._call(lambda: self.client.hgetall(self._keys(run_id).heads))
        return {k.decode(): v.decode() for k, v in raw.items()}

    # -- leases -----------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        key = self._keys(run_id).lease
        ttl_ms = max(int(ttl * 1000), 1)
        ok, holder, pttl = self.run_script("ACQUIRE_LEASE", [key], [owner, ttl_ms, ""])
        holder = holder.decode() if isinstance(holder, bytes) else holder
        if not ok and lease_owner_is_dead(holder):
            ok, holder, pttl = self.run_script("ACQUIRE_LEASE", [key], [owner, ttl_ms, holder])
            holder = holder.decode() if isinstance(holder, bytes) else holder
        return LeaseResult((bool(ok), holder, max(int(pttl), 0) / 1000))

    def renew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        key = self._keys(run_id).lease
        ttl_ms = max(int(ttl * 1000), 1)
        ok, holder, pttl = self.run_script("RENEW_LEASE", [key], [owner, ttl_ms])
        holder = holder.decode() if isinstance(holder, bytes) else holder
        return LeaseResult((bool(ok), holder, max(int(pttl), 0) / 1000))

    def take_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        key = self._keys(run_id).lease
        ttl_ms = max(int(ttl * 1000), 1)
        ok, cur, pttl = self.run_script("ACQUIRE_LEASE", [key], [owner, ttl_ms, holder])
        cur = cur.decode() if isinstance(cur, bytes) else cur
        return LeaseResult((bool(ok), cur, max(int(pttl), 0) / 1000))

    def release_lease(self, run_id: str, owner: str) -> None:
        self.run_script("RELEASE_LEASE", [self._keys(run_id).lease], [owner])

    def _open_cache(self) -> CacheBackend:
        from ._cache import RedisCache

        return RedisCache(self)

    def _open_queues(self) -> QueueBackend:
        from ._queue import RedisQueues

        return RedisQueues(self)

    def close(self) -> None:
        self._flush_cache()
        self.close_async()
        self._pins.close()
        with contextlib.suppress(Exception):
            _close_client(self.client)
        super().close()

    async def aclose(self) -> None:
        await self.aclose_async()
        self.close()


def _check_db(url: str) -> None:
    """Refuse a database path that is not a number (redis-py would silently use db 0)."""
    path = urlsplit(url).path.strip("/")
    if path and not path.isdigit():
        raise ValueError(
            f"Redis URL {redact(url)!r}: the path must be a database number "
            f"(redis://host:port/0), not {path!r}"
        )


def _close_client(client: Any) -> None:
    """Close a client and every connection it opened.

    `RedisCluster.from_url` gives each node client an explicit pool, which its `close()`
    leaves open (redis-py does not auto-close pools it was handed), so disconnect those too.
    """
    if isinstance(client, RedisCluster):
        nodes: list[Any] = client.get_nodes()  # type: ignore[no-untyped-call]
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()
    client.close()
