"""`agentrewind cache stats|clear [--site SITE]`: the cross-run cache of the store's namespace."""

from __future__ import annotations

import argparse

from .common import CliError, dumps, open_store

__all__ = ["cmd_cache"]


def cmd_cache(args: argparse.Namespace) -> int:
    """Print the cache's statistics per call site, or clear a site (or every site)."""
    with open_store(args, write=args.action == "clear") as store:
        if args.action == "clear":
            gone = store.cache.clear(args.site)
            if args.json:
                print(dumps({"cleared": gone, "site": args.site}))
            else:
                print(f"cleared {gone} entr{'y' if gone == 1 else 'ies'}"
                      + (f" of {args.site}" if args.site else ""))  # fmt: skip
            return 0
        stats = [s for s in store.cache.stats() if args.site is None or s.site == args.site]
    if args.site is not None and not stats:
        raise CliError(f"no cache entries or lookups at site {args.site!r}")
    if args.json:
        print(dumps([s.as_dict() for s in stats]))
        return 0
    if not stats:
        print("the cache is empty")
        return 0
    print(f"{'site':<32} {'entries':>8} {'bytes':>10} {'hits':>7} {'misses':>7} "
          f"{'hit rate':>8} {'s saved':>9} {'tokens saved':>12}")  # fmt: skip
    for s in stats:
        print(f"{s.site:<32} {s.entries:>8} {s.bytes:>10} {s.hits:>7} {s.misses:>7} "
              f"{s.hit_rate:>8.0%} {s.seconds_saved:>9.3f} {s.tokens_saved:>12}")  # fmt: skip
    return 0
