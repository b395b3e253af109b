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


def test_a_channel_name_cannot_be_computed_without_the_namespaces_secret(
    postgres_url: str,
) -> None:
    import hashlib

    ns = f"n-{uuid.uuid4().hex[:8]}"
    # What any role could compute before: the name from the schema, namespace and timeline.
    guessed = "ar_" + hashlib.sha1(f"public\0{ns}\0events".encode()).hexdigest()
    heard: list[str] = []
    with psycopg.connect(postgres_url, autocommit=True) as eavesdropper:
        eavesdropper.execute(f'LISTEN "{guessed}"')
        with agentrewind.connect(postgres_url, namespace=ns) as store:
            channel = store.channel("events")  # type: ignore[attr-defined]
            assert channel != guessed and len(channel) <= 63
            with agentrewind.connect(postgres_url, namespace=ns) as again:
                assert again.channel("events") == channel  # type: ignore[attr-defined]
            with agentrewind.connect(postgres_url, namespace=f"{ns}-2") as other:
                assert other.channel("events") != channel  # type: ignore[attr-defined]
            from agentrewind.stores.postgres import PostgresStore

            with PostgresStore(postgres_url, namespace=ns, read_only=True) as viewer:
                assert viewer.channel("events") == channel  # a read-only subscriber agrees
            with PostgresStore(postgres_url, namespace=f"{ns}-3", read_only=True) as first:
                made = first.channel("events")  # a subscriber before any publisher
            with agentrewind.connect(postgres_url, namespace=f"{ns}-3") as publisher:
                assert publisher.channel("events") == made  # type: ignore[attr-defined]
            got = threading.Event()
            stop = store.listen(channel, lambda payload: got.set())  # type: ignore[attr-defined]
            try:
                tl = Timeline("events", store=store)
                tl.checkpoint({"n": 1})
                assert got.wait(5)  # the timeline's own listeners still hear it
                tl.close()
            finally:
                stop()
        heard = [n.payload for n in eavesdropper.notifies(timeout=0.5, stop_after=1)]
    assert heard == []
