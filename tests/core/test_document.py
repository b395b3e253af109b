"""Portable run documents: validate (every error), parse/emit round trip, export/import, resume."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentrewind
from agentrewind import DocumentError, RunNotFoundError, Timeline
from agentrewind.documents import schema_path


def _journal_run(store: agentrewind.Store, run_id: str = "job") -> None:
    mw = agentrewind.Middleware(store)
    with pytest.raises(ConnectionError), mw.run(run_id) as run:
        run.step("fetch", lambda: {"rows": [1, 2]})
        run.step("send", _raise)


def _raise() -> None:
    raise ConnectionError("mail down")


def test_schema_ships_in_the_package() -> None:
    schema = json.loads(schema_path().read_text())
    assert schema["properties"]["status"]["enum"] == ["partial", "failed", "paused", "completed"]
    assert schema["properties"]["retry_strategy"]["enum"] == ["resume", "restart", "escalate"]
    from importlib import resources

    packaged = resources.files("agentrewind.documents") / "schemas" / "run-document.schema.json"
    assert json.loads(packaged.read_text()) == schema


def test_validate_reports_every_error_with_its_field() -> None:
    doc = {
        "format": "agentrewind.run",
        "version": 2,
        "run_id": "",
        "status": "exploded",
        "retry_strategy": "pray",
        "confidence": 1.5,
        "surprise": 1,
        "steps": [
            {"step_id": "a", "key": "k", "kind": "tool", "name": "x", "status": "done", "seq": 1},
            {"step_id": "a", "key": "k", "kind": "tool", "name": "y", "status": "completed",
             "seq": -1, "parent_id": "zzz"},
            {"key": "k2"},
        ],
        "heads": {"main": "nope"},
    }  # fmt: skip
    issues = agentrewind.validate(doc)
    fields = {i.field for i in issues}
    assert {
        "version",
        "run_id",
        "status",
        "retry_strategy",
        "confidence",
        "surprise",
        "steps[0].status",
        "steps[1].seq",
        "steps[1].step_id",
        "steps[1].key",
        "steps[1].parent_id",
        "steps[2].step_id",
        "steps[2].kind",
        "heads.main",
    } <= fields
    with pytest.raises(DocumentError) as info:
        agentrewind.parse(json.dumps(doc))
    assert len(info.value.issues) == len(issues) and "steps[0].status" in str(info.value)
    assert agentrewind.validate("{not json")[0].field == "(document)"


def test_export_parse_emit_round_trip_and_import(tmp_path: Path, namespace: str) -> None:
    src = agentrewind.connect(f"sqlite:///{tmp_path / 'a.db'}?namespace={namespace}")
    _journal_run(src)
    doc = agentrewind.export_run(
        src, "job", task_summary="email the receipt", remaining_steps=["send"]
    )
    assert doc.status == "failed" and len(doc.steps) == 2 and doc.retry_strategy == "resume"
    assert doc.failure == {"reason": "mail down", "type": "ConnectionError",
                           "step_id": doc.steps[-1]["step_id"]}  # fmt: skip
    assert doc.partial_output == {"rows": [1, 2]} and agentrewind.validate(doc) == []
    text = agentrewind.emit(doc)
    assert agentrewind.parse(text) == doc  # lossless
    dst = agentrewind.connect(f"sqlite:///{tmp_path / 'b.db'}?namespace={namespace}")
    assert agentrewind.import_run(dst, text) == "job"
    assert agentrewind.import_run(dst, text) == "job"  # idempotent
    again = agentrewind.export_run(dst, "job")
    assert {**again.to_dict(), "exported_at": 0} == {**doc.to_dict(), "exported_at": 0}
    assert agentrewind.import_run(dst, doc, run_id="copy") == "copy"
    assert [s.step_id for s in dst.load_steps("copy") if s.kind != "document"] == [
        s["step_id"] for s in doc.steps
    ]
    changed = agentrewind.parse(text)
    changed.steps = changed.steps[:1]
    changed.steps[0] = {**changed.steps[0], "step_id": "other"}
    with pytest.raises(DocumentError, match="already exists"):
        agentrewind.import_run(dst, changed)
    agentrewind.import_run(dst, changed, replace=True)
    assert [s.step_id for s in dst.load_steps("job") if s.kind != "document"] == ["other"]
    with pytest.raises(RunNotFoundError):
        agentrewind.export_run(src, "missing")


def test_timeline_export_carries_state_confidence_and_branches(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    tl = Timeline("plan", store=store)
    tl.checkpoint({"a": 1}, {"confidence": 0.3})
    tl.branch("alt")
    tl.checkpoint({"a": 2}, {"confidence": 0.8})
    doc = agentrewind.export_run(
        store, "plan", executor_hint="gpu-worker", retry_strategy="escalate"
    )
    assert doc.state == {"a": 2} and doc.confidence == 0.8 and doc.heads["HEAD"] == "alt"
    assert (doc.executor_hint, doc.retry_strategy, doc.status) == (
        "gpu-worker",
        "escalate",
        "partial",
    )
    agentrewind.import_run(store, doc, run_id="plan-copy")
    copy = Timeline("plan-copy", store=store)
    assert copy.get_state() == {"a": 2} and copy.current_branch == "alt"
    assert agentrewind.export_run(store, "plan-copy").executor_hint == "gpu-worker"
    n = agentrewind.fork_run(store, "plan", at=tl.history()[1].id, to="plan-fork")
    assert n == 1 and Timeline("plan-fork", store=store).get_state() == {"a": 1}
    with pytest.raises(DocumentError):
        agentrewind.fork_run(store, "plan", at=tl.head.id, to="plan-fork")
    store.close()


RESUMER = textwrap.dedent(
    """
    import sys, agentrewind
    store = agentrewind.connect(sys.argv[1])
    run_id = agentrewind.resume_from(open(sys.argv[2]).read(), store)
    calls = []
    mw = agentrewind.Middleware(store)
    with mw.run(run_id) as run:
        rows = run.step("fetch", lambda: calls.append("fetch") or {"rows": "fresh"})
        sent = run.step("send", lambda: calls.append("send") or "sent")
    print(run_id, rows, sent, calls, [e.outcome for e in run.events])
    """
)


@pytest.mark.parametrize("target", ["sqlite", "redis"])
def test_resume_from_continues_in_another_process_and_store(
    request: pytest.FixtureRequest, tmp_path: Path, namespace: str, target: str
) -> None:
    src = agentrewind.connect(f"sqlite:///{tmp_path / 'src.db'}")
    _journal_run(src, "handoff")
    path = tmp_path / "doc.json"
    path.write_text(agentrewind.emit(agentrewind.export_run(src, "handoff")))
    if target == "sqlite":
        url = f"sqlite:///{tmp_path / 'dst.db'}?namespace={namespace}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?namespace={namespace}"
    try:
        out = subprocess.run(
            [sys.executable, "-c", RESUMER, url, str(path)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert out.strip() == "handoff {'rows': [1, 2]} sent ['send'] ['replayed', 'executed']"
        assert agentrewind.connect(url).get_run("handoff").status == "completed"
    finally:
        if target == "redis":
            agentrewind.connect(url).delete_run("handoff")
