"""Runs that come back by themselves (issue 24), across real processes and real SIGKILLs.

A workflow killed inside its second step is finished by `recover()` in a new process; three
processes recovering twenty crashed runs at once resume each exactly once; a cancel from
another process stops the owner at its next step, recovery leaves the run alone and `resume`
finishes it; `agentrewind worker` finishes crashed runs and drains on SIGTERM. Side effects
are counted in a file every execution appends to (fsynced), so a SIGKILL loses none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import backend_url, server_sessions, settle, unique

import agentrewind

HERE = Path(__file__).parent
APP = str(HERE / "_wfapp.py")


@pytest.fixture(params=["sqlite", "redis", "redis-cluster", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "redis-cluster":
        base = request.getfixturevalue("redis_cluster")
        ns = unique("wf")
        yield f"{base}?namespace={ns}"
        return
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    pg = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with backend_url(request.param, tmp_path, redis_url, pg) as u:
        yield u


def _env(url: str, effects: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AR_STORE": url, "AR_EFFECTS": str(effects), "AR_LEASE_TTL": "2"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _spawn(url: str, effects: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, APP, *args],
        env=_env(url, effects, **extra),
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{out}\n{err}"
    return out


def _effects(path: Path) -> Counter[str]:
    return (
        Counter(line.split(" ")[0] for line in path.read_text().splitlines())
        if path.exists()
        else Counter()
    )


def _kill_inside_step_two(url: str, effects: Path, *run_ids: str) -> None:
    """Start the runs in one process, wait until each is inside step two, SIGKILL it."""
    before = server_sessions(url)
    proc = _spawn(url, effects, "run", *run_ids, AR_HANG="1")
    assert proc.stdout is not None
    seen = set()
    while len(seen) < len(run_ids):
        line = proc.stdout.readline()
        assert line.startswith("in-two"), (line, proc.stderr.read() if proc.stderr else "")
        seen.add(line.split()[1])
    proc.send_signal(signal.SIGKILL)
    proc.communicate()  # reaps it and closes its pipes
    settle(url, before)


def _status(url: str, run_id: str) -> str:
    with agentrewind.connect(url) as store:
        info = store.get_run(run_id)
        assert info is not None
        return info.status


def test_a_workflow_killed_in_its_second_step_is_finished_by_recover_in_a_new_process(
    url: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    _kill_inside_step_two(url, effects, "w1")
    assert _status(url, "w1") == "crashed"
    out = _finish(_spawn(url, effects, "recover"))
    assert json.loads(out) == [["w1", "completed"]]
    counts = _effects(effects)
    assert counts["w1:1"] == 1  # the finished step replayed
    assert counts["w1:2"] == 2  # the step it died in ran again (at-least-once in flight)
    assert counts["w1:3"] == 1
    assert _status(url, "w1") == "completed"
    with agentrewind.connect(url) as store:  # the recorded arguments ran it again
        mw = agentrewind.Middleware(store)
        from agentrewind.journal.workflow import recorded_call

        call = recorded_call(store, mw, "w1")
        assert call is not None and call.workflow == "three"
        assert call.args == ("w1",) and call.kwargs == {"times": 2}


def test_three_processes_recovering_twenty_crashed_runs_resume_each_once(
    url: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    ids = [f"r{i:02d}" for i in range(20)]
    _kill_inside_step_two(url, effects, *ids)
    recoverers = [_spawn(url, effects, "recover") for _ in range(3)]
    outcomes = [json.loads(_finish(p)) for p in recoverers]
    resumed = Counter(run_id for got in outcomes for run_id, o in got if o == "completed")
    assert resumed == Counter({i: 1 for i in ids})  # each exactly once, by one process
    counts = _effects(effects)
    assert all(counts[f"{i}:1"] == 1 and counts[f"{i}:3"] == 1 for i in ids), counts
    assert {_status(url, i) for i in ids} == {"completed"}


def test_cancel_from_another_process_stops_the_owner_then_resume_finishes_it(
    url: str, tmp_path: Path
) -> None:
    effects, gate = tmp_path / "effects.log", tmp_path / "gate"
    owner = _spawn(url, effects, "run-one", "c1", AR_GATE=str(gate))
    assert owner.stdout is not None
    assert owner.stdout.readline().startswith("waiting c1")  # inside step two
    cli = subprocess.run(
        [sys.executable, "-m", "agentrewind", "--store", url, "cancel", "c1", "nope"],
        capture_output=True,
        text=True,
    )
    assert cli.stdout.startswith("c1: cancelled"), cli
    assert cli.returncode == 1 and "no run 'nope'" in cli.stderr  # a named error, no traceback
    gate.touch()
    assert _finish(owner).strip().splitlines()[-1] == "cancelled RunCancelledError"
    assert _status(url, "c1") == "cancelled"
    assert json.loads(_finish(_spawn(url, effects, "recover"))) == []  # left alone
    assert _effects(effects) == Counter({"c1:1": 1, "c1:2": 1})  # nothing after the cancel
    code = "import json, _wfapp; print(json.dumps(_wfapp.mw.resume('c1')))"
    resumed = subprocess.run(
        [sys.executable, "-c", code], env=_env(url, effects), cwd=HERE, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert json.loads(resumed.stdout) == {"steps": ["c1:1", "c1", "c1:3"], "times": 1}, resumed
    # step one replayed; step two, whose completion the cancel refused, ran again
    assert _effects(effects) == Counter({"c1:1": 1, "c1:2": 2, "c1:3": 1})
    assert _status(url, "c1") == "completed"


@pytest.mark.parametrize("url", ["sqlite", "postgres"], indirect=True)
def test_the_worker_finishes_crashed_runs_and_drains_on_sigterm(url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    _kill_inside_step_two(url, effects, "k1", "k2")
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentrewind", "worker", "_wfapp:mw", "--poll", "0.2"],
        env=_env(url, effects, AR_SLOW="1.5"),
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().startswith("worker on ")
    lines = sorted(worker.stdout.readline().split(" (")[0] for _ in range(2))
    assert lines == ["resumed k1", "resumed k2"]
    assert {_status(url, "k1"), _status(url, "k2")} == {"completed"}
    # a run that crashes while the worker waits: taken within the lease TTL + one poll
    _kill_inside_step_two(url, effects, "k3")
    deadline = time.monotonic() + 10
    while _effects(effects)["k3:2"] < 2:  # the worker is inside its (slow) step two
        assert time.monotonic() < deadline, _effects(effects)
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "SIGTERM: draining" in out
    # it stopped at its next step: step three never ran, the lease is free, status crashed
    assert _effects(effects)["k3:3"] == 0
    assert _status(url, "k3") == "crashed"
    assert json.loads(_finish(_spawn(url, effects, "recover"))) == [["k3", "completed"]]
    assert _effects(effects)["k3:1"] == 1 and _effects(effects)["k3:3"] == 1


def test_bad_input_is_a_named_error_and_changes_nothing(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    mw = agentrewind.Middleware(store_url)
    wf = mw.workflow("w", lambda x: x)
    with pytest.raises(agentrewind.WorkflowError):
        mw.workflow("w", lambda x: 2 * x)  # another function under a taken name
    with pytest.raises(agentrewind.SerializationError, match=r"\$\.args\[0\]"):
        wf.run(object(), run_id="bad")
    assert mw.store.get_run("bad") is None  # nothing written
    with pytest.raises(agentrewind.RunNotFoundError):
        mw.cancel("ghost")
    with pytest.raises(agentrewind.RunNotFoundError):
        mw.resume("ghost")
    assert wf.run(3, run_id="done") == 3
    with pytest.raises(agentrewind.RunFinishedError):
        mw.cancel("done")
    assert mw.store.get_run("done").status == "completed"  # type: ignore[union-attr]
    cli = subprocess.run(
        [sys.executable, "-m", "agentrewind", "worker", "no_such_module:mw"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert cli.returncode == 1 and cli.stderr.startswith("error: cannot import 'no_such_module'")
    assert "Traceback" not in cli.stderr
    mw.close()
