"""Issue 16, "a CLI you can trust while debugging a crash": one test per finding, each running
the real command in subprocesses on SQLite and Redis (LangGraph threads: tests/langgraph)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind.stores.leases import make_lease_owner
from cli_support import agentrewind as run_cli
from cli_support import batch, env
from redis_support import cleanup_redis


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    ns = f"find-{os.urandom(4).hex()}"
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'f.db'}?namespace={ns}"
    else:
        redis_url = request.getfixturevalue("redis_url")
        yield f"{redis_url}?namespace={ns}"
        cleanup_redis(redis_url, ns)


def fill(url: str) -> dict[str, Any]:
    """A timeline with a rolled-back step and a merge, and a journal run replayed once."""
    with agentrewind.connect(url) as store:
        tl = agentrewind.Timeline("research", store=store)
        root = tl.checkpoint({"q": "laptop", "sources": []}, description="Parsed")
        bad = tl.checkpoint({"q": "laptop", "sources": ["ads"]}, description="Searched ads")
        tl.rollback()
        tl.branch("reviews")
        alt = tl.checkpoint({"q": "laptop", "sources": ["reviews"]}, description="Reviews")
        tl.switch_branch("main")
        merged = tl.merge("reviews", strategy="theirs")
        tl.close()  # frees the timeline's lease: nobody drives it now
        mw = agentrewind.Middleware(store)
        for _ in range(2):
            with mw.run("job") as run:
                run.step("fetch", lambda: {"rows": 2})
                run.step("send", lambda: "sent")
        return {"root": root.id, "bad": bad.id, "alt": alt.id, "merged": merged.id}


# -- 1. step references ---------------------------------------------------------------------
def test_every_seq_and_id_log_prints_works_in_show_and_fork(url: str) -> None:
    fill(url)
    logs = batch(["--store", url, "log", "research", "--json"], ["--store", url, "log", "job"])
    steps = logs[0].ok().json()
    assert isinstance(steps, list) and len(steps) == 4
    printed = [line.split() for line in logs[1].ok().out.splitlines()[2:]]
    job_refs = [(row[0], row[-1]) for row in printed]  # SEQ first, ID last, as printed
    refs = [("research", str(s["seq"]), s["ref"], s["step_id"]) for s in steps]
    refs += [("job", seq, ref, None) for seq, ref in job_refs]
    commands = []
    for i, (run, seq, ref, _) in enumerate(refs):
        for j, name in enumerate((seq, ref)):
            commands.append(["--store", url, "show", run, name, "--json"])
            commands.append(["fork", run, "--at", name, "--to", f"f{i}-{j}", "--json",
                             "--store", url])  # fmt: skip
    results = batch(*commands)
    for k, (_, seq, ref, step_id) in enumerate(refs):
        shown = [results[4 * k + n].ok().json() for n in (0, 2)]
        forked = [results[4 * k + n].ok().json() for n in (1, 3)]
        for s, f in zip(shown, forked, strict=True):
            assert isinstance(s, dict) and isinstance(f, dict)
            assert str(s["seq"]) == seq and s["ref"] == ref
            assert step_id is None or s["step_id"] == step_id
            assert f["at"] == s["step_id"] and f["seq"] == s["seq"]


def test_step_names_are_unique_and_ambiguity_names_candidates(url: str) -> None:
    fill(url)
    log, amb = batch(["--store", url, "log", "research", "--json"],
                     ["--store", url, "show", "research", "1"])  # fmt: skip
    data = log.ok().json()
    assert isinstance(data, list)
    refs = [s["ref"] for s in data]
    assert len(set(refs)) == len(refs) and all(not r.isdigit() for r in refs)
    assert amb.ok().out.startswith("seq        1")  # a sequence number, as `log` prints it
    prefix = os.path.commonprefix([s["step_id"] for s in data])  # noqa: RUF071
    if len(prefix) >= 4:
        out = batch(["--store", url, "show", "research", prefix])[0]
        assert out.code == 1 and "ambiguous" in out.err and "Traceback" not in out.err


# -- 3. runs ----------------------------------------------------------------------------------
KILLED = """
import os, signal, sys
import agentrewind
mw = agentrewind.Middleware(agentrewind.connect(sys.argv[1]))
with mw.run("victim") as run:
    run.step("one", lambda: 1)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_runs_true_counts_kinds_crashed_filters_utc(url: str) -> None:
    ids = fill(url)
    killed = subprocess.run([sys.executable, "-c", KILLED, url], env=env(), timeout=60)
    assert killed.returncode == -signal.SIGKILL
    with agentrewind.connect(url) as store:
        store.begin_run("busy")
        assert store.acquire_lease("busy", make_lease_owner(), 60).acquired
    r_all, r_crashed, r_kind, r_since, r_future, text = batch(
        ["fork", "research", "--at", ids["alt"], "--to", "forked", "--store", url],
        ["runs", "--status", "crashed", "--json", "--store", url],
        ["runs", "--kind", "timeline", "--kind", "fork", "--json", "--store", url],
        ["runs", "--since", "1h", "--limit", "2", "--json", "--store", url],
        ["runs", "--since", "2999-01-01T00:00:00Z", "--store", url],
        ["runs", "--store", url],
    )
    r_all.ok()
    crashed = r_crashed.ok().json()
    assert isinstance(crashed, list) and [r["run_id"] for r in crashed] == ["victim"]
    assert crashed[0]["steps"] == 1 and crashed[0]["stored_status"] in ("running", "crashed")
    kinds = {r["run_id"]: r for r in r_kind.ok().json()}  # type: ignore[union-attr]
    assert kinds["research"]["kind"] == "timeline" and kinds["research"]["steps"] == 4
    assert kinds["forked"]["kind"] == "fork" and kinds["forked"]["steps"] == 2
    assert kinds["forked"]["forked_from"] == "research"
    assert len(r_since.ok().json()) == 2  # type: ignore[arg-type]
    assert "no runs" in r_future.ok().out
    lines = text.ok().out.splitlines()
    assert lines[0].split()[:4] == ["RUN", "KIND", "STATUS", "STEPS"] and "UTC" in lines[0]
    row = {line.split()[0]: line.split() for line in lines[1:]}
    assert row["job"][1:4] == ["journal", "completed", "2"] and row["job"][4] == "2"
    assert row["busy"][2] == "running" and row["victim"][2] == "crashed"
    assert row["job"][5].endswith("Z") and "T" in row["job"][5]


