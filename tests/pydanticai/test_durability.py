"""RewindDurability and middleware.wrap(agent) in one process: what is recorded, what replays,
what runs again, and the errors a user meets."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pai_flows import Side, build, call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind
from agentrewind.cli import main as cli
from agentrewind_pydantic_ai import (
    JournalValueError,
    NoRunError,
    RewindAgent,
    RewindDurability,
)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_records_each_unit_with_its_operation_name_kind_and_tokens(url, tmp_path):
    side = Side(tmp_path / "side.txt")
    agent = build("tools", side, None)
    mw = agentrewind.Middleware(url)
    with mw.run("r1"):
        assert agent.run_sync("pay").output == "paid a and b"
    records = mw.store.load_steps("r1")
    assert [(r.kind, r.name, r.status) for r in records] == [
        ("llm", "tools__model.request", "completed"),
        ("tool", "tools__function_toolset__<agent>.call_tool:charge", "completed"),
        ("llm", "tools__model.request", "completed"),
        ("tool", "tools__function_toolset__<agent>.call_tool:charge", "completed"),
        ("llm", "tools__model.request", "completed"),
    ]
    assert all(r.meta["tokens"] > 0 for r in records if r.kind == "llm")
    # what the journal holds is pydantic-ai's own JSON of the result
    assert records[1].output == {"kind": "tool_return", "result": "paid a"}
    # replayed in full: nothing runs, tokens are reported saved
    with mw.run("r1") as run:
        assert agent.run_sync("pay").output == "paid a and b"
    assert run.metrics.steps == 0 and run.metrics.replay_hits == 5
    assert run.metrics.tokens_saved == sum(r.meta["tokens"] for r in records if r.kind == "llm")
    assert side.count("pay:charge:a") == side.count("llm:tools:0") == 1
    mw.close()


def test_a_changed_call_runs_and_never_gets_another_calls_result(url):
    paid: list[str] = []

    def ask(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if last.part_kind == "user-prompt":  # charge what the user asked for
            return ModelResponse(parts=[call("charge", "c1", item=str(last.content))])
        return ModelResponse(parts=[TextPart(f"done: {getattr(last, 'content', '')}")])

    agent = Agent(FunctionModel(ask), name="shop", capabilities=[RewindDurability()])

    @agent.tool_plain
    def charge(item: str) -> str:
        paid.append(item)
        return f"paid {item}"

    mw = agentrewind.Middleware(url)
    with mw.run("r1"):
        assert agent.run_sync("apples").output == "done: paid apples"
    # the same run id with another prompt: the recorded calls do not match, so they run
    with pytest.warns(agentrewind.DivergenceWarning), mw.run("r1") as run:
        assert agent.run_sync("pears").output == "done: paid pears"
    assert paid == ["apples", "pears"]
    assert run.metrics.replay_hits == 0 and run.metrics.steps == 3
    # and the first prompt still replays its own results
    with mw.run("r1") as run:
        assert agent.run_sync("apples").output == "done: paid apples"
    assert paid == ["apples", "pears"] and run.metrics.replay_hits == 3
    mw.close()


def test_wrap_dispatches_through_the_entry_point_and_takes_the_run_from_the_context(url, tmp_path):
    side = Side(tmp_path / "side.txt")
    plain = Agent(FunctionModel(_echo), name="plain")
    mw = agentrewind.Middleware(url)
    wrapped = mw.wrap(plain)
    assert isinstance(wrapped, RewindAgent) and wrapped.wrapped is plain
    assert isinstance(mw.wrap(wrapped), RewindAgent)  # wrapping again does not nest
    with pytest.raises(NoRunError, match=r"middleware\.run"):
        wrapped.run_sync("hello")
    with mw.run("w1"):
        first = wrapped.run_sync("hello")
        second = wrapped.run_sync("again", message_history=first.all_messages())
    # pydantic-ai run ids come from the agentrewind run, never from the user's inputs
    assert first.run_id == "w1:0" and second.run_id == "w1:1"
    assert [r.kind for r in mw.store.load_steps("w1")] == ["llm", "llm"]
    # the unwrapped agent is unchanged: outside a run it records nothing
    assert plain.run_sync("hello").output == "echo hello"
    assert len(mw.store.load_steps("w1")) == 2
    del side
    mw.close()


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = messages[-1].parts[-1]
    return ModelResponse(parts=[TextPart(f"echo {getattr(prompt, 'content', '')}")])


def test_outside_a_run_the_capability_is_transparent(url, tmp_path):
    side = Side(tmp_path / "side.txt")
    agent = build("tools", side, None)
    assert agent.run_sync("pay").output == "paid a and b"
    assert agentrewind.connect(url).list_runs() == []


def test_a_result_the_journal_cannot_store_fails_at_the_write_with_a_named_error(url):
    class Opaque:
        pass

    agent = Agent(FunctionModel(_call_opaque), name="opaque", capabilities=[RewindDurability()])

    @agent.tool_plain
    def opaque() -> Any:
        return Opaque()

    mw = agentrewind.Middleware(url)
    with pytest.raises(JournalValueError, match="cannot journal"), mw.run("o1"):
        agent.run_sync("go")
    steps = mw.store.load_steps("o1")
    assert [(s.kind, s.status) for s in steps] == [("llm", "completed"), ("tool", "failed")]
    mw.close()


def _call_opaque(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call the tool `opaque` once, then answer."""
    if messages[-1].parts[-1].part_kind == "user-prompt":
        return ModelResponse(parts=[call("opaque", "o1")])
    return ModelResponse(parts=[TextPart("done")])


def test_idempotency_key_inside_a_tool_is_stable_across_resume(url):
    keys: list[str] = []
    agent = Agent(FunctionModel(_call_opaque), name="idem", capabilities=[RewindDurability()])

    @agent.tool_plain
    def opaque() -> str:
        keys.append(agentrewind.idempotency_key())
        if len(keys) == 1:
            raise ConnectionError("payment API down")
        return "ok"

    mw = agentrewind.Middleware(url)
    for _ in range(2):
        with contextlib.suppress(ConnectionError), mw.run("k1"):
            agent.run_sync("go")
    assert len(keys) == 2 and keys[0] == keys[1]
    mw.close()


def test_the_cli_and_opentelemetry_show_a_pydantic_ai_run(url, tmp_path, monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    side = Side(tmp_path / "side.txt")
    agent = build("tools", side, None)
    mw = agentrewind.Middleware(url)
    for _ in range(2):
        with mw.run("seen-1"):
            agent.run_sync("pay")
    mw.close()
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("agentrewind.run seen-1") == 2
    assert names.count("agentrewind.llm tools__model.request") == 6
    outcomes = [
        s.attributes["agentrewind.outcome"]  # type: ignore[index]
        for s in exporter.get_finished_spans()
        if s.name.startswith("agentrewind.tool")
    ]
    assert outcomes == ["executed", "executed", "replayed", "replayed"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["--store", url, "log", "seen-1"]) == 0
    text = out.getvalue()
    assert "5 step(s)" in text and "tools__model.request" in text and "tool " in text
