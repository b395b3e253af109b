"""LangChain's own unit tests against wrapped runnables: what fails wrapped but passes unwrapped.

Run (the `upstream-langchain` nox session does, with the test dependencies installed):

    python tests/upstream/langchain_upstream.py [--suites runnables,agents] [--stores sqlite,redis]

It downloads the sdists of the installed `langchain-core` and `langchain` (their tests ship in
them), then runs langchain-core's `tests/unit_tests/runnables` and langchain's
`tests/unit_tests/agents` once as they are and once per store with
`langchain_upstream_plugin`, which sends every call a test makes on a runnable through
`Middleware(store).wrap(runnable)` (see the plugin). It prints, per suite and store, the tests
that fail wrapped but pass unwrapped, each with its error, and exits 1 when any has no known
cause or when a run did not finish (a crash, a timeout, a collection error: its fatal trace is
printed). pytest's output is kept in `<workdir>/<suite>-<store>.log` beside the junit file.
Redis is `$AGENTREWIND_TEST_REDIS`, else a redis-server of our own.
"""

from __future__ import annotations

import argparse
import functools
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

from redis_support import own_redis_url

SUITES = {  # name: (distribution, test directory inside its sdist)
    "runnables": ("langchain-core", "tests/unit_tests/runnables"),
    "agents": ("langchain", "tests/unit_tests/agents"),
}
KNOWN: list[KnownCause] = []  # none: every difference found so far was ours (see _harness)
TIMEOUT = 3600.0  # seconds for one pytest run of a suite


def run_suite(
    root: Path, tests: list[str], junit: Path, store: str | None, extra: list[str]
) -> SuiteRun:
    env = pytest_env()
    args = [*tests, "-q", "-p", "no:cacheprovider", *extra]
    if store is not None:
        env["AGENTREWIND_UPSTREAM_STORE"] = store
        args += ["-p", "langchain_upstream_plugin"]
    return run_pytest(args, cwd=root, env=env, junit=junit, timeout=TIMEOUT, python=sys.executable)


def rerun_plain(root: Path, prefix: Path, extra: list[str], ids: list[str], n: int) -> SuiteRun:
    """Run tests `ids` unwrapped again (the n-th time), for `recheck`."""
    return run_suite(root, ids, prefix.with_name(f"{prefix.name}{n}.xml"), None, extra)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="runnables,agents")
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ar-upstream")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    redis = own_redis_url() if "redis" in args.stores.split(",") else ""
    unexplained = fatal = 0
    for suite in args.suites.split(","):
        dist, tests = SUITES[suite]
        version = importlib.metadata.version(dist)
        found = sdist(dist, version, args.workdir)
        if found is None:
            print(f"!! no sdist of {dist} {version} on the package index: not run")
            fatal += 1
            continue
        root = found
        plain = run_suite(
            root, [tests], args.workdir / f"{suite}-plain.xml", None, args.pytest_args
        )
        if not report(f"{dist} {tests} unwrapped", plain):
            fatal += 1
            continue
        passed = sum(state == "passed" for state, _ in plain.tests.values())
        print(f"\n== {dist} {tests}: {len(plain.tests)} tests, {passed} pass unwrapped")
        for store in args.stores.split(","):
            url = (
                f"sqlite:///{args.workdir / f'{suite}-journal.db'}" if store == "sqlite" else redis
            )
            junit = args.workdir / f"{suite}-{store}.xml"
            wrapped = run_suite(root, [tests], junit, url, args.pytest_args)
            if not report(f"{suite} wrapped on {store}", wrapped):
                fatal += 1
                continue
            diff = compare(plain, wrapped, KNOWN)
            prefix = args.workdir / f"{suite}-plain-recheck"
            recheck(diff, functools.partial(rerun_plain, root, prefix, args.pytest_args), root)
            unexplained += len(diff.unexplained)
            print_diff(store, diff, wrapped)
    print(f"\n{unexplained} wrapped-only failures without a known cause, {fatal} fatal runs")
    return 1 if unexplained or fatal else 0


if __name__ == "__main__":
    sys.exit(main())