# -- 4. prune and rm --------------------------------------------------------------------------
def test_prune_and_rm_are_safe_and_reclaim_space(url: str) -> None:
    fill(url)
    with agentrewind.connect(url) as store:
        mw = agentrewind.Middleware(store)
        for i in range(30):
            with mw.run(f"bulk-{i}") as run:
                run.step("blob", lambda: "x" * 20_000)
        store.begin_run("busy")
        assert store.acquire_lease("busy", make_lease_owner(), 60).acquired
    dry, refused, bad, rm_busy, rm_forced, prune, runs = batch(
        ["prune", "--older-than", "0s", "--dry-run", "--json", "--store", url],
        ["prune", "--store", url],
        ["prune", "--older-than", "7 fortnights", "--store", url],
        ["rm", "busy", "job", "--yes", "--store", url],
        ["rm", "busy", "--yes", "--force", "--json", "--store", url],
        ["prune", "--keep-last", "2", "--yes", "--json", "--store", url],
        ["runs", "--json", "--store", url],
    )
    plan = dry.ok().json()
    assert isinstance(plan, dict) and plan["dry_run"] and len(plan["prune"]) == 32
    assert plan["refused"] == [{"run_id": "busy", "lease_owner": plan["refused"][0]["lease_owner"]}]
    assert refused.code == 1 and "say what to prune" in refused.err  # never "everything"
    assert bad.code == 2 and "not a duration" in bad.err
    assert (
        rm_busy.ok().out.count("deleted job") == 1
        and "skipped 1 run(s) another process is driving" in rm_busy.out
    )
    assert rm_forced.ok().json()["delete"] == ["busy"]  # type: ignore[index]
    done = prune.ok().json()
    assert isinstance(done, dict) and done["deleted_count"] == len(done["prune"]) == 28
    assert "research" not in done["prune"]  # an active timeline is never "surplus"
    left = {r["run_id"] for r in runs.ok().json()}  # type: ignore[union-attr]
    assert "research" in left and len(left) == 3
    if url.startswith("sqlite"):
        assert done["bytes_freed"] > 300_000  # 30 x 20 kB given back to the file system


