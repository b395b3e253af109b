"""One owner per run across processes: a second driver is refused fast; expiry hands over."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import backend_url, spawn, wait_line

import agentrewind


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    with backend_url(request.param, tmp_path, redis_url) as u:
        yield u


def _steps(run: agentrewind.Run) -> list[int]:
    return [run.step("before", lambda i: i, 1), run.step("before", lambda i: i, 2)]


def test_second_process_is_refused_within_a_second_then_proceeds(url: str) -> None:
    holder = spawn("hold", url, "shared-run", "30", stdin=True)
    try:
        wait_line(holder, "ready")
        mw = agentrewind.Middleware(url)
        t0 = time.perf_counter()
        with pytest.raises(agentrewind.RunLockedError) as info, mw.run("shared-run"):
            pytest.fail("the second driver must not enter the run")
        refused_in = time.perf_counter() - t0
        assert refused_in < 1.0, f"RunLockedError took {refused_in:.3f}s"
        assert info.value.run_id == "shared-run"
        assert f":{holder.pid}:" in info.value.owner
        assert 0 < info.value.expires_in <= 30
        print(f"RunLockedError after {refused_in * 1000:.1f} ms")

        # The refused attempt wrote nothing: the holder's two steps are all there is.
        assert [r.name for r in mw.store.load_steps("shared-run")] == ["before", "before"]

        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        wait_line(holder, "finished")
        assert holder.wait(10) == 0

        with mw.run("shared-run") as run:
            assert _steps(run) == [1, 2]
            assert run.step("after", lambda i: i, 3) == 3
            assert [e.outcome for e in run.events] == ["replayed"] * 3
        info_after = mw.store.get_run("shared-run")
        assert info_after is not None and info_after.status == "completed"
        mw.close()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


def test_expired_lease_of_a_stalled_owner_is_taken_over(url: str) -> None:
    ttl = 1.0
    holder = spawn("hold", url, "stalled-run", str(ttl), stdin=True)
    stopped = False
    try:
        wait_line(holder, "ready")
        os.kill(holder.pid, signal.SIGSTOP)  # alive, but it stops renewing its lease
        stopped = True
        t_stop = time.perf_counter()
        mw = agentrewind.Middleware(url, lease_ttl=ttl)
        with pytest.raises(agentrewind.RunLockedError), mw.run("stalled-run"):
            pytest.fail("the lease is still live")

        deadline = t_stop + ttl + 5
        while True:
            try:
                with mw.run("stalled-run") as run:
                    taken_after = time.perf_counter() - t_stop
                    assert _steps(run) == [1, 2]
                    assert run.step("after", lambda i: i * 10, 3) == 30
                break
            except agentrewind.RunLockedError:
                assert time.perf_counter() < deadline, "the expired lease was never taken over"
                time.sleep(0.05)
        # Renewed every ttl/3, so it cannot expire sooner than ttl - ttl/3 after the stop.
        assert ttl * 0.6 <= taken_after <= ttl + 1.5, taken_after
        print(f"lease taken over {taken_after:.2f}s after the owner stalled (ttl {ttl}s)")

        info_done = mw.store.get_run("stalled-run")
        assert info_done is not None and info_done.status == "completed"

        # The stalled owner wakes up: its lease keeper finds the lease gone and its next step
        # is refused, and its exit does not overwrite the status the new owner wrote.
        os.kill(holder.pid, signal.SIGCONT)
        stopped = False
        time.sleep(ttl / 3 + 0.5)  # let its lease keeper try (and fail) to renew
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        line = wait_line(holder, "lost:")
        assert "stalled-run" in line
        assert holder.wait(10) == 0
        steps = mw.store.load_steps("stalled-run")
        assert [r.name for r in steps] == ["before", "before", "after"]
        assert [r.output for r in steps] == [1, 2, 30]
        info_end = mw.store.get_run("stalled-run")
        assert info_end is not None
        assert (info_end.status, info_end.metrics) == (info_done.status, info_done.metrics)
        mw.close()
    finally:
        if stopped:
            os.kill(holder.pid, signal.SIGCONT)
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
