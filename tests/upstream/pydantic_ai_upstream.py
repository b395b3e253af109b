"""pydantic-ai's own agent and durable-execution tests with every agent wrapped: what breaks.

Run (the `upstream-pydantic-ai` nox session does, with the test dependencies installed):

    python tests/upstream/pydantic_ai_upstream.py [--tests DIR] [--files ...] [-- pytest args]

The suite runs twice: as it is, then with `pydantic_ai_upstream_plugin`, which sends every
agent run a test starts through `middleware.wrap(agent)` inside an agentrewind run, each test
on a fresh SQLite journal (see the plugin). It prints a table (passed both, fail wrapped only
with the first error line of each, fail both, skipped) and exits 1 when a wrapped-only failure
has no known cause or when a run did not finish (a crash, a timeout, a collection error of a
whole run: its fatal trace is printed, never counted as failures). pytest's output is kept in
`<workdir>/<run>.log` beside the junit file.

The tests come from `--tests` (or `$AGENTREWIND_UPSTREAM_PYDANTIC_AI_TESTS`): the `tests`
folder of a pydantic/pydantic-ai checkout at the tag of the installed version. Without it,
the script looks in the sdists of the installed `pydantic-ai-slim` and of `pydantic-ai` at
the same version (fetched with `pip download`); neither ships tests as of 2.68, so it says so
and exits 1 (the suite cannot be had from the package index alone).

pydantic-ai's durable-execution tests are engine tests (Temporal and Prefect need servers,
DBOS's drive `DBOSAgent`), so the files run are the agent tests and the tests of the surface
engines build on (see `FILES`; `--files` picks others); the suite's own skips (missing
optional SDKs, cassettes) count as skipped on both sides.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/upstream: _harness
from _harness import (
    KnownCause,
    SuiteRun,
    compare,
    first_line,
    pytest_env,
    report,
    run_pytest,
    sdist,
)

HERE = Path(__file__).resolve().parent
# The agent tests and the tests of the surface durable engines build on (toolsets,
# capabilities, history processors). pydantic-ai's durable-execution tests are engine tests:
# test_temporal.py needs a Temporal test server, test_prefect.py a Prefect server, and
# test_dbos.py (DBOS on SQLite) drives `DBOSAgent`; wrapping those agents again would nest two
# engines, so none of the three is in the list.
FILES = (
    "test_agent.py",
    "test_tools.py",
    "test_streaming.py",
    "test_toolsets.py",
    "test_deps.py",
    "test_usage_limits.py",
    "test_history_processor.py",
    "test_capabilities.py",
)
PYTEST_ARGS = [
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:asyncio",  # the suite runs on anyio's plugin; ours is installed for our own tests
    "-o",
    "addopts=",
    "-W",
    "ignore::DeprecationWarning",
    "-W",
    "ignore::PendingDeprecationWarning",
    "--continue-on-collection-errors",
    "--inline-snapshot=disable",
    "--timeout=120",  # pytest-timeout: one test, not the run
]
DESELECTED = {  # test id: why it runs on neither side (it would hang the wrapped run)
    "tests/test_streaming.py::test_run_stream_early_break_during_debounce_closes_cleanly": (
        "its model streams forever and the test breaks out early; a durable model request "
        "consumes the whole stream inside the unit before the agent sees it (pydantic-ai's "
        "BaseDurabilityCapability._model_request_stream_operation, every engine), so wrapped "
        "it never ends"
    ),
    "tests/test_streaming.py::test_run_stream_cancel_during_debounce_from_another_task": (
        "the same: its model yields one chunk and then waits forever, and the test cancels the "
        "stream after the first chunk, which the wrapped run never hands over"
    ),
}
KNOWN: list[KnownCause] = []
TIMEOUT = 3600.0  # seconds for one pytest run


def sdist_tests(workdir: Path) -> Path | None:
    """The `tests` folder of the installed version's sdists, if one ships it."""
    version = importlib.metadata.version("pydantic-ai-slim")
    for dist in ("pydantic-ai-slim", "pydantic-ai"):
        root = sdist(dist, version, workdir)
        if root is None:
            print(f"   no sdist of {dist}=={version} on the package index")
        elif (root / "tests" / "conftest.py").exists():
            return root / "tests"
        else:
            print(f"   the sdist of {dist}=={version} ships no tests")
    return None


