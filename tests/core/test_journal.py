"""Record/replay semantics of DESIGN §3, on every backend."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

import agentrewind
from agentrewind import (
    DivergenceError,
    DivergenceWarning,
    IncompleteStepError,
    Middleware,
    RecordedStepError,
    RunLockedError,
    SerializationError,
)


class Counter:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, x: Any) -> dict[str, Any]:
        self.calls.append(x)
        return {"x": x}


@pytest.fixture
def mw(store_url: str) -> Middleware:
    m = Middleware(store_url)
    yield m
    m.close()


def test_identical_calls_replay_by_occurrence(mw: Middleware) -> None:
    seen = []

    def roll(sides: int) -> int:
        seen.append(sides)
        return len(seen)

    with mw.run("r") as run:
        first = [run.step("roll", roll, 6) for _ in range(3)]
    with mw.run("r") as run:
        again = [run.step("roll", roll, 6) for _ in range(4)]
    assert first == [1, 2, 3]
    assert again == [1, 2, 3, 4]  # 3 replayed in order, the 4th is new
    assert len(seen) == 4


def test_changed_input_runs_and_never_gets_old_result(mw: Middleware) -> None:
    f = Counter()
    with mw.run("r") as run:
        run.step("f", f, 1)
    with pytest.warns(DivergenceWarning, match="diverged"), mw.run("r") as run:
        assert run.step("f", f, 2) == {"x": 2}
    assert f.calls == [1, 2]


def test_strict_raises_divergence_before_running(mw: Middleware) -> None:
    f = Counter()
    with mw.run("r") as run:
        run.step("f", f, 1)
    with pytest.raises(DivergenceError), mw.run("r", strict=True) as run:
        run.step("f", f, 2)
    assert f.calls == [1]


def test_no_divergence_for_new_calls_after_replay(mw: Middleware) -> None:
    f = Counter()
    with mw.run("r") as run:
        run.step("a", f, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with mw.run("r", strict=True) as run:
            run.step("a", f, 1)
            run.step("b", f, 2)
    assert f.calls == [1, 2]


def test_failure_releases_occurrence_so_retry_replays(mw: Middleware) -> None:
    attempts = {"n": 0}

    def flaky() -> str:
        attempts["n"] += 1
        if attempts["n"] == 2:
            raise TimeoutError("rate limited")
        return f"ok{attempts['n']}"

    with mw.run("r") as run:
        assert run.step("call", flaky) == "ok1"
        with pytest.raises(TimeoutError):
            run.step("call", flaky)
        assert run.step("call", flaky) == "ok3"  # retry takes occurrence #1 again
        assert run.metrics.failures == 1
    with mw.run("r") as run:
        assert [run.step("call", flaky), run.step("call", flaky)] == ["ok1", "ok3"]
        assert run.metrics.replay_hits == 2
    assert attempts["n"] == 3


def test_failed_step_is_not_journaled_as_result(mw: Middleware) -> None:
    calls = []

    def boom() -> None:
        calls.append(1)
        raise ValueError("bad tool output")

    for _ in range(2):
        with pytest.raises(ValueError), mw.run("r") as run:
            run.step("boom", boom)
    assert len(calls) == 2
    failed = [s for s in mw.store.load_steps("r") if s.status == "failed"]
    assert len(failed) == 2  # both attempts are kept, each with its error
    for step in failed:
        error = step.meta["error"]
        assert (error["type"], error["message"]) == ("ValueError", "bad tool output")
        assert "raise ValueError" in error["traceback"]
    assert mw.store.get_run("r").status == "failed"  # type: ignore[union-attr]


def test_record_failures_replays_the_error(store_url: str) -> None:
    mw = Middleware(store_url, record_failures=True)
    calls = []

    def boom() -> None:
        calls.append(1)
        raise ValueError("deterministic")

    with pytest.raises(ValueError), mw.run("r") as run:
        run.step("boom", boom)
    with pytest.raises(RecordedStepError, match="ValueError: deterministic"), mw.run("r") as run:
        run.step("boom", boom)
    assert calls == [1]
    mw.close()


def _abandon_started(mw: Middleware, run_id: str, effects: list[str]) -> None:
    """Simulate a crash inside a step: `started` written, never completed."""
    with mw.run(run_id) as run:
        call = run.begin("custom", "charge", {"args": [], "kwargs": {}}, side_effects=True)
        call.start()
        effects.append("charged")


@pytest.mark.parametrize("policy", ["rerun", "skip", "raise"])
def test_started_not_completed_follows_policy(mw: Middleware, policy: str) -> None:
    effects: list[str] = []
    _abandon_started(mw, "r", effects)
    assert [s.status for s in mw.store.load_steps("r")] == ["started"]

    def charge() -> str:
        effects.append("charged")
        return "receipt"

    with mw.run("r", on_incomplete=policy) as run:  # type: ignore[arg-type]
        if policy == "raise":
            with pytest.raises(IncompleteStepError, match="started in an earlier attempt"):
                run.step("charge", charge)
        elif policy == "rerun":  # it may charge twice: said at this line
            with pytest.warns(agentrewind.RerunWarning, match="charge") as seen:
                assert run.step("charge", charge) == "receipt"
            assert seen[0].filename == __file__
        else:
            assert run.step("charge", charge) is None
    assert effects == (["charged", "charged"] if policy == "rerun" else ["charged"])
    if policy == "rerun":
        steps = mw.store.load_steps("r")  # the killed attempt is kept, linked to its rerun
        assert [(s.key, s.status) for s in steps] == [
            (steps[1].key + "@1", "started"),
            (steps[1].key, "completed"),
        ]
        assert steps[0].meta["replaced_by"] == steps[1].step_id
        assert steps[1].meta["replaces"]["step_id"] == steps[0].step_id
        assert steps[1].meta["resumed"]["why"] == "crashed"
        assert mw.metrics("r").reruns == 1


@pytest.mark.parametrize("policy", ["rerun", "skip", "raise"])
def test_the_started_marker_waits_for_the_disk_only_when_a_resume_acts_on_it(
    tmp_path: Any, policy: str
) -> None:
    """Under `rerun` a lost marker changes nothing (the step runs again either way)."""
    mw = Middleware(f"sqlite:///{tmp_path / 'full.db'}?durability=full")
    writes: list[tuple[str, bool]] = []
    put_step = mw.store.put_step

    def spy(record: Any, *, owner: str | None = None, durable: bool = True) -> None:
        writes.append((record.status, durable))
        put_step(record, owner=owner, durable=durable)

    mw.store.put_step = spy  # type: ignore[method-assign]
    try:
        with mw.run("r", on_incomplete=policy) as run:  # type: ignore[arg-type]
            assert run.step("charge", lambda: "receipt") == "receipt"
            conn = mw.store.db.connection()  # type: ignore[attr-defined]
            assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL again
        assert writes == [("started", policy != "rerun"), ("completed", True)]
        assert [s.status for s in mw.store.load_steps("r")] == ["completed"]
    finally:
        mw.close()


def test_idempotency_key_is_stable_across_attempts(mw: Middleware) -> None:
    keys: list[str] = []

    def pay() -> str:
        keys.append(agentrewind.idempotency_key())
        if len(keys) == 1:
            raise ConnectionError("gateway")
        return "paid"

    with pytest.raises(ConnectionError), mw.run("r") as run:
        run.step(
            "pay",
            pay,
        )
    with mw.run("r") as run:
        run.step("pay", pay)
        run.step("other", lambda: keys.append(agentrewind.idempotency_key()))
    assert keys[0] == keys[1] and keys[1] != keys[2]
    assert len(keys[0]) == 32
    with pytest.raises(agentrewind.AgentRewindError, match="inside a recorded step"):
        agentrewind.idempotency_key()


def test_unserializable_output_is_clear_and_run_goes_on(mw: Middleware) -> None:
    class Conn:
        pass

    with mw.run("r") as run:
        with pytest.raises(SerializationError) as info:
            run.step("open", lambda: {"conn": Conn()})
        assert info.value.path == "$.conn"
        assert run.step("next", lambda: 5) == 5
    steps = mw.store.load_steps("r")
    assert {s.name: s.status for s in steps} == {"open": "started", "next": "completed"}
    with mw.run("r") as run:  # the failed step reruns; nothing half-written was replayed
        with pytest.warns(agentrewind.RerunWarning):  # it ran before: it runs again
            assert run.step("open", lambda: {"conn": "dsn"}) == {"conn": "dsn"}
        assert run.step("next", lambda: 6) == 5


def test_unserializable_argument_names_the_path(mw: Middleware) -> None:
    with mw.run("r") as run, pytest.raises(SerializationError) as info:
        run.step("f", lambda c: c, object())
    assert info.value.path == "$.args[0]"


def test_metrics_seconds_saved(mw: Middleware) -> None:
    import time

    with mw.run("r") as run:
        run.step("slow", time.sleep, 0.05)
    with mw.run("r") as run:
        run.step("slow", time.sleep, 0.05)
        assert run.metrics.replay_hits == 1 and run.metrics.seconds_saved >= 0.05
    m = mw.metrics("r")
    assert m.steps == 1 and m.replay_hits == 1 and m.seconds_saved >= 0.05


def test_decorator_sync_and_outside_run(mw: Middleware) -> None:
    f = Counter()

    @mw.step("double")
    def double(x: int) -> int:
        f(x)
        return 2 * x

    @mw.step
    def plain(x: int) -> int:
        return x

    assert double(1) == 2  # no run: plain call
    with mw.run("r"):
        assert double(2) == 4 and plain(7) == 7
    with mw.run("r"):
        assert double(2) == 4
    assert f.calls == [1, 2]


def test_decorator_custom_key(mw: Middleware) -> None:
    f = Counter()

    @mw.step("fetch", key=lambda customer, session: customer)
    def fetch(customer: str, session: object) -> dict[str, Any]:
        return f(customer)

    with mw.run("r"):
        fetch("c1", object())
    with mw.run("r"):
        assert fetch("c1", object()) == {"x": "c1"}
    assert f.calls == ["c1"]


async def test_async_run_and_steps(mw: Middleware) -> None:
    f = Counter()

    async def fetch(x: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return f(x)

    @mw.step("adouble")
    async def adouble(x: int) -> int:
        f(x * 100)
        return 2 * x

    async with mw.run("r") as run:
        assert await run.step("fetch", fetch, 1) == {"x": 1}
        assert await adouble(3) == 6
        assert run.step("sync", lambda: 9) == 9
    async with mw.run("r") as run:
        assert await run.step("fetch", fetch, 1) == {"x": 1}
        assert await adouble(3) == 6
        assert run.metrics.replay_hits == 2
    assert f.calls == [1, 300]


async def test_async_failure_and_idempotency(mw: Middleware) -> None:
    keys = []

    async def pay() -> str:
        keys.append(agentrewind.idempotency_key())
        if len(keys) == 1:
            raise ConnectionError("down")
        return "ok"

    with pytest.raises(ConnectionError):
        async with mw.run("r") as run:
            await run.step("pay", pay)
    async with mw.run("r") as run:
        assert await run.step("pay", pay) == "ok"
    assert keys[0] == keys[1]


def test_second_owner_gets_run_locked(store_url: str) -> None:
    a, b = Middleware(store_url), Middleware(store_url)
    with a.run("r"), pytest.raises(RunLockedError, match="another process"):
        b.run("r").__enter__()
    with b.run("r") as run:  # released on exit
        assert run.run_id == "r"
    a.close()
    b.close()


def test_reentrant_same_run(mw: Middleware) -> None:
    with mw.run("r") as outer, mw.run("r") as inner:
        assert inner is outer


def test_new_run_id_is_generated(mw: Middleware) -> None:
    with mw.run() as run:
        run.step("a", lambda: 1)
    assert len(run.run_id) == 32
    assert mw.store.get_run(run.run_id) is not None


def test_ttl_on_run(mw: Middleware) -> None:
    with mw.run("r", ttl=3600) as run:
        run.step("a", lambda: 1)
    info = mw.store.get_run("r")
    assert (
        info is not None
        and info.expires_at is not None
        and info.expires_at > info.updated_at + 3000
    )


def test_parent_links_form_a_chain(mw: Middleware) -> None:
    with mw.run("r") as run:
        for i in range(3):
            run.step(f"s{i}", lambda: None)
    steps = mw.store.load_steps("r")
    assert steps[0].parent_id is None
    assert [s.parent_id for s in steps[1:]] == [steps[0].step_id, steps[1].step_id]


def test_next_seq_and_mark_consumed(mw: Middleware) -> None:
    f = Counter()
    with mw.run("r") as run:
        run.step("a", f, 1)
        first = run.next_seq()
        assert run.next_seq() == first + 1
    with mw.run("r", strict=True) as run:
        recorded = [s.key for s in mw.store.load_steps("r")]
        assert [r.key for r in run.records()] == recorded  # what open loaded, no second read
        run.mark_consumed(recorded)
        run.step("a", f, 2)  # no DivergenceError: the recorded call was marked consumed
    assert f.calls == [1, 2]
