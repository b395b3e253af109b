"""Which calls the cross-run cache serves: a call site's options, and `wrap(cache=[...])`.

`cache_options` reads the `cache_ttl=` / `max_entries=` / `cache_key=` of a step;
`CacheSites` the `kind:name` patterns `middleware.wrap(obj, cache_ttl=, cache=[...])` names
for adapters' calls; `site_options` finds the options of one call (see `journal.cache`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from typing import Any

from ..errors import CacheConfigError

__all__ = ["CacheOptions", "CacheSites", "cache_name", "cache_options", "site_options"]


@dataclasses.dataclass(frozen=True, slots=True)
class CacheOptions:
    """How one call site is cached."""

    ttl: float | None = None
    """Seconds an entry lives (None: until evicted or cleared)."""
    max_entries: int | None = None
    """Entries kept for the site; the least recently used beyond it are evicted."""
    key: Callable[..., Any] | None = None
    """`key(*args, **kwargs)`: what identifies a call for the cache (default: the input)."""


def cache_options(
    cache_ttl: float | None,
    max_entries: int | None = None,
    cache_key: Callable[..., Any] | None = None,
) -> CacheOptions | None:
    """The options of a call site, or None when it is not cached (no option given).

    Raises:
        ValueError: `cache_ttl` or `max_entries` is not positive.
    """
    if cache_ttl is None and max_entries is None and cache_key is None:
        return None
    if cache_ttl is not None and not cache_ttl > 0:
        raise ValueError(f"cache_ttl must be a positive number of seconds, not {cache_ttl!r}")
    if max_entries is not None and max_entries < 1:
        raise ValueError(f"max_entries must be at least 1, not {max_entries!r}")
    return CacheOptions(cache_ttl, max_entries, cache_key)


@dataclasses.dataclass(frozen=True, slots=True)
class CacheSites:
    """The call sites of adapters that `middleware.wrap(obj, cache_ttl=, cache=[...])` caches.

    `patterns` are fnmatch patterns over the journal's `kind:name` of a call (`tool:search`,
    `llm:*`; `chat:` is accepted for `llm:`, the kind the journal gives chat models). A name
    qualified by where the call ran (`fetch@research:1` in a LangGraph node) is matched and
    cached by its plain name (`tool:fetch`).
    """

    patterns: tuple[str, ...]
    options: CacheOptions

    @classmethod
    def of(cls, cache_ttl: Any, cache: Any, max_entries: Any = None) -> CacheSites | None:
        """The sites `wrap` was asked to cache, or None when it was not asked.

        Raises:
            CacheConfigError: `cache_ttl` is not a positive number, `cache` is not a list of
                strings, or one is given without the other (nothing is cached by surprise).
        """
        if cache_ttl is None and cache is None and max_entries is None:
            return None
        if cache is None:
            raise CacheConfigError(
                "cache_ttl= needs cache=[...]: the call sites to cache, as kind:name patterns "
                "(for example cache=['tool:search', 'chat:*'])"
            )
        if cache_ttl is None:
            raise CacheConfigError(
                "cache=[...] needs cache_ttl=: the seconds an entry is served (opt-in only)"
            )
        if isinstance(cache_ttl, bool) or not isinstance(cache_ttl, (int, float)):
            raise CacheConfigError(f"cache_ttl must be a number of seconds, not {cache_ttl!r}")
        if not cache_ttl > 0:
            raise CacheConfigError(f"cache_ttl must be positive, not {cache_ttl!r}")
        if max_entries is not None and (
            isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1
        ):
            raise CacheConfigError(f"max_entries must be an int of at least 1, not {max_entries!r}")
        if isinstance(cache, str):
            cache = [cache]
        try:
            given = list(cache)
        except TypeError:
            raise CacheConfigError(
                f"cache must be a list of kind:name patterns, not {cache!r}"
            ) from None
        if not given:
            raise CacheConfigError("cache=[] names no call site; leave out cache= and cache_ttl=")
        patterns = []
        for pattern in given:
            if not isinstance(pattern, str):
                raise CacheConfigError(
                    f"cache patterns must be strings such as 'tool:search', not {pattern!r}"
                )
            if ":" not in pattern:
                raise CacheConfigError(
                    f"cache pattern {pattern!r} has no kind: write kind:name, as 'tool:{pattern}'"
                )
            if pattern.startswith("chat:"):
                pattern = "llm:" + pattern[len("chat:") :]
            patterns.append(pattern)
        return cls(tuple(patterns), CacheOptions(float(cache_ttl), max_entries))

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> CacheSites | None:
        """`of` the `cache_ttl=`, `cache=` and `max_entries=` popped from `wrap`'s kwargs.

        A `cache=` that is already a `CacheSites` (what `Middleware.wrap` hands adapters) is
        returned as it is.
        """
        if isinstance(kwargs.get("cache"), CacheSites):
            sites: CacheSites = kwargs.pop("cache")
            return sites
        return cls.of(
            kwargs.pop("cache_ttl", None),
            kwargs.pop("cache", None),
            kwargs.pop("max_entries", None),
        )

    def matches(self, site: str) -> bool:
        """Whether the call site `kind:name` is cached."""
        return any(fnmatch.fnmatchcase(site, p) for p in self.patterns)


def cache_name(name: str) -> str:
    """The site name a call is cached under: without the qualifier of where it ran.

    The LangChain adapter names a call inside a LangGraph node `fetch@research:1` (node and
    step) so that a resumed graph's journal stays aligned; across runs it is `fetch` wherever
    it runs, so patterns match, and entries are shared, by the plain name.
    """
    return name.partition("@")[0]


def site_options(sites: CacheSites | None, kind: str, name: str) -> CacheOptions | None:
    """The options `sites` (one wrapped object's `cache=`) give the call `kind:name`, or None."""
    if sites is None or not sites.matches(f"{kind}:{cache_name(name)}"):
        return None
    return sites.options
