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
folder of a pydantic/pydantic-ai checkout at the tag of the installed version (or the nearest
one). The script fetches nothing: without it, it prints a BLOCKED line saying what to check
out and exits 1 (pydantic-ai's sdists ship no tests, so the package index cannot supply them).

Every wrapped-only failure of the installed version is explained in `KNOWN` (and in
docs/reference/pydantic-ai-upstream.md); `--name-agents` names each unnamed agent before
wrapping it (as a user must for any durable engine), a diagnostic run that shows what fails
beneath pydantic-ai's name rule.

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
# pydantic-ai-slim 2.68.0's source (pydantic_ai/durable_exec/...), cited by the causes below.
BASE = "pydantic_ai/durable_exec/_base.py"
NAME_RULE = (
    "pydantic-ai's durable rule, every engine: an agent needs a name to key its durable units "
    "(_base.py:448 for every capability engine; DBOSAgent: dbos/_agent.py:133). Here the test "
    "runs an agent whose name cannot be inferred (infer_name=False, a module-level agent, a run "
    "started in another task); named, the test passes (--name-agents)"
)
STREAMING = (
    "pydantic-ai's durable streaming, every engine: a durable model request consumes its whole "
    "stream inside the unit (_base.py:1820-1847) and the run sees the completed response, so no "
    "deltas, no partial outputs, no early stop and a stream already closed; DBOSDurability gives "
    "the same events (tests/upstream/pydantic_ai_dbos_check.py)"
)


def _ids(*names: str) -> frozenset[str]:
    return frozenset(names)


KNOWN: list[KnownCause] = [
    KnownCause(
        "An agent needs to have a unique `name`",
        NAME_RULE,
        "pydantic_ai/durable_exec/_base.py:448, dbos/_agent.py:133",
        raised_in=BASE,
    ),
    KnownCause(
        'Actual message: "An agent needs to have a unique `name`',
        NAME_RULE + " (the test expected another error first)",
        "pydantic_ai/durable_exec/_base.py:448",
        tests=_ids(
            "tests.test_tools::test_tool_name_conflict_hint",
            "tests.test_agent::test_agent_metadata_persisted_when_run_fails",
        ),
    ),
    KnownCause(
        "TimeoutError",
        NAME_RULE + ": the agent runs in a task the test waits on for 10s, so the name error "
        "surfaces as the test's own timeout",
        "--name-agents: the six pass",
        tests=_ids(
            "tests.test_agent.TestMultipleToolCalls::"
            "test_exhaustive_outer_cancellation_cancels_pending_tools",
            "tests.test_agent::test_parallel_tool_outer_cancellation_only_cancels_pending_tool_tasks",
            "tests.test_agent::test_parallel_tool_outer_cancellation_waits_for_tool_cleanup",
            "tests.test_agent::test_run_handoff_survives_absorbed_cancellation",
            "tests.test_agent::test_streaming_handoff_survives_absorbed_cancellation",
            "tests.test_agent::test_wrap_run_readiness_wait_cancels_wrapper_task_on_outer_cancellation",
        ),
    ),
    KnownCause(
        "An agent needs to have a `model`",
        "pydantic-ai's durable rule, every engine: the model is bound when the agent is, it "
        "cannot come with the run (_base.py:2015; DBOSAgent: dbos/_agent.py:142)",
        "pydantic_ai/durable_exec/_base.py:2015, dbos/_agent.py:142",
        raised_in=BASE,
    ),
    KnownCause(
        "Actual message: 'An agent needs to have a `model`",
        "pydantic-ai's durable rule (_base.py:2015): the test expected pydantic-ai's plain "
        "no-model error, the durable layer refuses the model-less agent first",
        "pydantic_ai/durable_exec/_base.py:2015",
        tests=_ids("tests.test_agent::test_run_without_model"),
    ),
    KnownCause(
        "was not registered with `RewindDurability`",
        "pydantic-ai's durable rule, every engine: a model passed at run time (override, "
        "run(model=...)) must be registered with the capability (`models=`), since a `Model` "
        "is not rebuilt from its id inside a unit (_base.py:2122; DBOSDurability inherits it)",
        "pydantic_ai/durable_exec/_base.py:2122",
        raised_in=BASE,
    ),
    KnownCause(
        "Toolsets that are 'leaves'",
        "pydantic-ai's durable rule for engines that journal tool calls: a leaf toolset needs an "
        "`id` to key its units (_base.py:962, 988; Temporal: temporal/_agent.py, Prefect: "
        "prefect/_durability.py:57 wrap function toolsets as we do; DBOS journals no function "
        "tool call, dbos/_durability.py:90, so it asks ids of MCP and dynamic toolsets only)",
        "pydantic_ai/durable_exec/_base.py:962,988",
        raised_in=BASE,
    ),
    KnownCause(
        "Actual message: \"Toolsets that are 'leaves'",
        "pydantic-ai's toolset id rule (_base.py:962) met before the error the test expects",
        "pydantic_ai/durable_exec/_base.py:962",
        tests=_ids(
            "tests.test_agent::"
            "test_agent_rejects_conflicting_agent_level_dynamic_capability_native_tool_ids"
        ),
    ),
    KnownCause(
        "cannot be added at runtime with agentrewind",
        "pydantic-ai's durable rule: a toolset passed to one run bypasses registration, so its "
        "calls would not be journaled (_runtime_toolsets.py:126, our spec's "
        "unsupported_runtime_toolset_kinds as Prefect's, prefect/_durability.py:56; DBOS allows "
        "function toolsets because it journals no function tool call, dbos/_durability.py:89)",
        "pydantic_ai/durable_exec/_runtime_toolsets.py:126",
        raised_in="pydantic_ai/durable_exec/_runtime_toolsets.py",
    ),
    KnownCause(
        "cannot be added at runtime with agentrewind",
        "pydantic-ai's runtime-toolset rule (_runtime_toolsets.py:126) met before the error "
        "the test expects",
        "pydantic_ai/durable_exec/_runtime_toolsets.py:126",
        tests=_ids(
            "tests.test_agent::test_agent_override_native_tools_preserves_dynamic_capability_tools"
            "[False]",
            "tests.test_agent::test_agent_override_native_tools_preserves_dynamic_capability_tools"
            "[True]",
        ),
    ),
    KnownCause(
        "JournalValueError: agentrewind cannot journal",
        "ours, by design: the journal stores JSON, so a tool result JSON cannot hold fails at "
        "the write with our named JournalValueError (pydantic-ai's serialization_failure hook, "
        "_base.py:1014) instead of pydantic-ai's PydanticSerializationError later (which cannot "
        "be subclassed)",
        "tests/pydanticai/test_durability.py::"
        "test_a_result_the_journal_cannot_store_fails_at_the_write_with_a_named_error",
        raised_in=BASE,
    ),
    KnownCause(
        "",
        "JSON journal, by design: a model response crosses the unit as JSON and is rebuilt, so "
        "the history holds a copy, not the object the model returned (pydantic-ai's JSON codec, "
        "durable_exec/_codec.py; the live run and a resumed one see the same value)",
        "tests/upstream/pydantic_ai_dbos_check.py (identity)",
        tests=_ids(
            "tests.test_agent::test_agent_fill_run_metadata_mutates_unstamped_response_singleton"
        ),
    ),
    KnownCause(
        "",
        STREAMING,
        "tests/upstream/pydantic_ai_dbos_check.py",
        tests=_ids(
            "tests.test_streaming::test_args_validator_deferral_not_triggered_by_partial_args",
            "tests.test_streaming::test_args_validator_event_args_valid_field",
            "tests.test_streaming::test_plain_response",
            "tests.test_streaming::test_run_event_stream_handler",
            "tests.test_streaming::test_run_stream_event_stream_handler",
            "tests.test_streaming::test_run_stream_events",
            "tests.test_streaming::test_run_stream_sync_keyboard_interrupt_closes_open_stream",
            "tests.test_streaming::test_run_sync_event_stream_handler",
            "tests.test_streaming::test_stream_structured_output",
            "tests.test_streaming::test_stream_tool_returning_user_content",
            "tests.test_streaming::test_structured_response_iter",
            "tests.test_streaming::test_structured_response_sync_validation",
            "tests.test_streaming.TestPartialOutput::test_output_function_structured",
            "tests.test_streaming.TestPartialOutput::test_output_function_text",
            "tests.test_streaming.TestPartialOutput::test_output_validator_structured",
            "tests.test_streaming.TestPartialOutput::test_output_validator_text",
            "tests.test_streaming.TestPartialOutput::test_stream_output_partial_then_final_validation",
            "tests.test_streaming.TestStreamingCachedOutput::test_output_validator_text_double_stream_text",
            # beneath the name rule (--name-agents)
            "tests.test_streaming::test_iter_stream_output_tool_dont_hit_retry_limit",
            "tests.test_streaming::test_iter_stream_structured_output",
        ),
    ),
]
TIMEOUT = 3600.0  # seconds for one pytest run


def find_tests(explicit: str | None) -> Path | None:
    if not explicit:
        return None
    path = Path(explicit).resolve()
    if not (path / "conftest.py").exists() or not (path / "test_agent.py").exists():
        sys.exit(f"{path} is not pydantic-ai's tests folder (no conftest.py, test_agent.py)")
    return path


def run_suite(
    tests: Path, files: list[str], junit: Path, wrapped: bool, extra: list[str]
) -> SuiteRun:
    # BLOCKBUSTER: the suite's detector of blocking calls in the event loop (upstream enables
    # it on one CI lane only): it flags the journal's SQLite writes from async code, by design.
    env = pytest_env(LOGFIRE_SEND_TO_LOGFIRE="false", BLOCKBUSTER_ENABLED="false")
    if not wrapped:
        env.pop("AGENTREWIND_UPSTREAM_NAME_AGENTS", None)
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
    parser.add_argument(
        "--name-agents",
        action="store_true",
        help="name unnamed agents before wrapping them (diagnostic: beneath the name rule)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    version = importlib.metadata.version("pydantic-ai-slim")
    tests = find_tests(args.tests)
    if tests is None:
        print(
            f"BLOCKED: no pydantic-ai tests given (pydantic-ai's sdists ship none and this script "
            f"fetches nothing). Check out pydantic/pydantic-ai at the tag v{version} (or the "
            "nearest) and pass --tests <checkout>/tests (or set "
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
    if args.name_agents:
        os.environ["AGENTREWIND_UPSTREAM_NAME_AGENTS"] = "1"
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