def find_tests(explicit: str | None, workdir: Path) -> Path | None:
    if explicit:
        path = Path(explicit).resolve()
        if not (path / "conftest.py").exists() or not (path / "test_agent.py").exists():
            sys.exit(f"{path} is not pydantic-ai's tests folder (no conftest.py, test_agent.py)")
        return path
    return sdist_tests(workdir)


def run_suite(
    tests: Path, files: list[str], junit: Path, wrapped: bool, extra: list[str]
) -> SuiteRun:
    # BLOCKBUSTER: the suite's detector of blocking calls in the event loop (upstream enables
    # it on one CI lane only): it flags the journal's SQLite writes from async code, by design.
    env = pytest_env(LOGFIRE_SEND_TO_LOGFIRE="false", BLOCKBUSTER_ENABLED="false")
    args = [*(f"tests/{f}" for f in files), *PYTEST_ARGS, *extra]
    args += [f"--deselect={test}" for test in DESELECTED]
    if wrapped:
        env["AGENTREWIND_UPSTREAM_STORE"] = "sqlite"
        args += ["-p", "pydantic_ai_upstream_plugin"]
    return run_pytest(
        args, cwd=tests.parent, env=env, junit=junit, timeout=TIMEOUT, python=sys.executable
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default=os.environ.get("AGENTREWIND_UPSTREAM_PYDANTIC_AI_TESTS"))
    parser.add_argument("--files", default=",".join(FILES))
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ar-upstream-pai"
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("pydantic-ai-slim")
    tests = find_tests(args.tests, args.workdir)
    if tests is None:
        print(
            f"BLOCKED: no tests for pydantic-ai-slim {version} on the package index (its sdists "
            "ship none). Check out pydantic/pydantic-ai at the tag v"
            f"{version} and pass --tests <checkout>/tests (or set "
            "$AGENTREWIND_UPSTREAM_PYDANTIC_AI_TESTS)."
        )
        return 1
    files = [f for f in args.files.split(",") if (tests / f).exists()]
    missing = sorted(set(args.files.split(",")) - set(files))
    print(f"pydantic-ai-slim {version}; tests at {tests}: {', '.join(files)}")
    if missing:
        print(f"   not in this checkout: {', '.join(missing)}")
    for test, why in DESELECTED.items():
        print(f"   deselected on both sides: {test}\n      {why}")
    plain = run_suite(tests, files, args.workdir / "plain.xml", False, args.pytest_args)
    if not report("unwrapped", plain):
        return 1
    wrapped = run_suite(tests, files, args.workdir / "wrapped.xml", True, args.pytest_args)
    if not report("wrapped (SQLite)", wrapped):
        return 1
    diff = compare(plain, wrapped, KNOWN)
    state = {test: outcome for test, (outcome, _) in wrapped.tests.items()}
    both = sum(s == "passed" and state.get(t) == "passed" for t, (s, _) in plain.tests.items())
    fail_both = sum(s == "failed" and state.get(t) == "failed" for t, (s, _) in plain.tests.items())
    skipped = sum(s == "skipped" for s, _ in plain.tests.values())
    other = len(plain.tests) - both - diff.total - fail_both - skipped
    print(f"\n{len(plain.tests)} tests (logs: {plain.log}, {wrapped.log})")
    print(f"  passed both            {both}")
    print(f"  fail wrapped only      {diff.total} ({len(diff.explained)} of a known cause)")
    print(f"  fail both              {fail_both}")
    print(f"  skipped (unwrapped)    {skipped}")
    if other:
        print(f"  other (fail unwrapped only, or skipped on one side) {other}")
    for test in diff.unexplained:
        print(f"   {test}\n      {first_line(wrapped.tests.get(test, ('', 'not run'))[1])}")
    for test, cause in diff.explained:
        print(f"   {test}\n      known cause: {cause.why} (shown by {cause.shown_by})")
    return 1 if diff.unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
