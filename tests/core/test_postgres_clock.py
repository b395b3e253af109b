"""PostgreSQL leases run by the server's clock (issue 23, item 7), as Redis's PX does: a
client whose clock is an hour off neither holds a run for an hour nor steals a live lease."""

from __future__ import annotations

import time
import uuid

import pytest

import agentrewind

pytestmark = pytest.mark.postgres
HOUR = 3600.0


def _skewed(monkeypatch: pytest.MonkeyPatch, offset: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + offset)


def test_a_taker_whose_clock_is_ahead_cannot_steal_a_live_lease(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with agentrewind.connect(f"{postgres_url}?namespace=clk-{uuid.uuid4().hex[:8]}") as store:
        assert store.acquire_lease("r", "A", 30).acquired
        _skewed(monkeypatch, HOUR)  # B's clock is an hour ahead
        refused = store.acquire_lease("r", "B", 30)
        assert not refused.acquired and refused[1] == "A" and 25 < refused[2] <= 30
        assert not store.take_lease("r", "B", 30, holder="").acquired
        assert not store.renew_lease("r", "B", 30).acquired
        store.begin_run("r", owner="A")  # A's fenced writes still land
        with pytest.raises(agentrewind.LeaseLostError):
            store.begin_run("r", owner="B")
        with pytest.raises(agentrewind.RunLockedError):
            store.delete_run("r")  # the lease is live by the server's clock
        assert store.prune(keep_last=0).skipped == ("r",)


def test_a_holder_whose_clock_is_ahead_does_not_lock_its_run_for_an_hour(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with agentrewind.connect(f"{postgres_url}?namespace=clk-{uuid.uuid4().hex[:8]}") as store:
        _skewed(monkeypatch, HOUR)
        assert store.acquire_lease("r", "A", 0.3).acquired
        store.begin_run("r", owner="A")
        monkeypatch.undo()
        time.sleep(0.5)  # the lease ran out by the server's clock
        assert store.get_run("r").status == "crashed"  # type: ignore[union-attr]
        assert store.acquire_lease("r", "B", 30).acquired
        with pytest.raises(agentrewind.LeaseLostError):
            store.put_step(
                agentrewind.StepRecord("r", "id-x", "x", "custom", "x", "completed", 1),
                owner="A",
            )
