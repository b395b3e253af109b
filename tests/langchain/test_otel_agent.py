"""OpenTelemetry spans of a wrapped create_agent that fails in a tool, then resumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lc_support import Flaky, make_agent

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrewind_langchain import Middleware

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}
_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _calls(spans: InMemorySpanExporter, run_id: str) -> tuple[Any, list[Any]]:
    done = spans.get_finished_spans()
    (run,) = [s for s in done if s.name == f"agentrewind.run {run_id}"]
    calls = [s for s in done if s.name != run.name and s.name.startswith("agentrewind.")]
    for s in calls:
        assert s.parent is not None and s.parent.span_id == run.context.span_id
        assert s.context.trace_id == run.context.trace_id
    return run, [(s.name.split(" ")[0], s.attributes) for s in calls]


def test_agent_spans_recorded_then_replayed(tmp_path: Any, spans: InMemorySpanExporter) -> None:
    mw = Middleware(f"sqlite:///{tmp_path / 'o.db'}")
    config = {"configurable": {"thread_id": "otel-agent"}}
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        mw.wrap(make_agent(flaky, counter)).invoke(INPUT, config)
    run, calls = _calls(spans, "otel-agent")
    outcomes = [(kind, a["agentrewind.outcome"]) for kind, a in calls]
    assert outcomes == [
        ("agentrewind.llm", "executed"),
        ("agentrewind.tool", "executed"),
        ("agentrewind.llm", "executed"),
        ("agentrewind.tool", "failed"),
    ]
    assert str(calls[1][1]["agentrewind.name"]).startswith("lookup_order")
    assert run.attributes is not None and run.attributes["agentrewind.status"] == "failed"

    spans.clear()
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    mw.wrap(make_agent(flaky2, counter2)).invoke(INPUT, config)
    run2, calls2 = _calls(spans, "otel-agent")
    outcomes2 = [(kind, a["agentrewind.outcome"]) for kind, a in calls2]
    assert outcomes2 == [
        ("agentrewind.llm", "replayed"),
        ("agentrewind.tool", "replayed"),
        ("agentrewind.llm", "replayed"),
        ("agentrewind.tool", "executed"),
        ("agentrewind.llm", "executed"),
    ]
    replayed_llm = calls2[0][1]
    assert replayed_llm["agentrewind.replayed"] is True
    assert replayed_llm["agentrewind.tokens_saved"] == replayed_llm["agentrewind.tokens"]
    assert run2.attributes is not None and run2.attributes["agentrewind.replay_hits"] == 3
    assert counter2["calls"] == 1
    mw.close()
