"""Attempts are history: a failed or killed attempt of a call stays beside its rerun."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrewind import Middleware
from agentrewind.cli import main
from agentrewind.journal.attempts import ATTEMPTS_KEPT


@pytest.fixture
def mw(store_url: str) -> Middleware:
    return Middleware(store_url)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
        code = main(["--store", url, *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


def test_a_failed_attempt_stays_beside_its_retry(
    mw: Middleware, store_url: str, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    calls: list[str] = []

    def lookup(order: str) -> str:
        calls.append(order)
        if len(calls) == 1:
            raise TimeoutError("LLM timed out on A-17")
        return f"found {order}"

    with pytest.raises(TimeoutError), mw.run("r") as run:
        run.step("plan", lambda: "plan")
        run.step("lookup", lookup, "A-17")
    with mw.run("r") as run:
        run.step("plan", lambda: "plan")
        assert run.step("lookup", lookup, "A-17") == "found A-17"
        run.step("answer", lambda: "done")
    with mw.run("r") as run:  # replay uses the completed attempt only: nothing runs again
        run.step("plan", lambda: "plan")
        assert run.step("lookup", lookup, "A-17") == "found A-17"
    assert calls == ["A-17", "A-17"]

    steps = mw.store.load_steps("r")
    assert [(s.name, s.status) for s in steps] == [
        ("plan", "completed"),
        ("lookup", "failed"),
        ("lookup", "completed"),
        ("answer", "completed"),
    ]
    failed, retried = steps[1], steps[2]
    assert len({s.seq for s in steps}) == 4  # each attempt keeps its own seq
    assert failed.key == retried.key + "@1" and failed.step_id != retried.step_id
    assert failed.meta["error"]["type"] == "TimeoutError"
    assert failed.meta["error"]["message"] == "LLM timed out on A-17"
    assert "raise TimeoutError" in failed.meta["error"]["traceback"]
    assert failed.meta["replaced_by"] == retried.step_id
    assert retried.meta["attempt"] == 2
    assert retried.meta["replaces"] == {
        "step_id": failed.step_id,
        "seq": failed.seq,
        "status": "failed",
    }
    assert retried.meta["resumed"]["why"] == "failed"

    if store_url.startswith("memory://"):
        return  # the CLI reads a store another process can open
    log = cli(store_url, "log", "r")
    assert log.returncode == 0, log.stderr
    for step in steps:  # every seq `log` prints is accepted by `show`
        assert re.search(rf"\b{step.seq}\b", log.stdout), log.stdout
        shown = cli(store_url, "show", "r", str(step.seq))
        assert shown.returncode == 0, shown.stderr
    assert "LLM timed out on A-17" in cli(store_url, "show", "r", str(failed.seq)).stdout
    marker = f"-- resumed: attempt 2 after a failed one (seq {failed.seq})"
    lines = log.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    assert lines[at + 1].split()[:2] == [str(retried.seq), "completed"]  # just before the rerun


def test_attempts_of_one_call_stay_bounded(mw: Middleware) -> None:
    def flaky() -> str:
        raise ConnectionError("gateway")

    for _ in range(ATTEMPTS_KEPT + 3):
        with pytest.raises(ConnectionError), mw.run("r") as run:
            run.step("pay", flaky)
    with mw.run("r") as run:
        assert run.step("pay", lambda: "paid") == "paid"
    steps = mw.store.load_steps("r")
    assert len(steps) == ATTEMPTS_KEPT + 1  # the most recent attempts, then the completed one
    assert steps[-1].status == "completed" and steps[-1].meta["attempt"] == ATTEMPTS_KEPT + 4
    assert sorted(s.meta["attempt"] for s in steps[:-1]) == list(range(4, ATTEMPTS_KEPT + 4))


async def test_async_calls_keep_their_attempts_too(mw: Middleware) -> None:
    calls: list[int] = []

    async def fetch() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("slow")
        return "ok"

    with pytest.raises(TimeoutError):
        async with mw.run("r") as run:
            await run.step("fetch", fetch)
    async with mw.run("r") as run:
        assert await run.step("fetch", fetch) == "ok"
    assert [s.status for s in await mw.store.aload_steps("r")] == ["failed", "completed"]


def test_export_and_import_carry_attempts(
    mw: Middleware,
    store_url: str,
    tmp_path: Path,
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the CLI needs a store another process can open")
    tries: list[int] = []

    def charge() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("gateway")
        return "paid"

    with pytest.raises(ConnectionError), mw.run("r") as run:
        run.step("charge", charge)
    with mw.run("r") as run:
        run.step("charge", charge)
    doc = tmp_path / "r.json"
    assert cli(store_url, "export", "r", "-o", str(doc)).returncode == 0
    imported = cli(store_url, "import", str(doc), "--run-id", "copy")
    assert imported.returncode == 0, imported.stderr
    original = mw.store.load_steps("r")
    copy = [s for s in mw.store.load_steps("copy") if s.key != "document:run"]
    assert [(s.key, s.status, s.seq) for s in copy] == [(s.key, s.status, s.seq) for s in original]
    assert copy[0].meta["error"]["message"] == "gateway"
    with mw.run("copy") as run:  # the copy replays the completed attempt only
        assert run.step("charge", charge) == "paid"
    assert len(tries) == 2
