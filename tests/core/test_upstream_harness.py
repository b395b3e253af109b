"""The upstream sessions tell the truth: a crash, a timeout or a collection error fails them
with its trace, pytest's output is kept, and no known cause hides a failure in our code."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "upstream" / "_harness.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upstream_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


harness = _load()


def run(tmp_path: Path, body: str, timeout: float = 60) -> object:
    (tmp_path / "test_it.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return harness.run_pytest(
        ["test_it.py", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        junit=tmp_path / "out.xml",
        timeout=timeout,
        python=sys.executable,
    )


def test_failures_are_read_from_junit_and_the_output_is_kept(tmp_path: Path) -> None:
    result = run(tmp_path, "def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2\n")
    assert result.status == 1 and not result.fatal
    assert result.tests["test_it::test_ok"] == ("passed", "")
    state, text = result.tests["test_it::test_bad"]
    assert state == "failed" and "assert 1 == 2" in text
    assert result.log == tmp_path / "out.log"
    assert "1 failed, 1 passed" in result.log.read_text()


def test_a_crash_is_fatal_with_its_trace(tmp_path: Path) -> None:
    body = (
        "import ctypes\n\ndef test_ok():\n    pass\n\n"
        "def test_crash():\n    ctypes.string_at(0)\n\ndef test_after():\n    pass\n"
    )
    result = run(tmp_path, body)
    assert result.fatal and result.status is not None and result.status < 0
    assert result.describe() == "killed by SIGSEGV"
    trace = harness.fatal_trace(result.log)
    assert "Fatal Python error: Segmentation fault" in trace
    assert "test_crash" in trace


def test_a_collection_error_is_fatal(tmp_path: Path) -> None:
    result = run(tmp_path, "import no_such_module_here\n\ndef test_ok():\n    pass\n")
    assert result.fatal and result.status == 2
    assert "no_such_module_here" in harness.fatal_trace(result.log)


def test_a_timeout_is_fatal(tmp_path: Path) -> None:
    result = run(tmp_path, "import time\n\ndef test_slow():\n    time.sleep(60)\n", timeout=3)
    assert result.fatal and result.status is None
    assert result.describe() == "timed out"
    assert "timed out after 3s" in harness.fatal_trace(result.log)


CAUSE = harness.KnownCause("SomeUpstreamFlake", "the suite's own flake", "tests/x.py::test_y")


def test_a_known_cause_never_hides_a_traceback_through_agentrewind() -> None:
    upstream_only = "SomeUpstreamFlake: boom\n  File site-packages/langchain_core/x.py"
    ours = upstream_only + "\n  File adapters/langchain/src/agentrewind_langchain/_drive.py"
    assert harness.known_cause(upstream_only, [CAUSE]) is CAUSE
    assert harness.known_cause(ours, [CAUSE]) is None
    assert harness.known_cause("SomethingElse", [CAUSE]) is None


def test_a_framework_rule_naming_our_engine_is_known_only_where_the_framework_raised_it() -> None:
    rule = harness.KnownCause(
        "needs a unique `name`", "the framework's rule", "x.py:1", raised_in="pydantic_ai/durable"
    )
    text = (
        "UserError: An agent needs a unique `name` to be used with agentrewind\n"
        "  File adapters/pydantic-ai/src/agentrewind_pydantic_ai/_agent.py\n"
    )
    assert harness.known_cause(text + "site/pydantic_ai/durable/_base.py:448: UserError", [rule])
    # the same words raised from our code are ours
    ours = text + "adapters/pydantic-ai/src/agentrewind_pydantic_ai/_agent.py:90: UserError"
    assert harness.known_cause(ours, [rule]) is None


def test_a_cause_listing_its_tests_explains_those_tests_only() -> None:
    listed = harness.KnownCause("", "streams read whole", "check.py", tests=frozenset({"t::a"}))
    diff_text = "assert [PartStartEvent(...)] == [...]\n  agentrewind run id in the diff"
    assert harness.known_cause(diff_text, [listed], "t::a") is listed
    assert harness.known_cause(diff_text, [listed], "t::b") is None


def test_compare_counts_wrapped_only_failures(tmp_path: Path) -> None:
    suite = harness.SuiteRun
    plain = suite(
        1,
        {"a": ("passed", ""), "b": ("passed", ""), "c": ("failed", "x"), "d": ("passed", "")},
        tmp_path / "p.log",
        tmp_path / "p.xml",
    )
    wrapped = suite(
        1,
        {
            "a": ("failed", "SomeUpstreamFlake in langchain_core"),
            "b": ("failed", "SomeUpstreamFlake in agentrewind/stores/sqlite.py"),
            "c": ("failed", "x"),
        },
        tmp_path / "w.log",
        tmp_path / "w.xml",
    )
    diff = harness.compare(plain, wrapped, [CAUSE])
    assert diff.explained == [("a", CAUSE)]
    assert diff.unexplained == ["b", "d"]  # d: did not run wrapped at all
    assert diff.total == 3


@pytest.mark.parametrize("status", [0, 1])
def test_only_exit_statuses_0_and_1_are_complete_runs(tmp_path: Path, status: int) -> None:
    assert not harness.SuiteRun(status, {}, tmp_path / "l", tmp_path / "j").fatal
    assert harness.SuiteRun(5, {}, tmp_path / "l", tmp_path / "j").fatal


def test_recheck_sets_apart_only_tests_that_fail_unwrapped_when_run_again(tmp_path: Path) -> None:
    """A wrapped-only failure that fails unwrapped on a rerun is the suite's own flake; one
    that keeps passing unwrapped stays a wrapped-only failure. Reruns use pytest node ids."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "test_it.py").write_text(
        "from pathlib import Path\n\n"
        "class TestC:\n"
        "    def test_flaky(self):  # fails on its second run\n"
        "        marker = Path(__file__).with_name('ran')\n"
        "        n = int(marker.read_text()) if marker.exists() else 0\n"
        "        marker.write_text(str(n + 1))\n"
        "        assert n != 1\n\n"
        "def test_steady():\n    pass\n"
    )
    ran: list[list[str]] = []

    def rerun(ids: list[str], attempt: int) -> object:
        ran.append(ids)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        return harness.run_pytest(
            [*ids, "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path,
            env=env,
            junit=tmp_path / f"re{attempt}.xml",
            timeout=60,
            python=sys.executable,
        )

    (tmp_path / "pkg" / "ran").write_text("0")  # its unwrapped run: passed
    flaky, steady = "pkg.test_it.TestC::test_flaky", "pkg.test_it::test_steady"
    assert harness.node_id(flaky, tmp_path) == "pkg/test_it.py::TestC::test_flaky"
    assert harness.node_id(steady, tmp_path) == "pkg/test_it.py::test_steady"
    diff = harness.Comparison([flaky, steady], [])
    harness.recheck(diff, rerun, tmp_path, times=3)
    assert diff.flaky == [(flaky, 1, 3)]  # failed on the second rerun only
    assert diff.unexplained == [steady]
    assert len(ran) == 3 and ran[0] == sorted(harness.node_id(t, tmp_path) for t in (flaky, steady))
