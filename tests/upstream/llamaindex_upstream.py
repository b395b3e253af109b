"""Run llama-index-workflows' own test suite with every workflow wrapped; print what breaks.

Usage (the `upstream` nox session calls it)::

    python tests/upstream/llamaindex_upstream.py [--tests DIR] [--stores sqlite,redis]

The suite runs three times: unwrapped, then with `llamaindex_wrap_plugin` wrapping every
workflow in a `Middleware` on each store. A test that fails wrapped but passes unwrapped is a
place where the wrapper is not transparent; the script prints those, per store, and exits 1 if
there are any. Tests that fail unwrapped too (version drift between the suite and the
installed package) are only counted.

The suite comes from `--tests` (or `$AGENTREWIND_UPSTREAM_LLAMAINDEX_TESTS`): the
`packages/llama-index-workflows/tests` folder of a run-llama/workflows-py checkout, ideally at
the tag of the installed version. Without it, the script looks in the package's sdist (fetched
with `pip download`), which ships no tests as of 2.26, and says so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: redis_support
from upstream_process import run_pytest

from redis_support import own_redis_url

HERE = Path(__file__).resolve().parent
PYTEST_ARGS = [
    "-q",
    "-o",
    "addopts=",  # the suite's own addopts want xdist
    "-p",
    "no:cacheprovider",
    "--timeout=30",
    "-W",
    "ignore::DeprecationWarning",
    "--continue-on-collection-errors",
]


def find_tests(explicit: str | None) -> Path:
    """The upstream tests folder: given, or from the sdist; exits with advice otherwise."""
    if explicit:
        path = Path(explicit).resolve()
        if not (path / "conftest.py").exists():
            sys.exit(f"{path} is not the llama-index-workflows tests folder (no conftest.py)")
        return path
    installed = version("llama-index-workflows")
    scratch = Path(tempfile.mkdtemp(prefix="li-upstream-"))
    spec = f"llama-index-workflows=={installed}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", spec]
    done = subprocess.run([*cmd, "-d", str(scratch)], capture_output=True, text=True)
    for sdist in scratch.glob("*.tar.gz") if done.returncode == 0 else []:
        with tarfile.open(sdist) as tar:
            tar.extractall(scratch, filter="data")
        for conftest in scratch.glob("*/tests/conftest.py"):
            return conftest.parent
    sys.exit(
        f"no tests for llama-index-workflows {installed}: its sdist ships none (or pip could "
        "not fetch it). Check out run-llama/workflows-py (the tag "
        f"llama-index-workflows@{installed} if it exists) and pass --tests "
        "<checkout>/packages/llama-index-workflows/tests"
    )


def run_suite(tests: Path, store: str | None, report: Path) -> tuple[set[str], int]:
    """Run the suite once; return the failed test ids and how many tests ran.

    Raises:
        RuntimeError: The child pytest crashed or hung (never read as failures).
    """
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("AGENTREWIND_UPSTREAM_STORE", None)
    args = [sys.executable, "-m", "pytest", str(tests), *PYTEST_ARGS, f"--junitxml={report}"]
    if store:
        env["AGENTREWIND_UPSTREAM_STORE"] = store
        args += ["-p", "llamaindex_wrap_plugin"]
    crash = run_pytest(args, cwd=tests.parent, env=env)
    if crash:
        raise RuntimeError(f"the suite{' wrapped on ' + store if store else ''} {crash}")
    failed: set[str] = set()
    total = 0
    for case in ET.parse(report).iter("testcase"):
        total += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(f"{case.get('classname')}::{case.get('name')}")
    return failed, total


def _drop_namespace(url: str) -> None:
    sys.path.insert(0, str(HERE.parent))
    try:
        from redis_support import cleanup_redis
    except ImportError:
        return
    base, _, query = url.partition("?")
    cleanup_redis(base, query.rsplit("namespace=", 1)[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", default=os.environ.get("AGENTREWIND_UPSTREAM_LLAMAINDEX_TESTS"))
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--redis", default=None, help="default: a redis-server of our own")
    opts = parser.parse_args(argv)
    if opts.redis is None and "redis" in opts.stores.split(","):
        opts.redis = own_redis_url()
    tests = find_tests(opts.tests)
    work = Path(tempfile.mkdtemp(prefix="li-upstream-run-"))
    plain, total = run_suite(tests, None, work / "plain.xml")
    print(f"llama-index-workflows {version('llama-index-workflows')} suite at {tests}")
    print(f"unwrapped: {total} tests, {len(plain)} failing (not counted against the wrapper)")
    regressions = 0
    for kind in opts.stores.split(","):
        if kind == "sqlite":
            url = f"sqlite:///{work / 'runs.db'}"
        else:
            sep = "&" if "?" in opts.redis else "?"
            url = f"{opts.redis}{sep}namespace=li-upstream-{uuid.uuid4().hex[:8]}"
        try:
            failed, _ = run_suite(tests, url, work / f"{kind}.xml")
        finally:
            if kind != "sqlite":
                _drop_namespace(url)
        only = sorted(failed - plain)
        regressions += len(only)
        print(f"wrapped on {kind}: {len(failed)} failing, {len(only)} wrapped-only")
        for test_id in only:
            print(f"  {test_id}")
    return 1 if regressions else 0


if __name__ == "__main__":
    raise SystemExit(main())
