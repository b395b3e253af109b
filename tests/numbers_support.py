"""One set of numbers: a run's figures as each of the four surfaces that show them reports them.

`agentrewind runs --json`, `agentrewind metrics RUN --json`, the viewer's JSON API (a real
server over HTTP) and the OpenTelemetry run span of the execution that ended the run (an SDK
in-memory exporter). The attempts before it run in forked children that die by SIGKILL
(`in_child`, `die`), so what a killed execution wrote as it went is what counts.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrewind
from agentrewind.ui import make_server
from cli_support import batch

__all__ = ["FIGURES", "assert_one_set", "die", "four_surfaces", "in_child", "spans"]

FIGURES = (
    "steps", "replay_hits", "seconds_saved", "tokens_saved", "failures", "reruns", "cache_hits",
    "attempts", "executions",
)  # fmt: skip

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@contextlib.contextmanager
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """OpenTelemetry spans of runs opened inside the block (the global provider is set once
    per process, so the observer is shown this one instead)."""
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _PROVIDER)
    _EXPORTER.clear()
    try:
        yield _EXPORTER
    finally:
        monkeypatch.undo()


def die() -> None:
    """SIGKILL this process (an attempt that dies mid-call)."""
    os.kill(os.getpid(), signal.SIGKILL)


def in_child(fn: Callable[[], Any]) -> int:
    """Run `fn` in a forked child; its exit code (-9: it died by SIGKILL)."""
    child = multiprocessing.get_context("fork").Process(target=_quietly, args=(fn,))
    child.start()
    child.join(120)
    assert child.exitcode is not None, "the child did not end"
    return child.exitcode


def _quietly(fn: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):  # an attempt that raises ends like a failed run
        fn()


def _viewer(url: str, run_id: str) -> dict[str, Any]:
    store = agentrewind.connect(url)
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"{server.url.rstrip('/')}/api/runs/{run_id}", timeout=20) as r:
            data: dict[str, Any] = json.loads(r.read())["run"]
    finally:
        server.shutdown()
        server.server_close()
        store.close()
    return data


def four_surfaces(url: str, run_id: str, exporter: InMemorySpanExporter) -> dict[str, Any]:
    """The run's figures from `runs`, `metrics`, the viewer and the last OTel run span."""
    listed, metrics = batch(
        ["runs", "--json", "--store", url], ["metrics", run_id, "--json", "--store", url]
    )
    rows = [r for r in listed.ok().json() if r["ref"] == run_id]  # type: ignore[union-attr]
    assert len(rows) == 1, listed.out
    ended = [s for s in exporter.get_finished_spans() if s.name == f"agentrewind.run {run_id}"]
    assert ended, [s.name for s in exporter.get_finished_spans()]
    attributes = dict(ended[-1].attributes or {})
    otel = {k: attributes.get(f"agentrewind.run.{k}") for k in FIGURES}
    return {
        "runs": rows[0]["metrics"] | {"steps": rows[0]["steps"]},
        "metrics": metrics.ok().json(),
        "viewer": _viewer(url, run_id),
        "otel": otel,
    }


def assert_one_set(
    url: str, run_id: str, exporter: InMemorySpanExporter, **expected: float
) -> dict[str, Any]:
    """Assert the four surfaces report the same figures, and the `expected` ones; return them."""
    got = four_surfaces(url, run_id, exporter)

    def figures(data: dict[str, Any]) -> dict[str, Any]:
        return {k: round(data[k], 6) if k == "seconds_saved" else data[k] for k in FIGURES}

    first = figures(got["runs"])
    for surface, data in got.items():
        assert figures(data) == first, f"{surface} disagrees with runs: {figures(data)} != {first}"
    assert {k: first[k] for k in expected} == expected
    return first
