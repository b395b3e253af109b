"""LangGraph's engine tests on RewindSaver: what fails with it but passes with InMemorySaver.

Run (the `upstream-langgraph` nox session does, with the test dependencies installed):

    python tests/upstream/langgraph_upstream.py [--stores sqlite,redis,redis-cluster,postgres]
        [--workdir DIR] [-- pytest args]

It downloads the sdist of the installed `langgraph` (its `tests/` ship in it) and runs the
test files that use LangGraph's `sync_checkpointer`/`async_checkpointer` fixtures once with
InMemorySaver (LangGraph's own `MemorySaverAssertImmutable`) and once per store with
`RewindSaver` (see `langgraph_upstream_plugin`). It prints, per store, the tests that fail
with RewindSaver but pass with InMemorySaver, each with its error, and exits 1 when any has
no known cause or when a run did not finish (a crash, a timeout, a collection error: its
fatal trace is printed). pytest's output is kept in `<workdir>/<store>.log` beside the junit
file. Stores: SQLite (a file per test), Redis (our own server, or $AGENTREWIND_TEST_REDIS),
a 3-master Redis Cluster of our own, PostgreSQL (a scratch database on
$AGENTREWIND_TEST_POSTGRES, dropped at the end; a namespace per test).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: redis_support
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/upstream: _harness
from _harness import (
    KnownCause,
    SuiteRun,
    compare,
    print_diff,
    pytest_env,
    recheck,
    report,
    run_pytest,
    sdist,
)

from postgres_support import create_scratch_database, drop_scratch_database, postgres_up
from redis_support import own_redis_cluster_url, own_redis_url

STORES = ("sqlite", "redis", "redis-cluster", "postgres")
PYTEST_ARGS = [
    "-q",
    "-o",
    "addopts=",  # upstream's: --strict-config with its own plugins, --durations
    "-p",
    "no:cacheprovider",
    "-p",
    "no:asyncio",  # the suite runs on anyio's plugin; ours is installed for our own tests
    "-W",
    "ignore::DeprecationWarning",
    "--timeout=300",  # pytest-timeout: one test, not the run
]
KNOWN: list[KnownCause] = []  # none: a difference here is RewindSaver's (see _harness)
TIMEOUT = 3600.0  # seconds for one pytest run


def engine_tests(root: Path) -> list[str]:
    """The test files that use a checkpointer fixture."""
    files = sorted((root / "tests").glob("test_*.py"))
    used = [f for f in files if "_checkpointer" in f.read_text(errors="replace")]
    return [str(f.relative_to(root)) for f in used]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ar-lg")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    stores = args.stores.split(",")
    if unknown := sorted(set(stores) - set(STORES)):
        parser.error(f"unknown stores {unknown}; choose from {', '.join(STORES)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("langgraph")
    root = sdist("langgraph", version, args.workdir)
    if root is None or not (root / "tests" / "conftest.py").exists():
        print(f"BLOCKED: no sdist with tests for langgraph {version} on the package index")
        return 1
    files = engine_tests(root)
    print(f"langgraph {version}: {len(files)} test files with checkpointer fixtures at {root}")

    def run(label: str, store: str | None, tests: list[str] = files) -> SuiteRun:
        env = pytest_env(NO_DOCKER="true")  # the conftest's other fixtures stay off servers
        plugin = ["-p", "langgraph_upstream_plugin"]
        if store is not None:
            env["AGENTREWIND_UPSTREAM_STORE"] = store
        junit = args.workdir / f"{label}.xml"
        argv = [*tests, *PYTEST_ARGS, *plugin, *args.pytest_args]
        return run_pytest(argv, cwd=root, env=env, junit=junit, timeout=TIMEOUT,
                          python=sys.executable)  # fmt: skip

    plain = run("memory", None)
    if not report("InMemorySaver", plain):
        return 1
    passed = sum(state == "passed" for state, _ in plain.tests.values())
    print(f"== {len(plain.tests)} tests, {passed} pass with InMemorySaver")
    unexplained = fatal = 0
    for store in stores:
        scratch = None
        if store == "sqlite":
            (args.workdir / "sqlite").mkdir(exist_ok=True)
            url = f"sqlite:///{args.workdir / 'sqlite'}"  # a file per test in this folder
        elif store == "redis":
            url = own_redis_url()
        elif store == "redis-cluster":
            url = own_redis_cluster_url()
        else:
            if not postgres_up():
                print("!! postgres: no server at $AGENTREWIND_TEST_POSTGRES: not run")
                fatal += 1
                continue
            url, scratch = create_scratch_database()
        try:
            wrapped = run(store, url)
        finally:
            if scratch is not None:
                drop_scratch_database(scratch)
        if not report(f"RewindSaver on {store}", wrapped):
            fatal += 1
            continue
        diff = compare(plain, wrapped, KNOWN)
        recheck(diff, lambda ids, n: run(f"memory-recheck{n}", None, ids), root)
        unexplained += len(diff.unexplained)
        print_diff(store, diff, wrapped)
    print(f"\n{unexplained} fail with RewindSaver only without a known cause, {fatal} fatal runs")
    return 1 if unexplained or fatal else 0


if __name__ == "__main__":
    sys.exit(main())
