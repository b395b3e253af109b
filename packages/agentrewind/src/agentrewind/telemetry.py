"""OpenTelemetry spans for runs and recorded calls, and the observer interface that feeds them.

A `Run` tells its observers what happens (`run_started`, `call`, `diverged`, `lease_lost`,
`run_ended`). With the `otel` extra installed (`opentelemetry-api`), `OtelObserver` turns that
into one span per run and one child span per recorded call:

- span `agentrewind.run <run id>`: attributes `agentrewind.run_id`, `agentrewind.status`,
  this execution's `agentrewind.replay_hits`, `agentrewind.steps`, `agentrewind.failures`,
  `agentrewind.tokens_saved`, `agentrewind.seconds_saved`, and the run's figures over all its
  executions, the same `agentrewind runs`, `metrics` and the viewer show
  (`agentrewind.numbers`): `agentrewind.run.steps`, `.replay_hits`, `.seconds_saved`,
  `.tokens_saved`, `.failures`, `.reruns`, `.cache_hits`, `.attempts`, `.executions`; events
  `agentrewind.lease_takeover` (the run was `running` when this process got its lease: the
  last owner died or stalled), `agentrewind.divergence` and `agentrewind.lease_lost`.
- span `agentrewind.<kind> <name>` per call: `agentrewind.kind`, `.name`, `.key`, `.outcome`
  (`executed`, `replayed`, `failed`, `skipped`), `.replayed` (bool), `.tokens`, and for a replay
  `.seconds_saved` / `.tokens_saved` (what the call cost when it first ran). An executed call's
  span covers its execution; a replayed one is instant. A failure sets the span status to ERROR.

Without `opentelemetry` installed, or with no tracer provider configured, this is a no-op:
`observers()` returns an empty tuple and a run pays nothing. The spans go to whatever
`TracerProvider` the application configured, so they sit beside LangChain's and LlamaIndex's
own traces; `AGENTREWIND_OTEL=0` turns them off.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, Protocol

# A `Run` (journal/run.py) and a `Call` or `StepRecord` are passed in; this module sits below the
# journal (the journal imports it), so it names them only as `Any`.
Run = Any
Call = Any

__all__ = ["OtelObserver", "RunObserver", "add_observer", "observers", "remove_observer"]

log = logging.getLogger("agentrewind.telemetry")

_EXTRA: list[RunObserver] = []


class RunObserver(Protocol):
    """Something told about each run's life: spans, metrics, logs."""

    def notify(self, event: str, run: Run, *args: Any) -> None:
        """Handle one event of `run`.

        Events and their arguments: `run_started(taken_over: bool)`,
        `call(call: Call | StepRecord, outcome: str, error: BaseException | None)` (a record
        when an adapter wrote it itself, see `Run.observe`),
        `diverged(kind, name, key, message)`, `lease_lost()`, `run_ended()`.
        An observer must not raise; errors are logged and ignored.
        """
        ...


def add_observer(observer: RunObserver) -> None:
    """Tell `observer` about every run opened from now on (in this process)."""
    _EXTRA.append(observer)


def remove_observer(observer: RunObserver) -> None:
    """Stop telling `observer` about new runs."""
    if observer in _EXTRA:
        _EXTRA.remove(observer)


def observers() -> tuple[RunObserver, ...]:
    """The observers of a run being created: OpenTelemetry's when installed, plus added ones."""
    otel = _otel()
    found: tuple[RunObserver, ...] = (otel,) if otel is not None else ()
    return found + tuple(_Guarded(o) for o in _EXTRA) if _EXTRA else found


class _Guarded:
    def __init__(self, inner: RunObserver) -> None:
        self.inner = inner

    def notify(self, event: str, run: Run, *args: Any) -> None:
        try:
            self.inner.notify(event, run, *args)
        except Exception:
            log.exception("run observer %r failed on %s", self.inner, event)


@functools.cache
def _otel_importable() -> bool:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _otel() -> OtelObserver | None:
    if os.environ.get("AGENTREWIND_OTEL", "1") in ("0", "false", "off") or not _otel_importable():
        return None
    from opentelemetry import trace

    # No SDK configured (yet): spans would be dropped, so a run skips them at no cost. Checked
    # per run, so a provider set later is used from the next run on.
    if isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return None
    return _OBSERVER