# -- 5. read commands create nothing ----------------------------------------------------------
def test_read_commands_create_nothing_and_fail_clearly(url: str, tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    typo = tmp_path / "typo" / "dir" / "x.db"
    if url.startswith("sqlite"):
        agentrewind.connect(url).close()  # an existing, empty store
    results = batch(
        ["runs"],
        ["--store", f"sqlite:///{typo}", "runs"],
        ["log", "x", "--store", f"sqlite:///{typo}"],
        ["--store", url, "runs"],
        cwd=str(work),
    )
    for r in results[:3]:
        assert r.code == 3 and "no SQLite store at" in r.err and "nothing was created" in r.err
    assert results[3].ok().out.startswith("no runs")
    assert list(work.iterdir()) == [] and not (tmp_path / "typo").exists()
    if url.startswith("redis"):
        import redis

        ns = url.split("namespace=")[1]
        client = redis.Redis.from_url(url.split("?")[0])
        assert list(client.scan_iter(f"*:{ns}:*")) == []
        client.close()


# -- 6. conventions ---------------------------------------------------------------------------
def test_options_anywhere_version_module_and_help(url: str) -> None:
    fill(url)
    results = batch(
        ["runs", "--store", url, "--json"],
        ["log", "job", "--namespace", url.split("namespace=")[1], "--store", url.split("?")[0]],
        ["--version"],
        ["--help"],
        ["prune", "--help"],
    )
    assert {r["run_id"] for r in results[0].ok().json()} == {"job", "research"}  # type: ignore[union-attr]
    assert "2 step(s)" in results[1].ok().out
    assert results[2].ok().out.startswith("agentrewind 0.")
    assert "$AGENTREWIND_STORE" in results[3].ok().out and "exit codes" in results[3].out
    assert "7d" in results[4].ok().out and "--dry-run" in results[4].out
    module = run_cli("--store", url, "runs")
    assert module.ok().out.startswith("RUN")


# -- 7. import --------------------------------------------------------------------------------
def test_import_refuses_changed_content_under_an_existing_id(url: str, tmp_path: Path) -> None:
    fill(url)
    doc = tmp_path / "job.json"
    changed = tmp_path / "changed.json"
    (export,) = batch(["export", "job", "-o", str(doc), "--store", url])
    export.ok()
    data = json.loads(doc.read_text())
    data["steps"][-1]["output"] = "tampered"
    changed.write_text(json.dumps(data))
    same, refused, replaced, after = batch(
        ["import", str(doc), "--store", url],
        ["import", str(changed), "--store", url],
        ["import", str(changed), "--replace", "--json", "--store", url],
        ["show", "job", data["steps"][-1]["step_id"], "--json", "--store", url],
    )
    assert "already present" in same.ok().out
    assert refused.code == 1 and "different content" in refused.err and "--replace" in refused.err
    assert replaced.ok().json()["outcome"] == "replaced"  # type: ignore[index]
    assert after.ok().json()["output"] == "tampered"  # type: ignore[index]


# -- 8. exit codes, Ctrl-C, encodings ---------------------------------------------------------
def test_exit_codes_ctrl_c_and_ascii_fallback(url: str) -> None:
    fill(url)
    usage, missing, unreachable, tree = batch(
        ["--store", url, "frobnicate"],
        ["--store", url, "show", "job", "99"],
        ["--store", "redis://127.0.0.1:1/0", "runs"],
        ["--store", url, "tree", "research"],
    )
    assert usage.code == 2 and missing.code == 1 and unreachable.code == 3
    assert "matches no step" in missing.err and "Traceback" not in unreachable.err
    assert "@" in tree.ok().out  # no encoding on a StringIO: ASCII glyphs
    cp1252 = run_cli("--store", url, "tree", "research", PYTHONIOENCODING="cp1252")
    assert "|- " in cp1252.ok().out or "`- " in cp1252.out
    # Ctrl-C as at a terminal: a runner started in the background (`cmd &` in a script)
    # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrewind", "--store", url, "import", "-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(2.5)  # imported and blocked reading stdin
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and b"Traceback" not in err


# -- formats for other tools ------------------------------------------------------------------
def _apply(doc: Any, patch: list[dict[str, Any]]) -> Any:
    for op in patch:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        target = doc
        for p in parents:
            target = target[p]
        if op["op"] == "remove":
            del target[last]
        elif last == "" and not parents and op["path"] == "":
            doc = op["value"]
        else:
            target[last] = op["value"]
    return doc


def test_tree_and_diff_formats(url: str) -> None:
    ids = fill(url)
    mermaid, dot, patch, a, b = batch(
        ["--store", url, "tree", "research", "--format", "mermaid"],
        ["--store", url, "tree", "research", "--format", "dot"],
        [
            "--store",
            url,
            "diff",
            f"research@{ids['bad']}",
            "research@main",
            "--format",
            "json-patch",
        ],
        ["--store", url, "show", "research", ids["bad"], "--json"],
        ["--store", url, "show", "research", "main", "--json"],
    )
    lines = mermaid.ok().out.splitlines()
    assert lines[0] == "flowchart TD" and sum("-->" in x for x in lines) == 4  # merge: 2 parents
    assert dot.ok().out.startswith('digraph "research"') and dot.out.count("->") == 4
    ops = patch.ok().json()
    assert isinstance(ops, list) and {o["op"] for o in ops} <= {"add", "remove", "replace"}
    before, after = a.ok().json()["output"], b.ok().json()["output"]  # type: ignore[index]
    assert _apply(before, ops) == after


def test_rm_asks_on_a_terminal(url: str) -> None:
    fill(url)
    main_fd, tty_fd = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrewind", "rm", "job", "--store", url],
            stdin=tty_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
        )  # fmt: skip
        os.write(main_fd, b"n\n")  # the terminal answers "no": nothing goes
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main_fd)
        os.close(tty_fd)
    assert proc.returncode == 1 and b"delete 1 run(s) (job)? [y/N]" in out
    assert b"nothing deleted" in out and b"Traceback" not in err
    with agentrewind.connect(url) as store:
        assert store.get_run("job") is not None


@pytest.mark.postgres
def test_postgres_runs_kinds_crashed_and_rm(postgres_url: str) -> None:
    url = f"{postgres_url}?namespace=cli-{os.urandom(4).hex()}"
    fill(url)
    with agentrewind.connect(url) as store:
        store.begin_run("dead")
        owner = f"{socket.gethostname()}:999999999:x"  # a pid that cannot exist
        assert store.acquire_lease("dead", owner, 60).acquired
    runs, rm, after = batch(
        ["runs", "--json", "--store", url],
        ["rm", "dead", "--yes", "--store", url],
        ["runs", "--json", "--store", url],
    )
    got = {r["run_id"]: r for r in runs.ok().json()}  # type: ignore[union-attr]
    assert got["dead"]["status"] == "crashed" and got["job"]["steps"] == 2
    assert got["research"]["kind"] == "timeline" and got["research"]["status"] == "active"
    assert "deleted dead" in rm.ok().out
    assert {r["run_id"] for r in after.ok().json()} == {"job", "research"}  # type: ignore[union-attr]
