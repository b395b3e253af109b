"""OpenTelemetry spans of a plain journal run, recorded then replayed (SDK in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrewind
from agentrewind import telemetry
from agentrewind.errors import DivergenceWarning

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; the observer asks for it per run.
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _PROVIDER)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _pipeline(mw: agentrewind.Middleware, fail: bool) -> Any:
    def send(x: int) -> int:
        if fail:
            raise ConnectionError("down")
        return x + 1

    with mw.run("order-1") as run:
        a = run.step("fetch", lambda: 41)
        b = run.step("charge", lambda x: x, a)
        return run.step("send", send, b)


def test_spans_for_a_run_recorded_then_replayed(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(ConnectionError):
        _pipeline(mw, fail=True)
    first = spans.get_finished_spans()
    run1 = _by_name(first, "agentrewind.run order-1")
    assert run1.attributes is not None
    assert run1.attributes["agentrewind.status"] == "failed"
    assert run1.status.status_code == trace.StatusCode.ERROR
    calls = [s for s in first if s is not run1]
    assert [(s.name, s.attributes["agentrewind.outcome"]) for s in calls] == [  # type: ignore[index]
        ("agentrewind.custom fetch", "executed"),
        ("agentrewind.custom charge", "executed"),
        ("agentrewind.custom send", "failed"),
    ]
    for s in calls:  # children of the run span, in its trace
        assert s.parent is not None and s.parent.span_id == run1.context.span_id
        assert s.context.trace_id == run1.context.trace_id
    failed = calls[2]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    fetch = calls[0].attributes
    assert fetch is not None and fetch["agentrewind.replayed"] is False
    assert str(fetch["agentrewind.key"]).startswith("custom:fetch:")

    spans.clear()
    assert _pipeline(mw, fail=False) == 42
    second = spans.get_finished_spans()
    run2 = _by_name(second, "agentrewind.run order-1")
    assert run2.attributes is not None
    assert run2.attributes["agentrewind.status"] == "completed"
    assert run2.attributes["agentrewind.replay_hits"] == 2
    assert run2.attributes["agentrewind.steps"] == 1
    # The failed attempt left the run `running`? No: it ended `failed`, so no takeover event.
    assert [e.name for e in run2.events] == []
    outcomes = {s.name: s.attributes for s in second if s is not run2}
    charge = outcomes["agentrewind.custom charge"]
    assert charge is not None and charge["agentrewind.replayed"] is True
    assert charge["agentrewind.outcome"] == "replayed"
    assert float(charge["agentrewind.seconds_saved"]) >= 0.0  # type: ignore[arg-type]
    send = outcomes["agentrewind.custom send"]
    assert send is not None and send["agentrewind.outcome"] == "executed"
    assert all(s.parent and s.parent.span_id == run2.context.span_id for s in second if s != run2)


def test_divergence_and_takeover_are_span_events(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    mw = agentrewind.Middleware(url)
    with mw.run("r") as run:
        run.step("ask", lambda q: q, "old question")
    # A crashed owner: the run stays `running` and its lease holder is gone.
    mw.store.begin_run("r")
    spans.clear()
    with pytest.warns(DivergenceWarning), mw.run("r") as run:
        run.step("ask", lambda q: q, "new question")
    run_span = _by_name(spans.get_finished_spans(), "agentrewind.run r")
    names = [e.name for e in run_span.events]
    assert names == ["agentrewind.lease_takeover", "agentrewind.divergence"]
    div = run_span.events[1].attributes
    assert div is not None and div["agentrewind.name"] == "ask"
    # The viewer sees the divergence on the record too.
    diverged = [s for s in mw.store.load_steps("r") if s.meta.get("diverged")]
    assert len(diverged) == 1


def test_spans_nest_framework_spans_under_the_run(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'r.db'}")
    tracer = _PROVIDER.get_tracer("framework")
    with mw.run("r"), tracer.start_as_current_span("framework.step"):
        pass
    done = spans.get_finished_spans()
    run_span = _by_name(done, "agentrewind.run r")
    inner = _by_name(done, "framework.step")
    assert inner.parent is not None and inner.parent.span_id == run_span.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached after the run


def test_no_op_without_opentelemetry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert telemetry.observers() == ()  # installed, but no SDK provider configured
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: _PROVIDER)
    assert len(telemetry.observers()) == 1
    monkeypatch.setattr(telemetry, "_otel_importable", lambda: False)
    assert telemetry.observers() == ()
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'r.db'}")
    with mw.run("r") as run:
        assert run.step("x", lambda: 1) == 1


def test_added_observer_sees_events_and_cannot_break_a_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTREWIND_OTEL", "0")
    seen: list[str] = []

    class Recorder:
        def notify(self, event: str, run: Any, *args: Any) -> None:
            seen.append(event if event != "call" else f"call:{args[1]}")
            raise RuntimeError("observer bug")

    rec = Recorder()
    telemetry.add_observer(rec)
    try:
        mw = agentrewind.Middleware("memory://obs")
        with mw.run("r") as run:
            run.step("x", lambda: 1)
        with mw.run("r") as run:
            run.step("x", lambda: 1)
    finally:
        telemetry.remove_observer(rec)
    assert seen == [
        "run_started", "call:executed", "run_ended",
        "run_started", "call:replayed", "run_ended",
    ]  # fmt: skip
