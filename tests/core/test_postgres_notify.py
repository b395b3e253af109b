"""PostgreSQL subscriptions: each change is a NOTIFY inside its write's transaction."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import agentrewind
from agentrewind import Timeline
from agentrewind.errors import LeaseLostError, StoreError
from postgres_support import step as rec

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


def test_a_refused_write_notifies_nobody_and_a_committed_one_once(postgres_url: str) -> None:
    store = agentrewind.connect(postgres_url, namespace=f"n-{uuid.uuid4().hex[:8]}")
    channel = store.channel("t")  # type: ignore[attr-defined]
    got: list[tuple[str, list[str]]] = []
    arrived = threading.Event()

    def on_note(payload: str) -> None:  # what a listener can read when the note arrives
        got.append((payload, [r.key for r in store.load_steps("r")]))
        arrived.set()

    stop = store.listen(channel, on_note)  # type: ignore[attr-defined]
    try:
        assert store.acquire_lease("r", "holder", 30).acquired
        with pytest.raises((LeaseLostError, StoreError)):
            store.put_steps([rec("r", "a", 1)], owner="intruder", notify=(channel, "refused"))  # type: ignore[call-arg]
        store.put_steps([rec("r", "b", 2)], owner="holder", notify=(channel, "stored"))  # type: ignore[call-arg]
        assert arrived.wait(5)
        time.sleep(0.3)  # a stray note would arrive by now
        assert got == [("stored", ["b"])]
    finally:
        stop()
        store.close()


def test_every_kind_of_change_arrives_once(postgres_url: str) -> None:
    url = f"{postgres_url}?namespace=n-{uuid.uuid4().hex[:8]}"
    with agentrewind.connect(url) as store:
        tl = Timeline("events", store=store)
        topics: list[str] = []
        six = threading.Event()

        def on_event(event: agentrewind.TimelineEvent) -> None:
            topics.append(event.topic)
            if len(topics) == 6:
                six.set()

        with tl.subscribe("*", on_event):
            first = tl.checkpoint({"n": 1})
            tl.branch("x")
            tl.checkpoint({"n": 2})
            tl.switch_branch("main")
            tl.rollback(to_checkpoint_id=first.id)
            tl.delete_branch("x")
            assert six.wait(5), topics
            time.sleep(0.3)
        assert topics == [
            "main:checkpoint",
            "x:branch",
            "x:checkpoint",
            "main:switch",
            "main:rollback",
            "x:delete_branch",
        ]
        tl.close()
