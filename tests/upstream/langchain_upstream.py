"""LangChain's own unit tests against wrapped runnables: what fails wrapped but passes unwrapped.

Run (the `upstream-langchain` nox session does, with the test dependencies installed):

    python tests/upstream/langchain_upstream.py [--suites runnables,agents] [--stores sqlite,redis]

It downloads the sdists of the installed `langchain-core` and `langchain` (their tests ship in
them), then runs langchain-core's `tests/unit_tests/runnables` and langchain's
`tests/unit_tests/agents` once as they are and once per store with
`langchain_upstream_plugin`, which sends every call a test makes on a runnable through
`Middleware(store).wrap(runnable)` (see the plugin). It prints, per suite and store, the tests
that fail wrapped but pass unwrapped, each with its error and, when it is one, the known
cause it falls under. Redis is `$AGENTREWIND_TEST_REDIS`, else a redis-server of our own.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: redis_support
from upstream_process import run_pytest

from redis_support import own_redis_url

HERE = Path(__file__).resolve().parent
SUITES = {  # name: (distribution, test directory inside its sdist)
    "runnables": ("langchain-core", "tests/unit_tests/runnables"),
    "agents": ("langchain", "tests/unit_tests/agents"),
}
KNOWN = [  # (substring of the error, the cause: not a difference of the wrapped object)
    (
        "blockbuster.blockbuster.BlockingError",
        "a sync call made inside an event loop journals with blocking store I/O",
    ),
]


def sdist(dist: str, workdir: Path) -> Path:
    """The unpacked sdist of the installed version of `dist` (downloaded once)."""
    version = importlib.metadata.version(dist)
    name = dist.replace("-", "_")
    root = workdir / f"{name}-{version}"
    if root.is_dir():
        return root
    archive = workdir / f"{name}-{version}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--quiet",
                f"{dist}=={version}",
                "-d",
                str(workdir),
            ],
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return root


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped, first line of the error)."""
    out: dict[str, tuple[str, str]] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        state, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
                message = (child.get("message") or child.text or "").strip().splitlines()[0:1]
                message = message[0][:200] if message else ""
            elif child.tag == "skipped":
                state = "skipped"
        out[f"{case.get('classname')}::{case.get('name')}"] = (state, message)
    return out


def run_suite(
    root: Path, tests: str, junit: Path, store: str | None, extra: list[str]
) -> str | None:
    """Run the suite (wrapped on `store`); None, or how the child crashed or hung."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
        ),
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        tests,
        "-q",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        f"--junitxml={junit}",
        *extra,
    ]
    if store is not None:
        env["AGENTREWIND_UPSTREAM_STORE"] = store
        cmd += ["-p", "langchain_upstream_plugin"]
    return run_pytest(cmd, cwd=root, env=env)


def cause(message: str) -> str:
    return next((why for needle, why in KNOWN if needle in message), "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="runnables,agents")
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ar-upstream")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    redis = own_redis_url() if "redis" in args.stores.split(",") else ""
    total_unexplained = crashes = 0
    for suite in args.suites.split(","):
        dist, tests = SUITES[suite]
        root = sdist(dist, args.workdir)
        plain_xml = args.workdir / f"{suite}-plain.xml"
        crash = run_suite(root, tests, plain_xml, None, args.pytest_args)
        if crash:
            print(f"\n!! {dist} {tests} unwrapped {crash}")
            crashes += 1
            continue
        plain = outcomes(plain_xml)
        passed = {t for t, (state, _) in plain.items() if state == "passed"}
        print(f"\n== {dist} {tests}: {len(passed)} of {len(plain)} pass unwrapped")
        for store in args.stores.split(","):
            url = (
                f"sqlite:///{args.workdir / f'{suite}-journal.db'}" if store == "sqlite" else redis
            )
            wrapped_xml = args.workdir / f"{suite}-{store}.xml"
            crash = run_suite(root, tests, wrapped_xml, url, args.pytest_args)
            if crash:  # not a list of failures: the process died or hung
                print(f"!! {store}: the wrapped suite {crash}")
                crashes += 1
                continue
            wrapped = outcomes(wrapped_xml)
            broken = sorted(t for t in passed if wrapped.get(t, ("missing", ""))[0] != "passed")
            unexplained = [t for t in broken if not cause(wrapped.get(t, ("", ""))[1])]
            total_unexplained += len(unexplained)
            print(
                f"-- {store}: {len(broken)} fail wrapped but pass unwrapped "
                f"({len(broken) - len(unexplained)} of them of a known cause)"
            )
            for test in broken:
                message = wrapped.get(test, ("missing", "not run"))[1]
                why = cause(message)
                print(
                    f"   {test}\n      {message}" + (f"\n      known cause: {why}" if why else "")
                )
    print(f"\n{total_unexplained} wrapped-only failures without a known cause")
    if crashes:
        print(f"{crashes} suite run(s) crashed or hung (see !! above)")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
