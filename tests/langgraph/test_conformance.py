"""langgraph-checkpoint-conformance 0.0.2: 81 checks, async and sync API, SQLite, Redis, Cluster,
PostgreSQL; also with every `put_writes` taken as a running graph's (held for the next put)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate

from agentrewind_langgraph import RewindSaver

_SYNC = {
    "put": "aput",
    "put_writes": "aput_writes",
    "get_tuple": "aget_tuple",
    "list": "alist",
    "delete_thread": "adelete_thread",
    "delete_for_runs": "adelete_for_runs",
    "copy_thread": "acopy_thread",
    "prune": "aprune",
}


def sync_adapter(inner: RewindSaver) -> BaseCheckpointSaver[Any]:
    """A saver whose async methods call `inner`'s sync ones, so the suite covers the sync API."""
    ns: dict[str, Any] = {}

    def make(name: str) -> Any:
        if name == "list":

            async def alist(self: Any, config: Any, **kw: Any) -> AsyncIterator[Any]:
                for item in self.inner.list(config, **kw):
                    yield item

            return alist

        async def method(self: Any, *args: Any, **kw: Any) -> Any:
            return getattr(self.inner, name)(*args, **kw)

        return method

    for sync_name, async_name in _SYNC.items():
        ns[async_name] = make(sync_name)

    def __init__(self: Any, saver: RewindSaver) -> None:
        BaseCheckpointSaver.__init__(self, serde=saver.serde)
        self.inner = saver

    ns["__init__"] = __init__
    return type("SyncRewindSaver", (BaseCheckpointSaver,), ns)(inner)


class HoldingSaver(RewindSaver):
    """Takes every `put_writes` as made by a running graph, so the saver may hold the writes
    for the next `put` (see `_defer`): the suite's reads must still see them."""

    @staticmethod
    def _inside(config: Any) -> Any:
        return {**config, "configurable": {**config["configurable"], "__pregel_runtime": 1}}

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        super().put_writes(self._inside(config), writes, task_id, task_path)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        await super().aput_writes(self._inside(config), writes, task_id, task_path)


@pytest.mark.parametrize("api", ["async", "sync", "async-held", "sync-held"])
async def test_conformance_81_of_81(
    saver_url_with_cluster: str, api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver_url = saver_url_with_cluster
    if api.endswith("-held"):  # every task path counts as a triggered node's
        monkeypatch.setattr("agentrewind_langgraph._defer._PULL", "")
    made: list[RewindSaver] = []

    @checkpointer_test(name=f"RewindSaver[{api}]")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        # A fresh, empty store per capability: a new file or a new Redis namespace.
        if saver_url.startswith("sqlite"):
            url = f"sqlite:///{tmp_path / uuid.uuid4().hex}.db"
        else:
            url = f"{saver_url}-{uuid.uuid4().hex[:6]}"
        saver = (HoldingSaver if api.endswith("-held") else RewindSaver)(url)
        made.append(saver)
        try:
            yield saver if api.startswith("async") else sync_adapter(saver)
        finally:
            for thread in saver.backend.thread_ids():
                saver.delete_thread(thread)
            saver.close()

    report = await validate(factory)
    data = report.to_dict()
    results = data["results"]
    assert len(results) == 8
    assert all(r["detected"] for r in results.values()), results
    failures = [f for r in results.values() for f in r["failures"]]
    assert failures == []
    passed = sum(r["tests_passed"] for r in results.values())
    assert passed == 81
    assert report.passed_all()
    assert len(made) == 8
