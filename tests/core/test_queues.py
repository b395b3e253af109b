"""Durable queues (issue 27) through the public API, on every store.

The storage rule (limits, order, lapsed slots) is in test_queue_store.py; workers in other
processes, SIGKILLs and the limits across processes in tests/reliability/test_queue_workers.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import agentrewind
from agentrewind.cli import main
from agentrewind.errors import (
    QueueDeduplicatedError,
    QueueError,
    RecordedStepError,
    RunCancelledError,
    SerializationError,
    WorkflowError,
    WorkflowNotFoundError,
)


@pytest.fixture
def mw(store_url: str) -> Iterator[agentrewind.Middleware]:
    middleware = agentrewind.Middleware(store_url, lease_ttl=5)
    yield middleware
    middleware.close()


def _app(mw: agentrewind.Middleware) -> tuple[list[Any], Any]:
    calls: list[Any] = []

    @mw.workflow("double")
    def double(x: int) -> int:
        calls.append(x)
        if x < 0:
            raise ValueError(f"negative: {x}")
        return 2 * x

    return calls, double


def _serve(mw: agentrewind.Middleware, *queues: str, **kw: Any) -> Any:
    return mw.serve(list(queues), recover=False, once=True, poll=0.01, **kw)


def test_enqueue_records_a_queued_run_and_returns_at_once(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("work")
    handle = q.enqueue(double, 21, run_id="job-1")
    assert handle.run_id == "job-1" and handle.status() == "queued" and calls == []
    info = mw.store.get_run("job-1")
    assert info is not None and info.status == "queued"
    assert "job-1" in [r.run_id for r in mw.store.list_runs() if r.status == "queued"]
    assert q.stats().queued == 1
    # A queued run is not a crashed one: recovery leaves it to its queue.
    assert mw.recover().outcomes == []
    worker = _serve(mw, "work")
    assert worker.done == 1 and calls == [21]
    assert handle.status() == "completed" and handle.result(timeout=1) == 42
    assert q.stats().queued == q.stats().in_flight == 0


def test_a_retried_enqueue_of_the_same_run_queues_nothing(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("work")
    assert q.enqueue(double, 1, run_id="r").run_id == "r"
    assert q.enqueue(double, 1, run_id="r").run_id == "r"
    assert q.stats().queued == 1
    other = mw.queue("other")
    with pytest.raises(WorkflowError, match="queue 'work'"):
        other.enqueue(double, 1, run_id="r")
    _serve(mw, "work")
    assert calls == [1]


def test_a_failed_workflow_raises_its_recorded_error(mw: agentrewind.Middleware) -> None:
    _, double = _app(mw)
    q = mw.queue("work")
    handle = q.enqueue(double, -3)
    _serve(mw, "work")
    assert handle.status() == "failed"
    with pytest.raises(RecordedStepError, match="negative: -3"):
        handle.result(timeout=1)
    assert q.stats().queued == 0  # a failed run leaves its queue


def test_priority_and_order_with_one_at_a_time(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("p", priority=True, concurrency=1)
    for x, p in [(1, 5), (2, 0), (3, 5), (4, 1)]:
        q.enqueue(double, x, priority=p)
    _serve(mw, "p", concurrency=1)
    assert calls == [2, 4, 1, 3]


def test_dedup_refuses_a_second_run_and_names_the_holder(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("d")
    first = q.enqueue(double, 1, dedup_id="user-7")
    with pytest.raises(QueueDeduplicatedError) as caught:
        q.enqueue(double, 2, dedup_id="user-7", run_id="second")
    assert caught.value.run_id == first.run_id and "user-7" in str(caught.value)
    assert mw.store.get_run("second") is None  # nothing queued, no run left behind
    _serve(mw, "d")
    q.enqueue(double, 3, dedup_id="user-7")  # free again once the holder ended
    _serve(mw, "d")
    assert calls == [1, 3]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"priority": 1}, "without priority=True"),
        ({"partition_key": "u"}, "not partitioned"),
        ({"delay": -1}, "delay"),
        ({"delay": float("nan")}, "delay"),
        ({"dedup_id": ""}, "dedup_id"),
    ],
)
def test_bad_enqueues_are_named_and_queue_nothing(
    mw: agentrewind.Middleware, kw: dict[str, Any], match: str
) -> None:
    _, double = _app(mw)
    q = mw.queue("bad")
    with pytest.raises(QueueError, match=match):
        q.enqueue(double, 1, run_id="never", **kw)
    assert mw.store.get_run("never") is None and q.stats().queued == 0


def test_unstorable_arguments_and_unknown_workflows_queue_nothing(
    mw: agentrewind.Middleware,
) -> None:
    _, double = _app(mw)
    q = mw.queue("bad")
    with pytest.raises(SerializationError, match="cannot be stored"):
        q.enqueue(double, object(), run_id="never")
    with pytest.raises(WorkflowNotFoundError, match="nope"):
        q.enqueue("nope", 1, run_id="never")
    assert mw.store.get_run("never") is None and q.stats().queued == 0
    with pytest.raises(QueueError, match="partition_key"):
        mw.queue("users", partitioned=True).enqueue(double, 1)


@pytest.mark.parametrize(
    "kw",
    [
        {"concurrency": 0},
        {"concurrency": -2},
        {"worker_concurrency": 0},
        {"limiter": (0, 1.0)},
        {"limiter": (3, -1.0)},
    ],
)
def test_bad_limits_are_named(kw: dict[str, Any]) -> None:
    # Checked before any store is touched: one store is enough.
    with pytest.raises(QueueError):
        agentrewind.Middleware("memory://limits").queue("q", **kw)


def test_a_queue_is_declared_once_per_process(mw: agentrewind.Middleware) -> None:
    assert mw.queue("q", concurrency=2) is mw.queue("q", concurrency=2)
    with pytest.raises(QueueError, match="already declared"):
        mw.queue("q", concurrency=3)
    with pytest.raises(QueueError, match="bad queue name"):
        mw.queue("a:b")
    with pytest.raises(QueueError, match="unknown queue 'nope'"):
        mw.serve(["nope"], once=True)


def test_cancel_a_queued_run(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("c")
    handle = q.enqueue(double, 5, dedup_id="k")
    assert handle.cancel() is True
    assert handle.status() == "cancelled" and q.stats().queued == 0
    with pytest.raises(RunCancelledError):
        handle.result(timeout=1)
    q.enqueue(double, 6, dedup_id="k")  # the cancelled run no longer holds the id
    _serve(mw, "c")
    assert calls == [6]
    assert mw.resume(handle.run_id) == 10 and calls == [6, 5]


def test_delay_holds_a_run_back(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("later")
    q.enqueue(double, 1, delay=60)
    _serve(mw, "later")
    assert calls == [] and q.stats().delayed == 1


def test_partitions_run_one_per_key(mw: agentrewind.Middleware) -> None:
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()
    running: dict[str, int] = {}

    @mw.workflow("per_user")
    def per_user(user: str, i: int) -> None:
        with lock:
            running[user] = running.get(user, 0) + 1
            seen.append((user, running[user]))
        threading.Event().wait(0.02)
        with lock:
            running[user] -= 1

    q = mw.queue("users", concurrency=1, partitioned=True)
    for i in range(3):
        for user in ("ann", "bob"):
            q.enqueue(per_user, user, i, partition_key=user)
    _serve(mw, "users", concurrency=4)
    assert len(seen) == 6 and max(n for _, n in seen) == 1


def test_result_times_out_while_queued(mw: agentrewind.Middleware) -> None:
    _, double = _app(mw)
    handle = mw.queue("w").enqueue(double, 1)
    with pytest.raises(TimeoutError, match="still queued"):
        handle.result(timeout=0.1)


def test_async_enqueue_and_result(mw: agentrewind.Middleware) -> None:
    calls, double = _app(mw)
    q = mw.queue("a")

    async def go() -> Any:
        handle = await q.aenqueue(double, 4)
        assert await handle.astatus() == "queued"
        await asyncio.to_thread(_serve, mw, "a")
        return await handle.aresult(timeout=5)

    assert asyncio.run(go()) == 8 and calls == [4]


def test_cli_lists_queues_and_queued_runs(
    mw: agentrewind.Middleware, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the CLI opens its own store")
    _, double = _app(mw)
    q = mw.queue("cli")
    q.enqueue(double, 1, run_id="waiting-1")
    q.enqueue(double, 2, run_id="waiting-2", delay=60)
    assert main(["--store", store_url, "queues", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["queue"], row["queued"], row["delayed"], row["in_flight"]) == ("cli", 2, 1, 0)
    assert main(["--store", store_url, "queues"]) == 0
    out = capsys.readouterr().out
    assert "cli" in out and "(--app shows them)" in out
    assert main(["--store", store_url, "runs", "--status", "queued"]) == 0
    out = capsys.readouterr().out
    assert "waiting-1" in out and "waiting-2" in out
    assert main(["--store", store_url, "queues", "nope"]) == 1
    assert "no queue 'nope'" in capsys.readouterr().err


def test_a_worker_refuses_an_unknown_queue_in_one_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "qapp.py").write_text(
        "import agentrewind\n"
        f"mw = agentrewind.Middleware('sqlite:///{tmp_path / 'q.db'}')\n"
        "mw.queue('known', concurrency=1)\n"
        "mw.workflow('w', lambda: 1)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(__import__("sys").modules, "qapp", raising=False)
    assert main(["worker", "qapp:mw", "--queue", "nope", "--once"]) == 1
    err = capsys.readouterr().err
    assert "unknown queue 'nope'" in err and "known" in err and "Traceback" not in err
    assert main(["worker", "qapp:mw", "--queue", "known", "--once", "--poll", "0.01"]) == 0
    assert "queues known" in capsys.readouterr().out
    assert main(["--store", f"sqlite:///{tmp_path / 'q.db'}", "queues", "known", "--app",
                 "qapp:mw"]) == 0  # fmt: skip
    assert "concurrency=1" in capsys.readouterr().out


def test_worker_concurrency_caps_one_worker(mw: agentrewind.Middleware) -> None:
    lock = threading.Lock()
    running, peak = [0], [0]

    @mw.workflow("slow")
    def slow(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        threading.Event().wait(0.02)
        with lock:
            running[0] -= 1
        return i

    q = mw.queue("wc", worker_concurrency=2)
    handles = [q.enqueue(slow, i) for i in range(6)]
    worker = _serve(mw, "wc", concurrency=6)
    assert worker.done == 6 and peak[0] == 2
    assert [h.result(timeout=1) for h in handles] == list(range(6))
