"""The `agentrewind` command on SQLite and Redis, checking its output and exit codes.

Most tests call `agentrewind.cli.main([...])` in-process (fast); `test_every_command_as_a_
subprocess`, the demo, store errors and run-source plugins run the real command.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind.cli import main
from redis_support import cleanup_redis as _cleanup_redis


def subprocess_cli(
    url: str, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
):  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "agentrewind.cli", "--store", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        input=stdin,
    )


def subprocess_ok(url: str, *args: str, **kw: Any) -> str:
    out = subprocess_cli(url, *args, **kw)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return str(out.stdout)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """Run `agentrewind --store URL ARGS...` in-process; returns `(returncode, stdout, stderr)`."""

    def run(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = main(["--store", url, *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


@pytest.fixture
def ok(cli: Callable[..., Any]) -> Callable[..., str]:
    """Like `cli`, asserting success; returns stdout."""

    def run(url: str, *args: str, **kw: Any) -> str:
        out = cli(url, *args, **kw)
        assert out.returncode == 0, out.stderr
        return str(out.stdout)

    return run


@pytest.fixture(params=["sqlite", "redis"], scope="module")
def populated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    ns = f"cli-{os.urandom(4).hex()}"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'cli.db'}?namespace={ns}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?namespace={ns}"
    store = agentrewind.connect(url)
    tl = agentrewind.Timeline("research", store=store)
    root = tl.checkpoint({"q": "laptop", "sources": []}, {"confidence": 0.5}, "Parsed", "parse")
    bad = tl.checkpoint({"q": "laptop", "sources": ["ads"]}, description="Searched ads")
    tl.rollback()
    tl.branch("reviews")
    alt = tl.checkpoint({"q": "laptop", "sources": ["reviews"]}, {"confidence": 0.9}, "Reviews")
    tl.switch_branch("main")
    merged = tl.merge("reviews", strategy="theirs")
    mw = agentrewind.Middleware(store)
    with mw.run("job") as run:
        run.step("fetch", lambda: {"rows": 2})
    with mw.run("job") as run:
        run.step("fetch", lambda: {"rows": 2})
        run.step("send", lambda: "sent")
    ids = {"root": root.id, "bad": bad.id, "alt": alt.id, "merged": merged.id}
    yield url, ids
    if request.param == "redis":
        _cleanup_redis(request.getfixturevalue("redis_url"), ns)
    store.close()


def test_runs(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, _ = populated
    text = ok(url, "runs")
    assert text.splitlines()[0].split() == [
        "RUN",
        "KIND",
        "STATUS",
        "STEPS",
        "REPLAYED",
        "UPDATED",
        "(UTC)",
    ]
    assert any(line.startswith("job ") and "completed" in line for line in text.splitlines())
    data = json.loads(ok(url, "runs", "--json"))
    assert {r["run_id"] for r in data} == {"job", "research"}
    job = next(r for r in data if r["run_id"] == "job")
    assert job["metrics"]["replay_hits"] == 1 and job["source"] == "agentrewind"


def test_log(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    text = ok(url, "log", "research")
    assert "4 step(s)" in text and "Searched ads" in text
    main = json.loads(ok(url, "log", "research", "--branch", "main", "--json"))
    assert [s["step_id"] for s in main] == [ids["root"], ids["merged"]]
    job = json.loads(ok(url, "log", "job", "--json"))
    assert [s["name"] for s in job] == ["fetch", "send"]


def test_tree(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    text = ok(url, "tree", "research")
    assert "branches: main (HEAD), reviews" in text
    bad_line = next(line for line in text.splitlines() if "Searched ads" in line)
    assert "[rolled back]" in bad_line
    assert "merge of " in text and "\x1b[" not in text
    nodes = json.loads(ok(url, "tree", "research", "--json"))
    merged = next(n for n in nodes if n["id"] == ids["merged"])
    assert merged["merged"] == [ids["alt"]] and merged["refs"] == ["main (HEAD)"]
    assert "custom:fetch" in ok(url, "tree", "job")


def test_branches(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    lines = ok(url, "branches", "research").splitlines()
    assert lines[0].split()[:2] == ["*", "main"] and lines[1].split()[0] == "reviews"
    data = json.loads(ok(url, "branches", "research", "--json"))
    assert {b["name"]: b["head"] for b in data} == {"main": ids["merged"], "reviews": ids["alt"]}


def test_show(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    text = ok(url, "show", "research", ids["alt"][-10:])
    assert f"step_id    {ids['alt']}" in text and '"reviews"' in text
    data = json.loads(ok(url, "show", "research", "main", "--json"))
    assert data["step_id"] == ids["merged"] and data["output"]["sources"] == ["reviews"]


def test_diff(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    text = ok(url, "diff", f"research@{ids['root']}", f"research@{ids['bad'][-10:]}")
    assert '+ sources[0]: "ads"' in text
    data = json.loads(ok(url, "diff", "--run", "research", ids["bad"], "main", "--json"))
    assert data["changed"] == {"sources[0]": {"before": "ads", "after": "reviews"}}
    assert "(no differences)" in ok(url, "diff", "research", "research@reviews")


def test_metrics(populated, ok) -> None:  # type: ignore[no-untyped-def]
    url, _ = populated
    text = ok(url, "metrics", "job")
    assert "replay hits      1" in text and "steps            2" in text
    assert json.loads(ok(url, "metrics", "--json"))["runs"] == 2


def test_fork_export_import_prune(populated, ok, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url, ids = populated
    assert "2 step(s) copied" in ok(url, "fork", "research", "--at", ids["alt"], "--to", "forked")
    assert json.loads(ok(url, "branches", "forked", "--json"))[0]["head"] == ids["alt"]
    doc = tmp_path / "research.json"
    ok(url, "export", "research", "-o", str(doc), "--task-summary", "pick a laptop")
    data = json.loads(doc.read_text())
    assert data["format"] == "agentrewind.run" and data["task_summary"] == "pick a laptop"
    assert json.loads(ok(url, "export", "job"))["status"] == "completed"
    result = json.loads(ok(url, "import", str(doc), "--run-id", "imported", "--json"))
    assert result == {"valid": True, "run_id": "imported", "steps": 4, "outcome": "imported"}
    assert "imported run research2" in ok(url, "import", "-", "--run-id", "research2",
                                          stdin=doc.read_text())  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "status": "weird", "retry_strategy": 3}))
    out = cli(url, "import", str(bad))
    assert out.returncode == 1 and "status: must be one of" in out.stderr
    assert "retry_strategy" in out.stderr and "Traceback" not in out.stderr
    assert len(json.loads(ok(url, "runs", "--json"))) == 5


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_prune(
    request: pytest.FixtureRequest, kind: str, tmp_path: Path, namespace: str, ok
) -> None:  # type: ignore[no-untyped-def]
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'p.db'}?namespace={namespace}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?namespace={namespace}"
    store = agentrewind.connect(url)
    for name in ("old", "mid", "new"):
        agentrewind.Timeline(name, store=store).checkpoint({"run": name})
    try:
        assert "deleted 0 run(s)" in ok(url, "prune", "--keep-last", "100")
        done = json.loads(ok(url, "prune", "--keep-last", "2", "--force", "--yes", "--json"))
        assert done["prune"] == ["old"] and done["deleted_count"] == 1
        assert {r["run_id"] for r in json.loads(ok(url, "runs", "--json"))} == {"mid", "new"}
    finally:
        if kind == "redis":
            _cleanup_redis(request.getfixturevalue("redis_url"), namespace)
        store.close()


def test_unknown_run_and_step(populated, cli) -> None:  # type: ignore[no-untyped-def]
    url, _ = populated
    commands = [["log", "ghost"], ["tree", "ghost"], ["show", "ghost", "abcd"],
                ["branches", "ghost"], ["metrics", "ghost"], ["export", "ghost"],
                ["diff", "ghost", "ghost2"],
                ["fork", "ghost", "--at", "x", "--to", "y"]]  # fmt: skip
    for command in commands:
        out = cli(url, *command)
        assert out.returncode == 1, command
        assert "error: no run 'ghost'" in out.stderr and "Traceback" not in out.stderr
    out = cli(url, "show", "research", "zzzzzzzz")
    assert out.returncode == 1 and "matches no step" in out.stderr


def test_every_command_as_a_subprocess(populated, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The real command end to end: exit codes, stdout, stderr, no tracebacks.

    Every command on SQLite; on Redis a few (each process spends ~0.5 s importing redis-py,
    and the in-process tests above already run every command on Redis).
    """
    url, ids = populated
    doc = tmp_path / "job.json"
    commands = [
        (["runs"], "research "),
        (["log", "research"], "Searched ads"),
        (["tree", "research"], "<- main (HEAD)"),
        (["branches", "research"], "* main"),
        (["show", "research", "main"], ids["merged"]),
        (["diff", "--run", "research", ids["bad"], "main"], "~ sources[0]"),
        (["metrics", "job"], "replay hits      1"),
        (["fork", "research", "--at", ids["root"], "--to", "sub-fork"], "1 step(s) copied"),
        (["export", "job", "-o", str(doc)], "exported run job"),
        (["import", str(doc), "--run-id", "sub-job"], "imported run sub-job"),
        (["prune", "--keep-last", "100", "--json"], '"deleted_count": 0'),
    ]
    for args, needle in commands:
        assert needle in subprocess_ok(url, *args), args
    out = subprocess_cli(url, "log", "ghost")
    assert out.returncode == 1 and "error: no run 'ghost'" in out.stderr
    assert "Traceback" not in out.stderr
    store = agentrewind.connect(url)
    for run_id in ("sub-fork", "sub-job"):
        store.delete_run(run_id)
    store.close()


