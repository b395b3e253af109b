"""What every upstream script shares: run a pytest suite truthfully and compare two runs.

A run keeps pytest's whole output in a log next to its junit file. A pytest exit status
other than 0 (all passed) or 1 (some tests failed) means the suite did not run to the end: a
crash (a negative status is the signal that killed it), a timeout, a collection or usage
error. Such a run is *fatal*: its junit file (if any) says nothing about the tests that never
ran, so the scripts print the fatal trace from the log and fail, instead of reading an empty
junit file as "every test failed".

A wrapped-only failure (fails wrapped, passes unwrapped) may fall under a *known cause* only
when the cause is not a difference of the wrapped object: a cause never matches a failure
whose text holds agentrewind code (a frame in `agentrewind`/`agentrewind_*`, or an error of
ours), because such a failure is ours by construction. Two narrow exceptions, each explicit
in the cause: `raised_in` (the error was raised by the framework's own code at that path, as
pytest's last line of the failure says, e.g. a pydantic-ai durable-execution rule whose message
names our engine), and `tests` (the cause lists the very tests it explains, each checked one by
one; for failures such as assertion diffs and timeouts whose text names no cause).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "KnownCause",
    "SuiteRun",
    "compare",
    "fatal_trace",
    "known_cause",
    "node_id",
    "outcomes",
    "print_diff",
    "pytest_env",
    "raised_at",
    "recheck",
    "report",
    "run_pytest",
    "sdist",
]

HERE = Path(__file__).resolve().parent

OURS = re.compile(r"agentrewind")
"""A failure whose text matches this holds our code (paths, module names, error types)."""


@dataclasses.dataclass(frozen=True)
class KnownCause:
    """A difference between wrapped and unwrapped that is not the wrapped object's.

    Attributes:
        needle: A substring of the failure's text (message and traceback).
        why: The cause, printed beside each test it explains.
        shown_by: What shows the cause is not ours (a test or a check in this repository, the
            framework's source line).
        raised_in: When set, the failure must have been raised at a path containing this (the
            last line of pytest's report), and may then hold agentrewind frames upstream.
        tests: When set, the cause explains only these test ids.
    """

    needle: str
    why: str
    shown_by: str
    raised_in: str = ""
    tests: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """One pytest run of a suite: how it ended and what each test did.

    Attributes:
        status: pytest's exit status (negative: killed by that signal; None: timed out).
        tests: test id -> (passed | failed | skipped, the failure's text).
        log: pytest's whole output.
        junit: The junit file.
    """

    status: int | None
    tests: dict[str, tuple[str, str]]
    log: Path
    junit: Path

    @property
    def fatal(self) -> bool:
        """The suite did not run to its end (crash, timeout, collection or usage error)."""
        return self.status not in (0, 1)

    def describe(self) -> str:
        if self.status is None:
            return "timed out"
        if self.status < 0:
            try:
                name = signal.Signals(-self.status).name
            except ValueError:
                name = f"signal {-self.status}"
            return f"killed by {name}"
        return f"pytest exit status {self.status}"


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | skipped, the failure's message and traceback)."""
    out: dict[str, tuple[str, str]] = {}
    if not junit.exists() or junit.stat().st_size == 0:
        return out
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        state, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
                text = f"{child.get('message') or ''}\n{child.text or ''}".strip()
            elif child.tag == "skipped" and state == "passed":
                state = "skipped"
        out[f"{case.get('classname')}::{case.get('name')}"] = (state, text)
    return out


def run_pytest(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    junit: Path,
    timeout: float,
    python: str,
) -> SuiteRun:
    """Run `python -m pytest *args --junitxml=junit`, its output kept in `<junit>.log`."""
    log = junit.with_suffix(".log")
    junit.unlink(missing_ok=True)
    cmd = [python, "-X", "faulthandler", "-m", "pytest", *args, f"--junitxml={junit}"]
    with log.open("wb") as out:
        out.write(f"$ (cd {cwd} && {' '.join(cmd)})\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: pytest and what it started
            proc.wait()
            status = None
            out.write(f"\n[upstream] timed out after {timeout:.0f}s: killed\n".encode())
    return SuiteRun(status, outcomes(junit), log, junit)


def fatal_trace(log: Path, lines: int = 60) -> str:
    """The part of a log that says why the run died: faulthandler's dump, else its tail."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    for marker in ("Fatal Python error", "Timeout", "ERROR collecting", "INTERNALERROR"):
        found = next((i for i, line in enumerate(text) if marker in line), None)
        if found is not None:
            return "\n".join(text[found : found + lines])
    return "\n".join(text[-lines:])


def raised_at(text: str) -> str:
    """Where a failure was raised: the last line of pytest's report (`path:line: Error`)."""
    return (text.strip().splitlines() or [""])[-1]


def known_cause(text: str, known: Sequence[KnownCause], test: str = "") -> KnownCause | None:
    """The known cause `text` (a failure's message and traceback) of `test` falls under, if any.

    Never one for a failure that holds agentrewind code, unless the cause says the error was
    raised by the framework (`raised_in`) or lists the test itself (`tests`).
    """
    for cause in known:
        if cause.needle not in text or (cause.tests and test not in cause.tests):
            continue
        if cause.raised_in:
            if cause.raised_in in raised_at(text):
                return cause
        elif cause.tests or not OURS.search(text):
            return cause
    return None


@dataclasses.dataclass
class Comparison:
    """Tests that pass unwrapped and not wrapped, split by whether a known cause explains them."""

    unexplained: list[str]
    explained: list[tuple[str, KnownCause]]
    flaky: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)
    """(test, unwrapped failures, reruns): failed unwrapped too when run again (`recheck`)."""

    @property
    def total(self) -> int:
        return len(self.unexplained) + len(self.explained)


def compare(plain: SuiteRun, wrapped: SuiteRun, known: Sequence[KnownCause]) -> Comparison:
    """The wrapped-only failures of a suite (both runs complete; see `SuiteRun.fatal`)."""
    result = Comparison([], [])
    for test, (state, _) in sorted(plain.tests.items()):
        if state != "passed":
            continue
        got, text = wrapped.tests.get(test, ("missing", "did not run wrapped"))
        if got == "passed":
            continue
        cause = known_cause(text, known, test)
        if cause is None:
            result.unexplained.append(test)
        else:
            result.explained.append((test, cause))
    return result


def node_id(test: str, root: Path) -> str:
    """pytest's node id (`tests/test_x.py::Class::test[p]`) of a junit test id, run in `root`."""
    classname, _, name = test.partition("::")
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = Path(*parts[:i]).with_suffix(".py")
        if (root / path).is_file():
            return "::".join([path.as_posix(), *parts[i:], name])
    return test


def recheck(
    diff: Comparison, rerun: Callable[[list[str], int], SuiteRun], root: Path, times: int = 5
) -> None:
    """Run the unexplained wrapped-only failures unwrapped up to `times` more times.

    A test that fails unwrapped in any of them is nondeterministic upstream (its wrapped
    failure says nothing about the wrapper): it moves to `diff.flaky`, printed apart with its
    counts. Reruns stop once every such test has failed unwrapped. `rerun(node ids, attempt)`
    runs those tests unwrapped. A rerun that does not finish moves nothing.
    """
    if not diff.unexplained:
        return
    ids = [node_id(test, root) for test in diff.unexplained]
    failures = dict.fromkeys(diff.unexplained, 0)
    runs = 0
    for attempt in range(times):
        run = rerun(sorted(set(ids)), attempt)
        if run.fatal:
            return
        runs += 1
        for test in failures:
            failures[test] += run.tests.get(test, ("missing", ""))[0] == "failed"
        if all(failures.values()):
            break
    diff.flaky = [(test, n, runs) for test, n in failures.items() if n]
    diff.unexplained = [test for test, n in failures.items() if not n]


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


def sdist(dist: str, version: str, workdir: Path, sha256: str | None = None) -> Path | None:
    """The unpacked sdist of `dist==version` from the package index (downloaded once).

    With `sha256` the archive must have that hash (pip's `--require-hashes`). None when the
    index has no sdist of that version (or pip cannot reach it). Only `dist` is taken as
    source: the tools that build its metadata come as wheels.
    """
    stem = f"{dist.replace('-', '_')}-{version}"
    root = workdir / stem
    if root.is_dir():
        return root
    archive = workdir / f"{stem}.tar.gz"
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", dist]
        if sha256 is None:
            cmd.append(f"{dist}=={version}")
        else:
            pins = workdir / f"{stem}.requirements.txt"
            pins.write_text(f"{dist}=={version} --hash=sha256:{sha256}\n")
            cmd += ["--require-hashes", "-r", str(pins)]
        done = subprocess.run([*cmd, "--quiet", "-d", str(workdir)], capture_output=True, text=True)
        if done.returncode != 0 or not archive.exists():
            return None
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return root if root.is_dir() else None


def pytest_env(**extra: str) -> dict[str, str]:
    """The environment of a child pytest: tests/upstream (plugins) and tests/ on the path,
    no provider keys, no tracing, no store chosen (`AGENTREWIND_UPSTREAM_STORE` unset)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH")])
        ),
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
    }
    for key in [k for k in env if k.endswith("_API_KEY")]:
        env.pop(key)  # no test may reach a provider
    env.pop("AGENTREWIND_UPSTREAM_STORE", None)
    env.update(extra)
    return env


def report(name: str, run: SuiteRun) -> bool:
    """Print a fatal run's trace; True when the run is usable."""
    if not run.fatal:
        return True
    print(f"!! {name}: FATAL, {run.describe()} after {len(run.tests)} tests; log: {run.log}")
    print("   " + fatal_trace(run.log).replace("\n", "\n   "))
    return False


def print_diff(label: str, diff: Comparison, wrapped: SuiteRun) -> None:
    """One line per store, then each wrapped-only failure with its first error line."""
    print(
        f"-- {label}: {diff.total} fail wrapped but pass unwrapped "
        f"({len(diff.explained)} of them of a known cause); log: {wrapped.log}"
    )
    for test in diff.unexplained:
        print(f"   {test}\n      {first_line(wrapped.tests.get(test, ('', 'not run'))[1])}")
    for test, cause in diff.explained:
        print(f"   {test}\n      known cause: {cause.why} (shown by {cause.shown_by})")
    if diff.flaky:
        print(f"   and {len(diff.flaky)} that also fail unwrapped when run again (not counted):")
    for test, failed, times in diff.flaky:
        print(f"   {test}\n      failed unwrapped in {failed} of {times} reruns")