class OtelObserver:
    """Emits the spans described in this module's docstring (one instance per process)."""

    def __init__(self) -> None:
        self._spans: dict[int, Any] = {}  # id(run) -> (span, context token, span's context)
        self._cached: tuple[Any, Any] | None = None

    def _tracer(self) -> Any:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        cached = self._cached
        if cached is None or cached[0] is not provider:  # one tracer per provider, not per span
            cached = self._cached = (provider, provider.get_tracer("agentrewind", _version()))
        return cached[1]

    def notify(self, event: str, run: Run, *args: Any) -> None:
        """Dispatch `event` (see `RunObserver.notify`); never raises."""
        try:
            getattr(self, f"_on_{event}")(run, *args)
        except Exception:
            log.exception("agentrewind telemetry failed on %s", event)

    def _on_run_started(self, run: Run, taken_over: bool) -> None:
        from opentelemetry import context, trace

        span = self._tracer().start_span(
            f"agentrewind.run {run.run_id}", attributes={"agentrewind.run_id": run.run_id}
        )
        if taken_over:
            span.add_event("agentrewind.lease_takeover", {"agentrewind.owner": run.owner})
        # Current while the run is open, so framework spans made inside it nest under it.
        parent = trace.set_span_in_context(span)
        self._spans[id(run)] = (span, context.attach(parent), parent)

    def _on_call(self, run: Run, call: Call, outcome: str, error: BaseException | None) -> None:
        from opentelemetry import trace

        entry = self._spans.get(id(run))
        parent = entry[2] if entry else None
        meta = call.meta
        now = time.time_ns()
        duration = float(meta.get("duration", 0.0) or 0.0)
        if outcome == "failed":
            t0 = getattr(call, "_t0", 0.0)
            duration = time.perf_counter() - t0 if t0 else 0.0
        replayed = outcome in ("replayed", "skipped")
        start = now if replayed else now - int(duration * 1e9)
        attributes: dict[str, Any] = {
            "agentrewind.run_id": run.run_id,
            "agentrewind.kind": call.kind,
            "agentrewind.name": call.name,
            "agentrewind.key": call.key,
            "agentrewind.outcome": outcome,
            "agentrewind.replayed": replayed,
            "agentrewind.tokens": int(meta.get("tokens", 0) or 0),
        }
        if replayed:
            attributes["agentrewind.seconds_saved"] = duration
            attributes["agentrewind.tokens_saved"] = attributes["agentrewind.tokens"]
        span = self._tracer().start_span(
            f"agentrewind.{call.kind} {call.name}",
            context=parent,
            attributes=attributes,
            start_time=start,
        )
        if error is not None:
            span.record_exception(error)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        span.end(end_time=now)

    def _on_diverged(self, run: Run, kind: str, name: str, key: str, message: str) -> None:
        entry = self._spans.get(id(run))
        if entry:
            entry[0].add_event(
                "agentrewind.divergence",
                {
                    "agentrewind.kind": kind,
                    "agentrewind.name": name,
                    "agentrewind.key": key,
                    "message": message,
                },
            )

    def _on_lease_lost(self, run: Run) -> None:
        entry = self._spans.get(id(run))
        if entry:
            entry[0].add_event("agentrewind.lease_lost", {"agentrewind.owner": run.owner})

    def _on_run_ended(self, run: Run) -> None:
        from opentelemetry import context, trace

        entry = self._spans.pop(id(run), None)
        if entry is None:
            return
        span, token, _ = entry
        m = run.metrics
        span.set_attributes(
            {
                "agentrewind.status": run.status,
                "agentrewind.steps": m.steps,
                "agentrewind.replay_hits": m.replay_hits,
                "agentrewind.failures": m.failures,
                "agentrewind.tokens_saved": m.tokens_saved,
                "agentrewind.seconds_saved": m.seconds_saved,
            }
        )
        totals = getattr(run, "totals", None)
        if totals is not None:  # the run's figures over all executions, as the CLI shows them
            span.set_attributes({f"agentrewind.run.{k}": v for k, v in totals.as_dict().items()})
        if run.status != "completed":
            span.set_status(trace.Status(trace.StatusCode.ERROR, run.status))
        try:
            # Only in the context that attached it: a run closed from another context (a
            # copied one, another task) leaves that context alone.
            if trace.get_current_span() is span:
                context.detach(token)
        finally:
            span.end()


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentrewind")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


_OBSERVER = OtelObserver()
