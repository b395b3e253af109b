"""The viewer's HTTP API on a real SQLite store (stdlib urllib): data, safety headers, GET only."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import agentrewind
from agentrewind.stores import Store
from agentrewind.ui import ViewerServer, make_server
from agentrewind.ui.api import safe_url
from redis_support import cleanup_redis

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'


def _populate(store: Store) -> None:
    mw = agentrewind.Middleware(store)
    flaky = {"fail": True}

    def send(order: str) -> str:
        if flaky["fail"]:
            raise ConnectionError("mail API timed out")
        return f"sent {order}"

    for _ in range(2):
        try:
            with mw.run("order-1") as run:
                order = run.step("fetch", lambda: "A-17")
                run.step("charge", lambda o: f"ch_{o}", order)
                run.step("send", send, order)
        except ConnectionError:
            flaky["fail"] = False
    with mw.run("xss") as run:
        run.step("render", lambda: {"html": XSS, "long": "x" * 5000})
    with mw.run("drift") as run:
        run.step("ask", lambda q: q, "old question")
    with warnings.catch_warnings(), mw.run("drift") as run:
        warnings.simplefilter("ignore", agentrewind.DivergenceWarning)
        run.step("ask", lambda q: q, "new question")

    def boom() -> None:
        raise TimeoutError("model timed out")

    with contextlib.suppress(TimeoutError), mw.run("broken") as run:
        run.step("call_model", boom)
    tl = agentrewind.Timeline("plan", store=store)
    a = tl.checkpoint({"draft": "a"}, {"confidence": 0.5}, "First", "draft")
    tl.checkpoint({"draft": "b"}, {"confidence": 0.4}, "Worse", "draft")
    tl.rollback(to_checkpoint_id=a.id)
    tl.branch("alt")
    tl.checkpoint({"draft": "c"}, {"confidence": 0.9}, "Better", "draft")
    tl.switch_branch("main")
    tl.merge("alt", strategy="theirs")


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def viewer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ViewerServer]:
    # Module-wide: every test only reads (one of them checks that nothing changed).
    namespace = f"ui-{uuid.uuid4().hex[:8]}"
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        store = agentrewind.connect(url, namespace=namespace)
    else:
        url = ""
        store = agentrewind.connect(f"sqlite:///{tmp_path_factory.mktemp('ui') / 'ui.db'}")
    _populate(store)
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        if url:
            cleanup_redis(url, namespace)


def fetch(server: ViewerServer, path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(server.url.rstrip("/") + path, **kw)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def get(server: ViewerServer, path: str) -> Any:
    status, headers, body = fetch(server, path)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/json")
    return json.loads(body)


def test_runs_list_kinds_statuses_and_savings(viewer: ViewerServer) -> None:
    runs = {r["run_id"]: r for r in get(viewer, "/api/runs")}
    assert set(runs) == {"order-1", "xss", "plan", "drift", "broken"}
    assert runs["broken"]["status"] == "failed"
    order = runs["order-1"]
    # 4 records: fetch, charge, the failed attempt of send (kept) and the send that replaced it
    assert (order["kind"], order["status"], order["replay_hits"], order["steps"]) == (
        "journal", "completed", 2, 4)  # fmt: skip
    assert (order["failures"], order["attempts"], order["executions"]) == (1, 1, 2)
    assert order["seconds_saved"] >= 0
    assert runs["plan"]["kind"] == "timeline" and runs["plan"]["steps"] == 4


def test_waterfall_counts_replayed_and_executed_calls(viewer: ViewerServer) -> None:
    data = get(viewer, "/api/runs/order-1")
    wf = data["waterfall"]
    assert wf["counts"] == {"executed": 3, "replayed": 2, "cached": 0, "failed": 1, "started": 0,
                            "replayed_unplaced": 0}  # fmt: skip
    rows = [(r["name"], r["outcome"]) for r in wf["rows"]]  # the failed attempt is kept
    assert rows == [("fetch", "executed"), ("charge", "executed"), ("send", "failed"),
                    ("fetch", "replayed"), ("charge", "replayed"),
                    ("send", "executed")]  # fmt: skip
    assert wf["rows"][2]["error"] == "ConnectionError: mail API timed out"
    starts = [r["start"] for r in wf["rows"]]
    assert starts == sorted(starts)
    step = get(viewer, f"/api/runs/order-1/steps/{wf['rows'][1]['step_id']}")
    assert step["name"] == "charge" and step["output"] == "ch_A-17"
    # What `agentrewind log` prints names the same step: its sequence number, a short id.
    assert get(viewer, f"/api/runs/order-1/steps/{step['seq']}")["step_id"] == step["step_id"]
    from agentrewind.documents.locating import labels

    short = labels(viewer.store.load_steps("order-1"))[step["step_id"]]
    assert len(short) < len(step["step_id"])
    assert get(viewer, f"/api/runs/order-1/steps/{short}")["step_id"] == step["step_id"]


def test_errors_and_divergence_are_marked(viewer: ViewerServer) -> None:
    rows = get(viewer, "/api/runs/broken")["waterfall"]["rows"]
    assert [(r["outcome"], r["error"]) for r in rows] == [
        ("failed", "TimeoutError: model timed out")
    ]
    rows = get(viewer, "/api/runs/drift")["waterfall"]["rows"]
    assert [(r["outcome"], r["diverged"]) for r in rows] == [
        ("executed", False),
        ("executed", True),
    ]


def test_stored_markup_comes_back_as_plain_json_text(viewer: ViewerServer) -> None:
    step_id = get(viewer, "/api/runs/xss")["waterfall"]["rows"][0]["step_id"]
    status, headers, body = fetch(viewer, f"/api/runs/xss/steps/{step_id}")
    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(body)["output"]["html"] == XSS  # data, rendered by the page as text


def test_timeline_graph_and_diff(viewer: ViewerServer) -> None:
    g = get(viewer, "/api/runs/plan/graph")
    assert g["kind"] == "timeline" and len(g["nodes"]) == 4
    merges = [n for n in g["nodes"] if n["merged"]]
    assert len(merges) == 1 and set(g["heads"]) == {"main", "alt"}
    assert {b["name"] for b in g["branches"]} == {"main", "alt"}
    assert [n["status"] for n in g["nodes"]].count("rolled_back") == 1
    first, merged = g["nodes"][0]["id"], merges[0]["id"]
    d = get(viewer, f"/api/runs/plan/diff?a={first}&b={merged}")
    assert d["changes"]["changed"] == {"draft": {"before": "a", "after": "c"}}


def test_metrics_of_the_store_and_of_a_run(viewer: ViewerServer) -> None:
    m = get(viewer, "/api/metrics")
    assert m["runs"] == 5 and m["total"]["replay_hits"] == 2
    assert [r["run_id"] for r in m["series"]][-1] == "plan"  # oldest first
    assert get(viewer, "/api/runs/order-1/metrics")["total"]["steps"] == 4


def test_queues_and_queued_runs(tmp_path: Path) -> None:
    store = agentrewind.connect(f"sqlite:///{tmp_path / 'q.db'}")
    mw = agentrewind.Middleware(store)
    wf = mw.workflow("send", lambda to: to)
    mail = mw.queue("mail", concurrency=2)
    mail.enqueue(wf, "ann", run_id="mail-1")
    mail.enqueue(wf, "bob", run_id="mail-2", delay=600)
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        (q,) = get(server, "/api/queues")
        assert (q["queue"], q["queued"], q["delayed"], q["in_flight"]) == ("mail", 2, 1, 0)
        assert q["age"] is not None and q["age"] >= 0
        runs = {r["run_id"]: r["status"] for r in get(server, "/api/runs")}
        assert runs == {"mail-1": "queued", "mail-2": "queued"}
    finally:
        server.shutdown()
        server.server_close()
        store.close()


def test_pages_are_the_app_with_a_strict_csp(viewer: ViewerServer) -> None:
    for path in ("/", "/runs/order-1", "/runs/plan/graph", "/metrics"):
        status, headers, body = fetch(viewer, path)
        assert status == 200 and b'<script src="/static/app.js"' in body
        csp = headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self';" in csp
        assert "unsafe-inline" not in csp
    status, headers, body = fetch(viewer, "/static/app.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert b"innerHTML" not in body  # every value goes through textContent
    assert fetch(viewer, "/static/../server.py")[0] == 404


def test_read_only_and_loopback_only(viewer: ViewerServer) -> None:
    store = viewer.store
    before = [(r.run_id, r.updated_at, r.status) for r in store.list_runs()]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = fetch(viewer, "/api/runs/order-1", method=method, data=b"{}")
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, _, _ = fetch(viewer, "/api/runs", headers={"Host": "evil.example:80"})
    assert status == 403  # a rebinding page on another origin gets nothing
    for path in ("/api/runs", "/api/runs/order-1", "/api/runs/plan/graph", "/api/metrics"):
        get(viewer, path)
    assert [(r.run_id, r.updated_at, r.status) for r in store.list_runs()] == before


def test_unknown_things_are_clear_json_errors(viewer: ViewerServer) -> None:
    status, _, body = fetch(viewer, "/api/runs/nope")
    assert status == 404 and "nope" in json.loads(body)["error"]
    status, _, body = fetch(viewer, "/api/runs/order-1/steps/zzz")
    assert status == 404
    status, _, body = fetch(viewer, "/api/runs/plan/diff?a=1")
    assert status == 400 and "a=STEP&b=STEP" in json.loads(body)["error"]
    assert fetch(viewer, "/api/nothing")[0] == 404
    status, _, body = fetch(viewer, f"/api/runs/{quote('../../etc/passwd', safe='')}")
    assert status == 404 and json.loads(body)["error"].startswith("no run")


def test_store_password_never_shown() -> None:
    assert safe_url("redis://user:s3cret@host:6380/0") == "redis://user:***@host:6380/0"
    assert safe_url("sqlite:///x.db") == "sqlite:///x.db"


def test_cli_ui_prints_its_address_and_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = agentrewind.connect(url)
    _populate(store)
    store.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrewind.cli", "--store", url, "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        line = proc.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), line
        address = line.split()[2]
        with urllib.request.urlopen(address + "api/store", timeout=10) as resp:
            info = json.loads(resp.read())
        assert info["url"] == url and info["namespace"] == "default"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
