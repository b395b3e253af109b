"""Timelines across processes: persistence on SQLite and Redis, subscriptions through Redis
pub/sub and PostgreSQL LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import agentrewind
from agentrewind import Timeline
from redis_support import cleanup_redis as _cleanup_redis

WRITER = textwrap.dedent(
    """
    import sys, agentrewind
    tl = agentrewind.Timeline("shared", store=agentrewind.connect(sys.argv[1]))
    if sys.argv[2] == "write":
        tl.checkpoint({"step": 1}, {"confidence": 0.4}, "one", "s1")
        tl.checkpoint({"step": 2}, description="two")
        tl.rollback()
        tl.branch("alt")
        tl.checkpoint({"step": "alt"}, {"confidence": 0.9}, "alt")
        tl.switch_branch("main")
        tl.merge("alt", strategy="theirs")
    else:
        print(tl.current_branch, tl.get_state(), len(tl),
              sorted(b.name for b in tl.list_branches()), tl.history()[0].parents.__len__())
    """
)


def _url(request: pytest.FixtureRequest, kind: str, tmp_path: Path, namespace: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'tl.db'}?namespace={namespace}"
    return f"{request.getfixturevalue('redis_url')}?namespace={namespace}"


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_new_process_sees_state_branches_and_history(
    request: pytest.FixtureRequest, kind: str, tmp_path: Path, namespace: str
) -> None:
    url = _url(request, kind, tmp_path, namespace)
    store = agentrewind.connect(url)
    try:
        subprocess.run([sys.executable, "-c", WRITER, url, "write"], check=True, timeout=60)
        tl = Timeline("shared", store=store)
        assert tl.get_state() == {"step": "alt"} and tl.current_branch == "main"
        assert len(tl) == 4 and {b.name for b in tl.list_branches()} == {"main", "alt"}
        merge = tl.history()[0]
        assert merge.is_merge and merge.metadata["merged_from"] == "alt"
        assert [c.description for c in tl.history()][1:] == ["one"]
        assert "[rolled back]" in tl.visualize_tree()
        tl.checkpoint({"step": "parent-process"})
        out = subprocess.run(
            [sys.executable, "-c", WRITER, url, "read"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        expected = "main {'step': 'parent-process'} 5 ['alt', 'main'] 1"
        assert out.split() == expected.split(" ")
    finally:
        store.close()
        if kind == "redis":
            _cleanup_redis(request.getfixturevalue("redis_url"), namespace)


SUBSCRIBED_WRITER = textwrap.dedent(
    """
    import sys, agentrewind
    tl = agentrewind.Timeline("events", store=agentrewind.connect(sys.argv[1]))
    tl.checkpoint({"n": 1})
    tl.branch("side")
    tl.checkpoint({"n": 2})
    """
)


@pytest.mark.parametrize(
    "kind", ["redis", "redis-cluster", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_subscribe_across_processes(
    request: pytest.FixtureRequest, kind: str, namespace: str
) -> None:
    fixture = {"redis": "redis_url", "redis-cluster": "redis_cluster", "postgres": "postgres_url"}
    base = request.getfixturevalue(fixture[kind])
    url = f"{base}?namespace={namespace}"
    store = agentrewind.connect(url)
    tl = Timeline("events", store=store)
    got: list[agentrewind.TimelineEvent] = []
    side: list[str] = []
    done = threading.Event()

    def on_event(event: agentrewind.TimelineEvent) -> None:
        got.append(event)
        if len(got) == 3:
            done.set()

    sub = tl.subscribe("*", on_event)
    side_sub = tl.subscribe("side", lambda e: side.append(e.kind))
    try:
        subprocess.run([sys.executable, "-c", SUBSCRIBED_WRITER, url], check=True, timeout=60)
        assert done.wait(10), got
        assert [e.topic for e in got] == ["main:checkpoint", "side:branch", "side:checkpoint"]
        assert all(e.timeline == "events" for e in got)
        tl.refresh()
        assert got[-1].checkpoint_id == tl.head.id and got[-1].hash == tl.head.hash
        assert side == ["branch", "checkpoint"]
    finally:
        sub.close()
        side_sub.close()
        store.delete_run("events")
        store.close()
    before = len(got)
    with agentrewind.connect(url) as other_store:
        other = Timeline("events", store=other_store)
        other.checkpoint({"after": "close"})
        assert len(got) == before
        other.close()
        other_store.delete_run("events")


@pytest.mark.parametrize("kind", ["redis", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_async_writes_publish(
    request: pytest.FixtureRequest, kind: str, namespace: str
) -> None:
    base = request.getfixturevalue({"redis": "redis_url", "postgres": "postgres_url"}[kind])
    store = agentrewind.connect(f"{base}?namespace={namespace}")
    tl = await Timeline.aopen("aevents", store=store)
    got: list[str] = []
    done = threading.Event()

    def on_event(event: agentrewind.TimelineEvent) -> None:
        got.append(event.topic)
        if len(got) == 5:
            done.set()

    try:
        with tl.subscribe("*", on_event):
            await tl.acheckpoint({"n": 1})
            await tl.abranch("x")
            await tl.acheckpoint({"n": 2})
            await tl.aswitch_branch("main")
            merged = await tl.amerge("x", strategy="theirs")
            assert await asyncio.to_thread(done.wait, 10), got
        assert got == ["main:checkpoint", "x:branch", "x:checkpoint", "main:switch", "main:merge"]
        assert merged.is_merge and tl.get_state() == {"n": 2}
    finally:
        await tl.aclose()
        await store.adelete_run("aevents")
        await store.aclose()