def test_unreachable_store_and_unknown_url() -> None:
    out = subprocess_cli("redis://127.0.0.1:1/0", "runs")
    assert out.returncode == 3 and "unreachable" in out.stderr and "Traceback" not in out.stderr
    out = subprocess_cli("ftp://nowhere", "runs")
    assert out.returncode == 1 and "unknown store URL" in out.stderr


def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentrewind.cli", "--store", f"sqlite:///{tmp_path / 'd.db'}",
         "demo"], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for needle in ("failed: mail API timed out", "replayed  custom:fetch_order",
                   "executed  custom:send_receipt", "rolled back to", "explored branch",
                   "merged personal-touch into main", "[rolled back]", "<- main (HEAD)",
                   "what replay saved", "2 call(s) not re-run"):  # fmt: skip
        assert needle in text, needle


SOURCE = textwrap.dedent(
    """
    from agentrewind import RunInfo, StepRecord

    class FakeSource:
        name = "fakegraph"

        def list_runs(self, store, *, limit):
            return [RunInfo("thread-7", "completed", 1.0, 4102444800.0)]

        def load_steps(self, store, run_id):
            if run_id != "thread-7":
                return None
            return [StepRecord("thread-7", "c1", "k1", "node", "agent", "completed", 1),
                    StepRecord("thread-7", "c2", "k2", "node", "tools", "completed", 2,
                               parent_id="c1")]
    """
)


def test_runs_log_tree_include_run_sources(tmp_path: Path) -> None:
    (tmp_path / "fake_source.py").write_text(SOURCE)
    dist = tmp_path / "fake_source-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-source\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[agentrewind.run_sources]\nfake = fake_source:FakeSource\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    url = f"sqlite:///{tmp_path / 's.db'}"
    agentrewind.connect(url).close()
    runs = subprocess_ok(url, "runs", env=env)
    assert "thread-7" in runs and "fakegraph" in runs
    assert json.loads(subprocess_ok(url, "runs", "--json", env=env))[0]["source"] == "fakegraph"
    assert "run thread-7 (fakegraph): 2 step(s)" in subprocess_ok(url, "log", "thread-7", env=env)
    tree = subprocess_ok(url, "tree", "thread-7", env=env)
    assert "node:agent" in tree and "node:tools" in tree
