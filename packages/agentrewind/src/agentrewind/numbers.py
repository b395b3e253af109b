"""One set of numbers for a run: what `runs`, `metrics`, the viewer and OpenTelemetry show.

Every surface reads a run's figures here, from the same two places: its records (`steps`: each
record `log` lists, every attempt its own) and its stored totals (replays, failures, reruns,
cache hits, attempts, executions, seconds and tokens saved), which each execution writes as it
goes (`Run.write_totals`: before the first call it runs after replays or failures, and at its end).
"""

from __future__ import annotations

from .documents.facts import step_counts
from .records import RunInfo, RunMetrics
from .stores import Store

__all__ = ["run_numbers", "with_steps"]


def with_steps(info: RunInfo, steps: int) -> RunMetrics:
    """The run's figures: its stored totals with `steps` counted from its records."""
    numbers = info.metrics.copy()
    numbers.steps = steps
    return numbers


def run_numbers(store: Store, run: str | RunInfo) -> RunMetrics:
    """The figures of one run of `store` (zeros when the store has no such run).

    Args:
        store: An open store.
        run: The run's id, or its `RunInfo` when the caller has read it already.
    """
    info = store.get_run(run) if isinstance(run, str) else run
    if info is None:
        return RunMetrics()
    return with_steps(info, step_counts(store, [info.run_id])[info.run_id])
