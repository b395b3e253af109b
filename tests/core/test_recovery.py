"""Recovery: strategies, safe_execute, @agentrewind.checkpointed, checkpoint_context."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import agentrewind
from agentrewind import (
    AlternativePathStrategy,
    CompositeStrategy,
    DegradeGracefully,
    RecoveryError,
    RetryWithBackoff,
    Timeline,
    TimelineError,
)
from agentrewind.timeline import Retry


@pytest.fixture(params=["sqlite", "redis"])
def tl(request: pytest.FixtureRequest, tmp_path, namespace: str):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'r.db'}?namespace={namespace}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?namespace={namespace}"
    store = agentrewind.connect(url)
    timeline = Timeline("agent", store=store)
    yield timeline
    timeline.close()  # frees its lease: a delete skips a timeline that is being written
    store.delete_run("agent")
    store.close()


@pytest.fixture(params=["sync", "async"])
def safe(request: pytest.FixtureRequest, tl: Timeline):  # type: ignore[no-untyped-def]
    """`tl.safe_execute` or `tl.asafe_execute`, awaited either way."""

    async def run(*args: Any, **kwargs: Any) -> Any:
        if request.param == "sync":
            return tl.safe_execute(*args, **kwargs)
        return await tl.asafe_execute(*args, **kwargs)

    return run


def test_retry_with_backoff_delays_and_types() -> None:
    waits: list[float] = []
    s = RetryWithBackoff(base_delay=0.5, max_delay=1.5, jitter=False, sleep=waits.append)
    state = {"q": 1}
    assert s.apply(state, TimeoutError("slow"), 0) == {
        "q": 1,
        "_retry_metadata": {"strategy": "backoff", "attempt": 1, "delay_applied": 0.5},
    }
    s.apply(state, ConnectionError(), 1)
    s.apply(state, ConnectionError(), 5)
    assert waits == [0.5, 1.0, 1.5] and state == {"q": 1}  # capped; input not mutated
    assert s.apply(state, ValueError("logic"), 0) is None and waits == [0.5, 1.0, 1.5]
    jittered = RetryWithBackoff(base_delay=1.0, jitter=True)
    assert all(0.5 <= jittered.delay(0) < 1.5 for _ in range(50))
    with pytest.raises(ValueError):
        RetryWithBackoff(base_delay=-1)


def test_alternative_degrade_and_composite() -> None:
    alt = AlternativePathStrategy(
        alternatives=[lambda st, err: {**st, "approach": "b"}, lambda st, err: None],
        state_modifiers={"careful": True},
    )
    assert alt.can_handle(KeyError())
    assert alt.apply({"x": 1}, KeyError("k"), 0) == {"x": 1, "careful": True, "approach": "b"}
    second = alt.apply({"x": 1}, KeyError("k"), 1)
    assert second == {
        "x": 1,
        "careful": True,
        "_alternative_path": {"attempt": 2, "original_error": "'k'"},
    }
    degrade = DegradeGracefully()
    assert degrade.apply({"x": 1}, RuntimeError("big"), 0)["_quality"] == "reduced"
    assert degrade.apply({"x": 1}, RuntimeError("big"), 9)["_quality"] == "fallback"
    assert degrade.apply({"x": 1}, ValueError(), 0) is None
    combo = CompositeStrategy([DegradeGracefully(), RetryWithBackoff(base_delay=0, jitter=False)])
    assert combo.can_handle(TimeoutError()) and not combo.can_handle(KeyError())
    assert "_quality" in combo.apply({}, TimeoutError(), 0)  # the first that handles it decides
    assert "_retry_metadata" in combo.apply({}, OSError(), 0)
    assert combo.apply({}, KeyError(), 0) is None


async def test_safe_execute_retries_with_strategy_and_keeps_failures(tl: Timeline, safe) -> None:  # type: ignore[no-untyped-def]
    seen: list[dict[str, object]] = []

    def flaky(state: dict[str, object]) -> dict[str, object]:
        seen.append(state)
        if len(seen) < 3:
            raise TimeoutError(f"attempt {len(seen)}")
        return {"answer": 42, "quality": state.get("_quality")}

    result, cp = await safe(
        flaky, {"q": "?"}, "answer", max_retries=3, strategy=DegradeGracefully()
    )
    assert result == {"answer": 42, "quality": "minimal"}
    assert cp.state == result and cp.metadata["status"] == "success" and cp.metadata["attempt"] == 3
    assert seen[0] == {"q": "?"} and seen[1]["_quality"] == "reduced"
    failed = [c for c in tl.checkpoints() if c.failed]
    assert len(failed) == 2 and all(tl.status(c.id) == "failed" for c in failed)
    assert "attempt 1" in failed[0].metadata["error"]
    pre = tl.history()[1]
    assert pre.description == "Pre-execution: answer" and cp.parent_id == pre.id


async def test_safe_execute_wraps_non_dict_results_and_stops_on_unhandled(
    tl: Timeline, safe
) -> None:  # type: ignore[no-untyped-def]
    result, cp = await safe(lambda s: 7, {"x": 1}, "seven")
    assert result == 7 and cp.state == {"result": 7}
    calls = []

    def bad(state):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise ValueError("logic error")

    with pytest.raises(RecoveryError, match="failed after 1 attempt") as info:
        await safe(bad, {"x": 1}, "bad", max_retries=5, strategy=RetryWithBackoff(0))
    assert len(calls) == 1  # the strategy cannot handle ValueError: no pointless retries
    assert isinstance(info.value.__cause__, ValueError) and isinstance(info.value, RuntimeError)
    assert tl.head.id == info.value.checkpoint_id and tl.get_state() == {"x": 1}


async def test_safe_execute_fallback_explores_a_branch_and_merges_back(tl: Timeline, safe) -> None:  # type: ignore[no-untyped-def]
    def broken(state):  # type: ignore[no-untyped-def]
        raise ConnectionError("down")

    result, cp = await safe(
        broken, {"x": 1}, "fetch", max_retries=2, fallback=lambda s: {"cached": True}
    )
    assert result == {"cached": True} and tl.current_branch == "main"
    assert cp.is_merge and cp.state == {"cached": True} and tl.get_state() == {"cached": True}
    branches = {b.name for b in tl.list_branches()}
    assert any(name.startswith("fallback-") for name in branches)
    assert tl.metrics["total_recoveries"] == 1 and tl.metrics["errors_caught"] == 2

    def also_broken(state):  # type: ignore[no-untyped-def]
        raise KeyError("nope")

    with pytest.raises(RecoveryError, match="fallback failed"):
        await safe(broken, {"y": 2}, "again", max_retries=1, fallback=also_broken)
    assert tl.current_branch == "main" and tl.get_state() == {"y": 2}
    with pytest.raises(ValueError):
        await safe(broken, {}, max_retries=0)


def test_step_decorator_sync_retries_and_rolls_back(tl: Timeline) -> None:
    attempts = []

    @agentrewind.checkpointed("enrich", timeline=tl, max_retries=2)
    def enrich(state: dict[str, int]) -> dict[str, int]:
        attempts.append(state)
        if len(attempts) == 1:
            raise TimeoutError("once")
        return {**state, "enriched": 1}

    assert enrich({"a": 1}) == {"a": 1, "enriched": 1}
    descriptions = [c.description for c in tl.history()]
    assert descriptions == ["After: enrich", "Before: enrich"]
    assert [c.failed for c in tl.checkpoints()] == [False, True, False]
    assert tl.history()[0].metadata["attempt"] == 2

    @agentrewind.checkpointed(timeline=tl)
    def always_fails(state: dict[str, int]) -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        always_fails({"b": 2})
    assert tl.get_state() == {"b": 2} and tl.head.description.startswith("Before: ")


async def test_step_decorator_async(tl: Timeline) -> None:
    @agentrewind.checkpointed("think", timeline=tl)
    async def think(state: dict[str, int]) -> int:
        return state["n"] * 2

    assert await think({"n": 21}) == 42
    assert tl.get_state() == {"result": 42} and tl.history()[1].state == {"n": 21}


def test_step_decorator_by_name_uses_the_registry(tmp_path, namespace: str) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'reg.db'}?namespace={namespace}"

    @agentrewind.checkpointed("named", timeline="registry-tl", store=url)
    def named(state: dict[str, int]) -> dict[str, int]:
        return {"done": state["n"]}

    named({"n": 3})
    tl = agentrewind.get_timeline("registry-tl", url)
    assert tl is agentrewind.get_timeline("registry-tl", url)
    assert Timeline("registry-tl", store=url).get_state() == {"done": 3}


async def test_checkpoint_context(tl: Timeline) -> None:
    tl.checkpoint({"draft": "v1"})
    with agentrewind.checkpoint_context("edit", timeline=tl) as ctx:
        assert ctx.state == {"draft": "v1"}
        ctx.state["draft"] = "v2"
    assert tl.get_state() == {"draft": "v2"} and ctx.end is not None
    with pytest.raises(RuntimeError), agentrewind.checkpoint_context("risky", timeline=tl) as ctx:
        ctx.state["draft"] = "broken"
        raise RuntimeError("boom")
    assert tl.get_state() == {"draft": "v2"} and tl.head.id == ctx.start.id
    assert any(c.failed and "boom" in c.metadata["error"] for c in tl.checkpoints())
    async with agentrewind.checkpoint_context("async", timeline=tl, state={"s": 1}) as actx:
        actx.state["s"] = 2
    assert tl.get_state() == {"s": 2}


def test_strategies_plan_without_waiting() -> None:
    waits: list[float] = []
    backoff = RetryWithBackoff(base_delay=0.25, jitter=False, sleep=waits.append)
    retry = backoff.plan({"q": 1}, TimeoutError(), 1)
    assert retry is not None and retry.delay == 0.5 and retry.sleep == waits.append
    assert retry.state["_retry_metadata"]["attempt"] == 2 and waits == []  # nothing waited yet
    assert retry.wait() == retry.state and waits == [0.5]
    composite = CompositeStrategy([DegradeGracefully(error_types=(KeyError,)), backoff])
    planned = composite.plan({}, ConnectionError(), 0)
    assert planned is not None and planned.delay == 0.25 and waits == [0.5]
    degraded = DegradeGracefully().plan({"a": 1}, RuntimeError("x"), 0)  # default plan: apply
    assert degraded == Retry({**DegradeGracefully().apply({"a": 1}, RuntimeError("x"), 0)})
    assert degraded.delay == 0 and DegradeGracefully().plan({}, KeyError(), 0) is None


async def test_asafe_execute_awaits_async_code_and_backs_off_without_blocking(
    tl: Timeline,
) -> None:
    calls: list[dict[str, object]] = []

    async def fetch(state: dict[str, object]) -> dict[str, object]:
        calls.append(state)
        await asyncio.sleep(0)
        if len(calls) < 3:
            raise ConnectionError(f"reset {len(calls)}")
        return {"rows": 3}

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    background = asyncio.create_task(ticker())
    started = time.perf_counter()
    strategy = RetryWithBackoff(base_delay=0.1, jitter=False)
    result, cp = await tl.asafe_execute(fetch, {"q": 1}, "fetch", strategy=strategy)
    elapsed = time.perf_counter() - started
    background.cancel()
    assert result == {"rows": 3} and cp.state == result and len(calls) == 3
    assert [c.get("_retry_metadata", {}).get("attempt") for c in calls] == [None, 1, 2]
    assert elapsed >= 0.3 and ticks >= 10  # waited 0.1 + 0.2 s on asyncio.sleep: loop stayed live
    assert len([c for c in tl.checkpoints() if c.failed]) == 2

    waited: list[float] = []

    async def record_sleep(seconds: float) -> None:
        waited.append(seconds)

    async def down(state: dict[str, object]) -> None:
        raise TimeoutError("down")

    async def cached(state: dict[str, object]) -> dict[str, object]:
        return {"cached": state["q"]}

    custom = RetryWithBackoff(base_delay=2.0, jitter=False, sleep=record_sleep)
    result, merged = await tl.asafe_execute(
        down, {"q": 2}, "down", max_retries=2, fallback=cached, strategy=custom
    )
    assert waited == [2.0] and result == {"cached": 2} and merged.is_merge
    assert tl.current_branch == "main" and tl.get_state() == {"cached": 2}


async def test_sync_safe_execute_refuses_async_code(tl: Timeline) -> None:
    ran: list[int] = []

    async def work(state: dict[str, int]) -> int:
        ran.append(1)
        return 1

    with pytest.raises(TimelineError, match="asafe_execute"):
        tl.safe_execute(work, {"x": 1}, "async work", max_retries=3, fallback=work)
    assert ran == [] and not any(c.failed for c in tl.checkpoints())  # not taken as a failure
    assert tl.metrics["errors_caught"] == 0


async def test_step_decorator_async_retries_and_rolls_back(tl: Timeline) -> None:
    attempts: list[dict[str, int]] = []

    @agentrewind.checkpointed("fetch", timeline=tl, max_retries=3)
    async def fetch(state: dict[str, int]) -> dict[str, int]:
        attempts.append(state)
        await asyncio.sleep(0)
        if len(attempts) < 3:
            raise TimeoutError("slow")
        return {**state, "fetched": 1}

    assert await fetch({"a": 1}) == {"a": 1, "fetched": 1}
    assert [c.failed for c in tl.checkpoints()] == [False, True, True, False]
    assert [c.description for c in tl.history()] == ["After: fetch", "Before: fetch"]

    @agentrewind.checkpointed("never", timeline=tl)
    async def never(state: dict[str, int]) -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        await never({"b": 2})
    assert tl.get_state() == {"b": 2} and tl.head is not None
    assert tl.head.description == "Before: never"
