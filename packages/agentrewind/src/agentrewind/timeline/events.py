"""Timeline state-change events: in-process, or Redis pub/sub, or PostgreSQL LISTEN/NOTIFY.

On Redis every change is published with a plain `PUBLISH` (it reaches subscribers on any node of
a Cluster); on PostgreSQL with `pg_notify` (delivered on commit). Subscribers receive their own
process's changes through the same channel, so a callback sees each change once whatever
process made it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..stores import Store

__all__ = [
    "Subscription",
    "TimelineEvent",
    "has_local_subscribers",
    "is_remote",
    "notice",
    "notifies_in_write",
    "publish",
    "subscribe",
]

log = logging.getLogger("agentrewind.timeline")


@dataclasses.dataclass(frozen=True, slots=True)
class TimelineEvent:
    """A change of a timeline: a checkpoint, rollback, branch, switch or merge.

    Attributes:
        timeline: The timeline's name.
        kind: `checkpoint`, `rollback`, `branch`, `switch`, `merge` or `delete_branch`.
        branch: The branch that changed.
        checkpoint_id: Where the branch head points now (None for a deleted branch).
        hash: Content hash of that checkpoint's state.
        at: Unix time of the change.
    """

    timeline: str
    kind: str
    branch: str
    checkpoint_id: str | None
    hash: str | None
    at: float

    @property
    def topic(self) -> str:
        """`branch:kind`, what subscription patterns match."""
        return f"{self.branch}:{self.kind}"

    def matches(self, pattern: str) -> bool:
        """True when `pattern` (a glob) matches the topic or the branch name."""
        return fnmatch.fnmatchcase(self.topic, pattern) or fnmatch.fnmatchcase(self.branch, pattern)


Callback = Callable[[TimelineEvent], Any]


class Subscription:
    """A registered callback; `close()` (or leaving its `with` block) stops delivery."""

    def __init__(self, key: tuple[Any, ...], pattern: str, callback: Callback) -> None:
        self.key = key
        self.pattern = pattern
        self.callback = callback
        self.closed = False
        self._close_hook: Callable[[], None] | None = None

    def deliver(self, event: TimelineEvent) -> None:
        if self.closed or not event.matches(self.pattern):
            return
        try:
            self.callback(event)
        except Exception:
            log.exception("timeline subscriber %r failed on %s", self.callback, event.topic)

    def close(self) -> None:
        """Stop delivering events to the callback."""
        if self.closed:
            return
        self.closed = True
        with _LOCK:
            subs = _LOCAL.get(self.key)
            if subs is not None and self in subs:
                subs.remove(self)
        if self._close_hook is not None:
            self._close_hook()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_LOCK = threading.Lock()
_LOCAL: dict[tuple[Any, ...], list[Subscription]] = {}


def _store_key(store: Store, timeline: str) -> tuple[Any, ...]:
    space = getattr(store, "_space", None)
    if store.scheme == "memory" and space is not None:
        return ("memory", id(space), store.namespace, timeline)
    db = getattr(store, "db", None)
    where = str(getattr(db, "path", "")) or store.url
    return (store.scheme, where, store.namespace, timeline)


def _channel(store: Any, timeline: str) -> str:
    return f"{store.prefix}:{store.namespace}:events:{{{timeline}}}"


def is_remote(store: Store) -> bool:
    """True when changes travel through the server (publishing is network I/O)."""
    if store.scheme == "postgresql":
        return hasattr(store, "notify")
    return store.scheme == "redis" and hasattr(store, "client")


def notifies_in_write(store: Store) -> bool:
    """True when the store sends a change inside the write's transaction (on commit only)."""
    return bool(getattr(store, "notifies_in_write", False))


def notice(store: Store, event: TimelineEvent) -> tuple[str, str]:
    """`(channel, payload)` of `event` for a store that `notifies_in_write`."""
    payload = json.dumps(dataclasses.asdict(event), separators=(",", ":"))
    return store.channel(event.timeline), payload  # type: ignore[attr-defined]


def _deliver_payload(sub: Subscription, payload: str | bytes, channel: object) -> None:
    try:
        event = TimelineEvent(**json.loads(payload))
    except (ValueError, TypeError):
        log.warning("ignored a malformed timeline event on %s", channel)
        return
    sub.deliver(event)


def has_local_subscribers(store: Store, timeline: str) -> bool:
    """Cheap check so a timeline with no subscribers pays nothing per change."""
    return bool(_LOCAL.get(_store_key(store, timeline)))


def publish(store: Store, event: TimelineEvent) -> None:
    """Deliver `event` to this process's subscribers, or publish it on Redis."""
    if is_remote(store):
        payload = json.dumps(dataclasses.asdict(event), separators=(",", ":"))
        if store.scheme == "postgresql":
            store.notify(store.channel(event.timeline), payload)  # type: ignore[attr-defined]
            return
        channel = _channel(store, event.timeline)
        with store.translate_errors():  # type: ignore[attr-defined]
            store.client.publish(channel, payload)  # type: ignore[attr-defined]
        return
    subs = _LOCAL.get(_store_key(store, event.timeline))
    if subs:
        for sub in list(subs):
            sub.deliver(event)


def subscribe(store: Store, timeline: str, pattern: str, callback: Callback) -> Subscription:
    """Register `callback` for changes of `timeline` whose topic matches `pattern`.

    On Redis and PostgreSQL a background thread listens on the timeline's channel; the
    subscription is active on the server when this returns.
    """
    key = _store_key(store, timeline)
    sub = Subscription(key, pattern, callback)
    if not is_remote(store):
        with _LOCK:
            _LOCAL.setdefault(key, []).append(sub)
        return sub

    if store.scheme == "postgresql":
        channel = store.channel(timeline)  # type: ignore[attr-defined]
        sub._close_hook = store.listen(  # type: ignore[attr-defined]
            channel, lambda payload: _deliver_payload(sub, payload, channel)
        )
        return sub

    def on_message(message: dict[str, Any]) -> None:
        _deliver_payload(sub, message["data"], message.get("channel"))

    client: Any = store.client  # type: ignore[attr-defined]
    with store.translate_errors():  # type: ignore[attr-defined]
        pubsub = client.pubsub()
        pubsub.subscribe(**{_channel(store, timeline): on_message})
        pubsub.get_message(timeout=2.0)  # the subscribe confirmation: now registered
        thread = pubsub.run_in_thread(sleep_time=0.05, daemon=True)

    def stop() -> None:
        try:
            thread.stop()
            thread.join(timeout=2.0)
        except Exception:
            log.debug("closing a Redis subscription failed", exc_info=True)

    sub._close_hook = stop
    return sub
