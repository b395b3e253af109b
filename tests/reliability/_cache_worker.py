"""A child of the cross-run cache tests: `python _cache_worker.py URL RUN COUNTER Q MODE TTL`.

Opens run RUN on URL and asks `search(Q)` as a step cached for TTL seconds (`cache_ttl`). `search`
appends Q to COUNTER (one write + fsync: a paid call, counted even if this process dies) and
returns the number of paid calls so far, so a value shows which execution produced it.
MODE: `ok` prints the value as JSON; `raise` makes `search` raise after paying; `kill`
prints the value, then SIGKILLs this process inside the run (right after a cache hit).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import agentrewind


def main() -> None:
    url, run_id, counter, q, mode, ttl = sys.argv[1:7]

    def search(query: str) -> dict[str, object]:
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{query}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode == "raise":
            raise RuntimeError("search failed")
        with open(counter) as f:
            return {"answer": query.upper(), "paid": len(f.read().splitlines())}

    mw = agentrewind.Middleware(url)
    with mw.run(run_id) as run:
        try:
            value = run.step("search", search, q, cache_ttl=float(ttl))
        except RuntimeError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return
        print(json.dumps({"value": value, "cache_hits": run.metrics.cache_hits}), flush=True)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    mw.close()


if __name__ == "__main__":
    main()
