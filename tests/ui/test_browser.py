"""The viewer in a real browser: Debian's Chromium driven by Playwright (nox session `ui`).

The store holds the demo's runs, a LangGraph thread and a timeline with branches, plus a run
whose id and output are crafted markup. Screenshots of every page land in `.artifacts/ui/`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

import pytest

import agentrewind
from agentrewind.stores import Store
from agentrewind.ui import ViewerServer, make_server

CHROMIUM = os.environ.get("AGENTREWIND_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "ui"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
XSS_ID = '<img src=x onerror="window.__xss=1">'
XSS_OUT = {"html": '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'}

if not shutil.which(CHROMIUM):
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)"
    if os.environ.get("AGENTREWIND_REQUIRE_BROWSER") == "1":  # set by `nox -s ui`
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


class _State(TypedDict, total=False):
    question: str
    answer: str


def _langgraph_thread(url: str) -> None:
    from langgraph.graph import END, START, StateGraph

    from agentrewind_langgraph import RewindSaver

    builder: Any = StateGraph(_State)
    builder.add_node("plan", lambda s: {"answer": f"plan for {s['question']}"})
    builder.add_node("write", lambda s: {"answer": s["answer"] + " -> written"})
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "write")
    builder.add_edge("write", END)
    with RewindSaver.from_conn_string(url) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"question": "refund?"}, {"configurable": {"thread_id": "lg-thread"}})


def _populate(store: Store, url: str) -> str:
    from agentrewind.cli.demo import run_demo

    with redirect_stdout(io.StringIO()):
        run_demo(store, out=lambda *_: None)
    mw = agentrewind.Middleware(store)
    mw.queue("mail", concurrency=2).enqueue(mw.workflow("send", lambda to: to), "ann", delay=600)
    ids = [r.run_id for r in store.list_runs()]
    demo = next(i for i in ids if i.startswith("demo-") and "-" not in i[5:])
    mw = agentrewind.Middleware(store)
    with mw.run(XSS_ID) as run:
        run.step("render", lambda: XSS_OUT)
    _langgraph_thread(url)
    _crashed_run(url)
    return demo


def _crashed_run(url: str) -> None:
    """A run whose process died in its second call (status `crashed`)."""
    code = (
        "import os, sys, agentrewind\n"
        "mw = agentrewind.Middleware(sys.argv[1])\n"
        "with mw.run('crashed-run') as run:\n"
        "    run.step('fetch', lambda: 1)\n"
        "    run.step('charge', lambda: os._exit(9))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, url], check=False)
    assert done.returncode == 9


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ViewerServer, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'viewer.db'}"
    store = agentrewind.connect(url)
    demo = _populate(store, url)
    server = make_server(store, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server, demo
    finally:
        server.shutdown()
        server.server_close()
        store.close()


@pytest.fixture(scope="module")
def browser(viewer: tuple[ViewerServer, str]) -> Iterator[Any]:
    # After the store is filled: Playwright's sync API keeps an event loop in this thread,
    # and the demo's async parts need their own.
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 760})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    yield pg
    ctx.close()
    assert errors == []


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_runs_then_a_run_waterfall_then_back(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, demo = viewer
    page.goto(server.url)
    rows = page.locator("[data-testid=runs] tbody tr")
    rows.first.wait_for()
    ids = rows.evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert {demo, f"{demo}-reply", "lg-thread", XSS_ID} <= set(ids)
    kinds = {r: page.locator(f"tr[data-run='{r}'] td").nth(2).inner_text() for r in
             (demo, f"{demo}-reply", "lg-thread")}  # fmt: skip
    assert kinds == {demo: "journal", f"{demo}-reply": "timeline", "lg-thread": "langgraph"}
    shot(page, "runs")

    page.get_by_role("link", name=demo, exact=True).click()
    page.wait_for_url(f"**/runs/{demo}")
    page.locator("[data-testid=waterfall]").wait_for()
    assert page.locator("tr[data-outcome=replayed]").count() == 2
    assert page.locator("tr[data-outcome=executed]").count() == 3
    assert page.locator("[data-count=replayed] b").inner_text() == "2"
    assert page.locator("[data-count=executed] b").inner_text() == "3"
    assert page.locator("[data-testid=chart-calls] polyline").count() == 2
    replayed = page.locator("tr[data-outcome=replayed] td").nth(1).inner_text()
    assert replayed == "fetch_order"
    shot(page, "run")

    page.locator("tr[data-outcome=executed] a", has_text="charge_card").click()
    page.locator("[data-testid=step]").wait_for()
    assert "ch_demo-" in page.locator("[data-testid=step]").inner_text()
    assert "/steps/" in page.url
    shot(page, "step")

    page.go_back()
    page.go_back()
    page.locator("[data-testid=runs]").wait_for()
    assert page.url.rstrip("/") == server.url.rstrip("/")


def test_filter_and_search(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(server.url + "?kind=timeline")
    page.locator("[data-testid=runs] tbody tr").first.wait_for()
    assert page.locator("[data-testid=runs] tbody tr").count() == 1
    page.select_option("[data-testid=kind-filter]", "")
    page.fill("[data-testid=search]", "lg-")
    assert page.locator("[data-testid=runs] tbody tr").count() == 1
    assert "search=" not in page.url and "q=lg-" in page.url


def test_timeline_graph_and_diff(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, demo = viewer
    page.goto(f"{server.url}runs/{demo}-reply/graph")
    nodes = page.locator("[data-testid=graph] circle")
    nodes.first.wait_for()
    assert nodes.count() == 4
    assert page.locator("[data-testid=graph] path.merge").count() == 1
    assert "main (HEAD)" in page.locator("[data-testid=graph]").text_content()
    assert page.locator("[data-testid=branches] tbody tr").count() == 2
    shot(page, "timeline")

    nodes.nth(0).click()
    page.locator("[data-testid=step]").wait_for()
    page.locator("[data-testid=graph] circle").nth(3).click()
    page.wait_for_url("**/diff?**")
    diff = page.locator("[data-testid=diff]")
    diff.wait_for()
    assert "+ draft:" in diff.inner_text()
    shot(page, "diff")


def test_langgraph_thread_checkpoints(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(f"{server.url}runs/lg-thread/graph")
    nodes = page.locator("[data-testid=graph] circle")
    nodes.first.wait_for()
    count = nodes.count()
    assert count >= 3  # input, plan, write (+ the empty start)
    nodes.nth(count - 1).click()
    step = page.locator("[data-testid=step]")
    step.wait_for()
    text = step.inner_text()
    assert "Channel values" in text and "plan for refund? -> written" in text
    assert "Pending writes" in text
    shot(page, "langgraph")


def test_metrics_page(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(server.url)
    page.get_by_role("link", name="Metrics").click()
    page.locator("[data-testid=chart-replay_hits]").wait_for()
    assert int(page.locator("[data-metric='replay hits'] b").inner_text()) >= 2
    # every chart names its axes and labels the y axis's range
    chart = page.locator("[data-testid=chart-replay_hits]").inner_html()
    assert "runs, oldest first" in chart and "replay hits" in chart
    assert "cumulative" in page.locator("[data-testid=chart-seconds_saved]").inner_html()
    shot(page, "metrics")


def test_a_crashed_run_says_how_to_resume_it(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(f"{server.url}runs/crashed-run")
    hint = page.locator("[data-testid=resume-hint]")
    hint.wait_for()
    text = hint.inner_text()
    assert 'middleware.run("crashed-run")' in text and "agentrewind worker" in text
    assert page.locator(".badge.crashed").count() >= 1
    page.goto(f"{server.url}runs/{quote(XSS_ID, safe='')}")  # a finished run: no hint
    page.locator("[data-testid=chart-calls]").wait_for()
    assert page.locator("[data-testid=resume-hint]").count() == 0
    assert "time since the first call" in page.locator("[data-testid=chart-calls]").inner_html()


def test_a_failed_attempt_shows_its_error_and_inputs_beside_the_runs_figures(
    page: Any, viewer: tuple[ViewerServer, str]
) -> None:
    server, demo = viewer
    page.goto(f"{server.url}runs/{demo}")
    page.locator("[data-testid=waterfall]").wait_for()
    # the figures the cards show are the API's (the same `runs` and `metrics` print)
    with urllib.request.urlopen(f"{server.url}api/runs/{demo}", timeout=10) as resp:
        run = json.loads(resp.read())["run"]
    cards = {k: page.locator(f"[data-figure='{k}'] b").inner_text() for k in
             ("executions", "steps", "attempts", "replay hits", "failures")}  # fmt: skip
    assert cards == {"executions": "2", "steps": "4", "attempts": "1", "replay hits": "2",
                     "failures": "1"}  # fmt: skip
    assert (run["executions"], run["steps"], run["attempts"]) == (2, 4, 1)
    failed = page.locator("tr[data-outcome=failed]")
    assert failed.count() == 1  # the first attempt of send_receipt, kept beside its retry
    failed.locator("a").first.click()
    page.locator("[data-testid=step]").wait_for()
    error = page.locator("[data-testid=step] .error").inner_text()
    assert "ConnectionError: mail API timed out" in error
    inputs = page.locator("[data-testid=inputs-output] >> nth=0").inner_text()
    # what it was called with: the order (collapsed) and the charge id
    assert "Inputs" in inputs and "args: [2]" in inputs and f'"ch_{demo}"' in inputs
    shot(page, "failed-attempt")


def test_queues_page_and_queued_runs(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(server.url)
    page.get_by_role("link", name="Queues").click()
    row = page.locator("[data-testid=queues] tr[data-queue=mail]")
    row.wait_for()
    assert row.locator("td").nth(1).inner_text() == "1"  # waiting
    assert row.locator("td").nth(2).inner_text() == "1"  # of which delayed
    row.get_by_role("link", name="queued runs").click()
    page.locator("[data-testid=runs] tbody tr").first.wait_for()
    statuses = page.locator("[data-testid=runs] tbody .badge").all_inner_texts()
    assert statuses == ["queued"]
    shot(page, "queues")


def test_crafted_markup_executes_nothing(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    page.goto(server.url)
    page.locator("[data-testid=runs] tbody tr").first.wait_for()
    assert page.get_by_text(XSS_ID, exact=True).count() == 1  # shown as text
    page.goto(f"{server.url}runs/{quote(XSS_ID, safe='')}")
    page.locator("[data-testid=waterfall] a").first.click()
    step = page.locator("[data-testid=step]")
    step.wait_for()
    assert "<script>window.__xss=1</script>" in step.inner_text()
    page.wait_for_timeout(200)
    assert page.evaluate("window.__xss") is None
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    shot(page, "escaped")


def test_a_running_run_updates_live(page: Any, viewer: tuple[ViewerServer, str]) -> None:
    server, _ = viewer
    mw = agentrewind.Middleware(server.store)
    with mw.run("live-run") as run:
        run.step("first", lambda: 1)
        page.goto(f"{server.url}runs/live-run")
        page.locator("[data-testid=waterfall]").wait_for()
        assert page.locator(".badge.running").count() == 1
        assert page.locator("tr[data-outcome=executed]").count() == 1
        run.step("second", lambda: 2)
        # the page polls while the run is in progress: the new call appears without a reload
        page.locator("tr[data-outcome=executed]").nth(1).wait_for(timeout=10_000)
    page.locator(".badge.completed").first.wait_for(timeout=10_000)
