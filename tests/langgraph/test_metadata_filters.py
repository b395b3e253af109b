"""Metadata filters whose keys hold `"` or `\\` match exactly as in `InMemorySaver`.

On old main the SQLite saver built a JSON path with a backslash escape SQLite does not read,
so such a filter silently matched nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agentrewind_langgraph import RewindSaver

KEYS = ['say "hi"', "back\\slash", 'both\\"', "plain", "dot.ted", "$[0]"]


def _cp(i: int) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    return {"v": 4, "id": str(uuid6(clock_seq=i)), "ts": "2030-01-01T00:00:00+00:00",
            "channel_values": {}, "channel_versions": {}, "versions_seen": {},
            "updated_channels": None}  # fmt: skip


def _ids(saver: Any, flt: dict[str, Any]) -> list[int]:
    cfg = {"configurable": {"thread_id": "t"}}
    return sorted(t.metadata["n"] for t in saver.list(cfg, filter=flt))


@pytest.mark.parametrize("key", KEYS)
def test_filter_keys_with_quotes_and_backslashes(saver_url: str, key: str) -> None:
    memory = InMemorySaver()
    with RewindSaver(saver_url) as saver:
        for s in (memory, saver):
            cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            for i in range(3):
                s.put(cfg, _cp(i), {"n": i, key: "yes" if i != 1 else "no"}, {})
        for flt in ({key: "yes"}, {key: "no"}, {key: "other"}, {key: "yes", "n": 2}):
            assert _ids(saver, flt) == _ids(memory, flt), flt
        assert _ids(saver, {key: "yes"}) == [0, 2]
