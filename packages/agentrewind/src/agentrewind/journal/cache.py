"""The cross-run cache of steps: pay once for the same call, across runs.

Opt-in per call site (`cache_ttl=` on `run.step`, `@middleware.step`, `@agentrewind.step`).
A call site is `kind:name`; an entry's key is the journal's content key without run and
occurrence (`kind:name:digest` of the normalised input, or of `cache_key(*args, **kwargs)`),
in the store's namespace. Inside a run, the journal is asked first (a resumed run replays),
then the cache: a hit is written to the journal like an executed call, marked `cached`, so a
crash right after it replays the same value. Exceptions are never cached; a value the journal
cannot store is not cached either. Entries hold the serializer's tree (encrypted and redacted
as journal outputs are) and load as data only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..errors import SerializationError
from ..records import RunMetrics, StepRecord
from ..serde import Serializer
from ..serde.encryption import Place, cache_place
from ..stores import Store
from ..stores.cache import CacheEntry, CacheStats
from .cache_sites import CacheOptions, CacheSites, cache_name, cache_options, site_options
from .call import Call, JournalSettings, Outcome
from .plain import astep_call, step_call

__all__ = [
    "CacheControl",
    "CacheOptions",
    "CacheSites",
    "acached_call",
    "begin_cached",
    "cache_options",
    "cached_call",
    "content_key",
    "run_step",
]

log = logging.getLogger("agentrewind.cache")
_UNSTORABLE_LOGGED: set[str] = set()


class Run(Protocol):
    """What the cache uses of `agentrewind.Run` (which imports this module)."""

    @property
    def middleware(self) -> JournalSettings: ...

    @property
    def metrics(self) -> RunMetrics: ...

    @property
    def _lock(self) -> Any: ...

    def begin(
        self,
        kind: str,
        name: str,
        key_input: Any,
        *,
        side_effects: bool = ...,
        inputs: Any = ...,
        record_inputs: bool | None = ...,
        cache: CacheSites | None = ...,
    ) -> Call:
        """See `Run.begin`."""
        ...

    def _note(self, call: Call, outcome: Outcome, error: BaseException | None = None) -> None: ...


class _Sink:
    """Stores a completed call of a cached site (`Call.cache`)."""

    __slots__ = ("site",)

    def __init__(self, site: _Site) -> None:
        self.site = site

    def _entry(self, record: StepRecord) -> CacheEntry:
        meta = record.meta
        text = json.dumps(record.output, separators=(",", ":"))
        duration, tokens = float(meta.get("duration", 0.0)), int(meta.get("tokens", 0) or 0)
        return CacheEntry(text.encode(), duration, tokens)

    def put(self, record: StepRecord) -> None:
        s = self.site
        s.settings.store.cache.put(s.site, s.key, self._entry(record), **s.put_args())

    async def aput(self, record: StepRecord) -> None:
        s = self.site
        await s.settings.store.cache.aput(s.site, s.key, self._entry(record), **s.put_args())


def begin_cached(run: Run, call: Call, key_input: Any, sites: CacheSites | None) -> None:
    """Serve a call of a site `sites` caches that the journal does not replay (else no-op).

    `sites` are the `wrap(obj, cache_ttl=, cache=[...])` rules of the wrapped object the
    call belongs to (each adapter passes its wrapper's own to `Run.begin`).

    From the cross-run cache when it holds the call (`call.hit`, recorded in the run, marked
    `cached`); else its completion is stored there (`call.cache`). Exceptions are never stored.
    """
    options = site_options(sites, call.kind, call.name)
    if options is None:
        return
    name = cache_name(call.name)
    site = _Site.of(run.middleware, call.kind, name, key_input, options, (), {})
    found = run.middleware.store.cache.get(site.site, site.key)
    if found is None:
        call.cache = _Sink(site)
        return
    try:
        tree = json.loads(found.value)
    except ValueError as exc:
        raise SerializationError(f"cache site {site.site!r} entry {site.key!r}: {exc}") from exc
    call.serve(tree, {**_hit_meta(found), "duration": 0.0})
    _noted_hit(run, call, found)


def content_key(serializer: Serializer, kind: str, name: str, key_input: Any) -> str:
    """`kind:name:digest`: the journal's key of a call without run and occurrence."""
    tree = serializer.to_tree(key_input)
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return f"{kind}:{name}:{hashlib.blake2b(text.encode(), digest_size=10).hexdigest()}"


@dataclasses.dataclass(slots=True)
class _Site:
    settings: JournalSettings
    site: str
    key: str
    options: CacheOptions
    started: float = dataclasses.field(default_factory=time.perf_counter)

    @classmethod
    def of(
        cls,
        settings: JournalSettings,
        kind: str,
        name: str,
        key_input: Any,
        options: CacheOptions,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> _Site:
        if options.key is not None:
            key_input = options.key(*args, **kwargs)
        key = content_key(settings.serializer, kind, name, key_input)
        return cls(settings, f"{kind}:{name}", key, options)

    @property
    def place(self) -> Place:
        """Where the entry is stored (what its ciphertext is bound to)."""
        return cache_place(self.settings.store.namespace, self.site, self.key)

    def load(self, entry: CacheEntry) -> Any:
        where = f"cache site {self.site!r} entry {self.key!r}"
        try:
            tree = json.loads(entry.value)
        except ValueError as exc:
            raise SerializationError(f"{where} is not valid JSON: {exc}") from exc
        return self.settings.serializer.open(tree, self.place)

    def entry(self, call: Call | None, result: Any) -> CacheEntry | None:
        """The entry to store for `result`, or None when it cannot be stored (logged once)."""
        if call is not None and call.record is not None:
            tree, meta = call.record.output, call.record.meta
            tree = self.settings.serializer.rebind(tree, call.place(), self.place)
            duration, tokens = float(meta.get("duration", 0.0)), int(meta.get("tokens", 0) or 0)
        else:
            try:
                tree = self.settings.serializer.store_tree(result, "output", self.place)
            except SerializationError as exc:
                if self.site not in _UNSTORABLE_LOGGED:
                    _UNSTORABLE_LOGGED.add(self.site)
                    log.warning("cache site %r: a value was not cached: %s", self.site, exc)
                return None
            duration, tokens = time.perf_counter() - self.started, 0
        text = json.dumps(tree, separators=(",", ":"))
        return CacheEntry(text.encode(), duration, tokens)

    def put_args(self) -> dict[str, Any]:
        return {"ttl": self.options.ttl, "max_entries": self.options.max_entries}


def _hit_meta(entry: CacheEntry) -> dict[str, Any]:
    return {"cached": True, "cached_duration": entry.duration, "cached_tokens": entry.tokens}


def _noted_hit(run: Run, call: Call, entry: CacheEntry) -> None:
    run._note(call, "cached")
    with run._lock:
        run.metrics.steps += 1
        run.metrics.cache_hits += 1
        run.metrics.seconds_saved += entry.duration
        run.metrics.tokens_saved += entry.tokens


def cached_call(
    run: Run | None,
    settings: JournalSettings,
    name: str,
    fn: Callable[..., Any],
    key_input: Any,
    options: CacheOptions,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    kind: str = "custom",
    side_effects: bool = True,
) -> Any:
    """Run `fn` as a cached step of `run` (or, with no run, as a cached plain call)."""
    call = None
    if run is not None:
        call = run.begin(kind, name, key_input, side_effects=side_effects)
        if call.hit:
            return call.value()
    site = _Site.of(settings, kind, name, key_input, options, args, kwargs)
    found = settings.store.cache.get(site.site, site.key)
    if found is not None:
        value = site.load(found)
        if run is not None and call is not None:
            call.complete(value, _hit_meta(found), note=False)
            _noted_hit(run, call, found)
        return value
    result = fn(*args, **kwargs) if call is None else call.perform(fn, *args, **kwargs)
    entry = site.entry(call, result)
    if entry is not None:
        settings.store.cache.put(site.site, site.key, entry, **site.put_args())
    return result


async def acached_call(
    run: Run | None,
    settings: JournalSettings,
    name: str,
    fn: Callable[..., Awaitable[Any]],
    key_input: Any,
    options: CacheOptions,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    kind: str = "custom",
    side_effects: bool = True,
) -> Any:
    """Async twin of `cached_call` (for an async `fn`)."""
    call = None
    if run is not None:
        call = run.begin(kind, name, key_input, side_effects=side_effects)
        if call.hit:
            return call.value()
    site = _Site.of(settings, kind, name, key_input, options, args, kwargs)
    found = await settings.store.cache.aget(site.site, site.key)
    if found is not None:
        value = site.load(found)
        if run is not None and call is not None:
            await call.acomplete(value, _hit_meta(found), note=False)
            _noted_hit(run, call, found)
        return value
    result = await (fn(*args, **kwargs) if call is None else call.aperform(fn, *args, **kwargs))
    entry = site.entry(call, result)
    if entry is not None:
        await settings.store.cache.aput(site.site, site.key, entry, **site.put_args())
    return result


def run_step(
    run: Run,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`Run.step`: a journaled step, also cached across runs with a `cache_ttl=` (seconds).

    An async `fn` gives an awaitable. The step is keyed by `name` and its arguments; the
    keywords `cache_ttl` and `record_inputs` (False: the arguments are not recorded) are
    the step's, never passed on to `fn`.
    """
    cache_ttl = kwargs.pop("cache_ttl", None)
    record_inputs = kwargs.pop("record_inputs", None)
    if cache_ttl is not None:
        options = cache_options(cache_ttl)
        assert options is not None
        key_input = {"args": list(args), "kwargs": kwargs}
        call = acached_call if inspect.iscoroutinefunction(fn) else cached_call
        return call(run, run.middleware, name, fn, key_input, options, args, kwargs)
    if inspect.iscoroutinefunction(fn):
        return astep_call(run, name, fn, None, args, kwargs, record_inputs=record_inputs)
    return step_call(run, name, fn, None, args, kwargs, record_inputs=record_inputs)


class CacheControl:
    """`middleware.cache`: statistics and clearing of a store's cross-run cache."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def stats(self) -> list[CacheStats]:
        """Per call site: entries, bytes, hits, misses, hit rate, seconds and tokens saved."""
        return self.store.cache.stats()

    async def astats(self) -> list[CacheStats]:
        """Async twin of `stats`."""
        return await self.store.cache.astats()

    def clear(self, site: str | None = None) -> int:
        """Drop the entries (and statistics) of `site` (`kind:name`; None: all); return count."""
        return self.store.cache.clear(site)

    async def aclear(self, site: str | None = None) -> int:
        """Async twin of `clear`."""
        return await self.store.cache.aclear(site)
