"""Issue 23 ("Trust, round three"), part A: each reproduction, on every store it applies to.

Each test failed on main before its fix: a paused timeline writer re-took its lapsed lease
and overwrote the new owner's head, a document whose checkpoints' parents form a cycle was
imported (and readers then spun), and the smaller findings (viewer numbers, huge `seq`).
"""

from __future__ import annotations

import time

import pytest

import agentrewind
from agentrewind import LeaseLostError, Timeline


# -- item 2: a timeline writer paused past its lease ------------------------------------------
def test_a_timeline_writer_paused_past_its_lease_cannot_overwrite_the_new_owner(
    store_url: str,
) -> None:
    store = agentrewind.connect(store_url)
    try:
        a = Timeline("agent", store=store, lease_ttl=0.3)
        a.checkpoint({"by": "a", "n": 1})
        time.sleep(0.45)  # A is paused (SIGSTOP, GC) past its lease
        with Timeline("agent", store=store) as b:  # B takes over, checkpoints and closes
            b_cp = b.checkpoint({"by": "b", "n": 2})
        with pytest.raises(LeaseLostError, match="lost its lease"):
            a.checkpoint({"by": "a", "n": 2})  # computed from A's state before the pause
        fresh = Timeline("agent", store=store)
        assert fresh.head is not None and fresh.head.id == b_cp.id  # nothing moved
        assert [c.state["by"] for c in fresh.history()] == ["b", "a"]  # nothing written
        # A was told and its view reloaded: its next write goes on from B's head
        after = a.checkpoint({"by": "a", "n": 3})
        assert after.parent_id == b_cp.id
        a.close()
    finally:
        store.close()


def test_a_timeline_writer_idle_past_its_lease_goes_on_when_nobody_wrote(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        with Timeline("agent", store=store, lease_ttl=0.3) as a:
            first = a.checkpoint({"n": 1})
            a.branch("side")
            a.checkpoint({"n": 2})
            a.switch_branch("main")
            time.sleep(0.45)
            second = a.checkpoint({"n": 3})
            assert second.parent_id == first.id
    finally:
        store.close()


def test_a_lapsed_timeline_writer_is_refused_while_the_new_owner_holds_it(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        a = Timeline("agent", store=store, lease_ttl=0.3)
        a.checkpoint({"by": "a"})
        time.sleep(0.45)
        b = Timeline("agent", store=store)
        b.checkpoint({"by": "b"})
        with pytest.raises(LeaseLostError):
            a.checkpoint({"by": "a"})
        b.close()
        assert [c.state["by"] for c in Timeline("agent", store=store).history()] == ["b", "a"]
    finally:
        store.close()
