"""OpenTelemetry spans of a LlamaIndex workflow that fails in a step, then resumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import li_flows
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrewind_llamaindex import Middleware

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _calls(spans: InMemorySpanExporter, run_id: str) -> tuple[Any, list[tuple[str, Any]]]:
    done = spans.get_finished_spans()
    (run,) = [s for s in done if s.name == f"agentrewind.run {run_id}"]
    calls = [s for s in done if s.name != run.name and s.name.startswith("agentrewind.")]
    for s in calls:  # children of the run span, in its trace
        assert s.parent is not None and s.parent.span_id == run.context.span_id
        assert s.context.trace_id == run.context.trace_id
        assert s.attributes is not None and s.attributes["agentrewind.run_id"] == run_id
    return run, [(s.name, s.attributes["agentrewind.outcome"]) for s in calls]


async def test_workflow_spans_recorded_then_resumed(tmp_path, spans):
    mw = Middleware(f"sqlite:///{tmp_path / 'o.db'}")
    wf = mw.wrap(li_flows.Flaky(timeout=30))
    li_flows.FIX["fixed"] = False
    try:
        with pytest.raises(RuntimeError):
            await wf.run(run_id="otel-1")
        run, calls = _calls(spans, "otel-1")
        assert run.attributes["agentrewind.status"] == "failed"
        assert ("agentrewind.node step_result:first", "executed") in calls
        assert calls[-1] == ("agentrewind.node step_result:second", "failed")
        spans.clear()
        li_flows.FIX["fixed"] = True
        await wf.run(run_id="otel-1")
        run2, calls2 = _calls(spans, "otel-1")
    finally:
        li_flows.FIX["fixed"] = False
        mw.close()
    assert run2.attributes["agentrewind.status"] == "completed"
    # the resume continues from the journal: the first step does not run (no span), the second does
    assert ("agentrewind.node step_result:second", "executed") in calls2
    assert not any(name.endswith("step_result:first") for name, _ in calls2)
