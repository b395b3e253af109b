"""llama-index-workflows' own test suite with every workflow wrapped: what breaks.

Run (the `upstream-llamaindex` nox session does, with the test dependencies installed):

    python tests/upstream/llamaindex_upstream.py [--tests DIR] [--stores sqlite,redis]
        [--workdir DIR] [-- pytest args]

The suite runs unwrapped, then once per store with `llamaindex_wrap_plugin` wrapping every
workflow in a `Middleware`. It prints, per store, the tests that fail wrapped but pass
unwrapped, each with its error, and exits 1 when any has no known cause or when a run did
not finish (a crash, a timeout, a collection error of the whole run: its fatal trace is
printed). Tests that fail unwrapped too (drift between the suite and the installed package)
are only counted. pytest's output is kept in `<workdir>/<run>.log` beside the junit file.

Where the tests come from, in this order:

1. `--tests DIR` (or `$AGENTREWIND_UPSTREAM_LLAMAINDEX_TESTS`): the
   `packages/llama-index-workflows/tests` folder of a run-llama/workflows-py checkout,
   ideally at the tag `llama-index-workflows@<installed version>`.
2. The sdist of the installed version on the package index (pip download), if it ships
   `tests/` (2.11.7, 2.12.0, 2.20.0 and 2.26.1 ship none; 2.10.3 and older do).
3. The pinned sdist `PINNED` (llama-index-workflows 2.10.3, the newest found that ships
   its tests), checked against its sha256. Its tests are older than the installed package:
   those that no longer pass unwrapped are counted apart, never as wrapped-only failures.
4. Neither: the script says so (BLOCKED) and exits 1; pass a checkout with `--tests`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from importlib.metadata import version
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

from redis_support import cleanup_redis, own_redis_url

DIST = "llama-index-workflows"
PINNED = ("2.10.3", "3e9b21adf56f03d0c3e94eab3ac873f2914a8b31b721278d600eefebaed5ae2d")
"""(version, sha256) of the newest sdist of llama-index-workflows found to ship tests/."""
PYTEST_ARGS = [
    "-q",
    "-o",
    "addopts=",  # the suite's own addopts want xdist
    "-p",
    "no:cacheprovider",
    "--timeout=30",
    "-W",
    "ignore::DeprecationWarning",
    "--continue-on-collection-errors",  # a file the installed version broke is drift
]
KNOWN: list[KnownCause] = []  # none: a difference here is the wrapper's (see _harness)
TIMEOUT = 3600.0  # seconds for one pytest run


def find_tests(explicit: str | None, workdir: Path) -> tuple[Path, str] | None:
    """The tests folder and where it came from; None when none can be had."""
    if explicit:
        path = Path(explicit).resolve()
        if not (path / "conftest.py").exists():
            sys.exit(f"{path} is not the llama-index-workflows tests folder (no conftest.py)")
        return path, f"given: {path}"
    installed = version(DIST)
    for ver, sha256, what in (
        (installed, None, "the installed version's sdist"),
        (*PINNED, "the pinned sdist (older than the installed package)"),
    ):
        root = sdist(DIST, ver, workdir, sha256)
        if root is not None and (root / "tests" / "conftest.py").exists():
            return root / "tests", f"{what}, {DIST} {ver}"
        print(
            f"   {DIST} {ver}: {'no sdist fetched' if root is None else 'its sdist ships no tests'}"
        )
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default=os.environ.get("AGENTREWIND_UPSTREAM_LLAMAINDEX_TESTS"))
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ar-li")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    found = find_tests(args.tests, args.workdir)
    if found is None:
        print(
            f"BLOCKED: no tests for {DIST} {version(DIST)}: neither its sdist nor the pinned "
            f"one ({PINNED[0]}) could be had. Check out run-llama/workflows-py at the tag "
            f"{DIST}@{version(DIST)} and pass --tests <checkout>/packages/{DIST}/tests"
        )
        return 1
    tests, origin = found

    def run(label: str, store: str | None, only: list[str] | None = None) -> SuiteRun:
        env = pytest_env()
        argv = [*(only or [str(tests)]), *PYTEST_ARGS, *args.pytest_args]
        if store is not None:
            env["AGENTREWIND_UPSTREAM_STORE"] = store
            argv += ["-p", "llamaindex_wrap_plugin"]
        junit = args.workdir / f"{label}.xml"
        return run_pytest(argv, cwd=tests.parent, env=env, junit=junit, timeout=TIMEOUT,
                          python=sys.executable)  # fmt: skip

    print(f"{DIST} {version(DIST)} installed; tests: {origin}")
    plain = run("plain", None)
    if not report("unwrapped", plain):
        return 1
    passed = sum(state == "passed" for state, _ in plain.tests.values())
    print(f"== {len(plain.tests)} tests, {passed} pass unwrapped")
    unexplained = fatal = 0
    for store in args.stores.split(","):
        namespace = f"li-upstream-{uuid.uuid4().hex[:8]}"
        if store == "sqlite":
            url = f"sqlite:///{args.workdir / f'runs-{namespace}.db'}"
        else:
            base = own_redis_url()
            url = f"{base}{'&' if '?' in base else '?'}namespace={namespace}"
        try:
            wrapped = run(store, url)
        finally:
            if store != "sqlite":
                cleanup_redis(base, namespace)
        if not report(f"wrapped on {store}", wrapped):
            fatal += 1
            continue
        diff = compare(plain, wrapped, KNOWN)
        recheck(diff, lambda ids, n: run(f"plain-recheck{n}", None, ids), tests.parent)
        unexplained += len(diff.unexplained)
        print_diff(store, diff, wrapped)
    print(f"\n{unexplained} wrapped-only failures without a known cause, {fatal} fatal runs")
    return 1 if unexplained or fatal else 0


if __name__ == "__main__":
    sys.exit(main())
