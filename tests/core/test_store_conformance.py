"""The shipped conformance suite (`agentrewind.testing`) on memory, SQLite, Redis and Cluster."""

from __future__ import annotations

import pytest

import agentrewind
from agentrewind import Store
from agentrewind.testing import StoreConformance
from redis_support import cleanup_redis


class TestStoreConformance(StoreConformance):
    @pytest.fixture(autouse=True)
    def _backend(self, store_url: str, request: pytest.FixtureRequest) -> None:
        # store_url is parametrised over every backend (tests/conftest.py); keep its base
        self.base = store_url.partition("?")[0]
        self.kind = request.node.callspec.params["store_url"]

    def open_store(self, namespace: str) -> Store:
        return agentrewind.connect(self.base, namespace=namespace)

    def close_store(self, store: Store, namespace: str) -> None:
        store.close()
        if self.kind == "redis":  # the cluster is a throwaway server of this test session
            cleanup_redis(self.base, namespace)


def test_a_store_that_breaks_the_contract_fails_the_suite(tmp_path) -> None:
    """The suite can fail: a store that lists runs oldest first is caught."""

    class Forgetful(agentrewind.MemoryStore):
        def list_runs(self, *, limit: int = 100):  # type: ignore[no-untyped-def]
            return list(reversed(super().list_runs(limit=limit)))

    suite = StoreConformance()
    suite.open_store = lambda ns: Forgetful(namespace=ns)  # type: ignore[method-assign]
    store = suite.open_store("x")
    with pytest.raises(AssertionError):
        suite.test_runs_listing_status_and_metrics(store)


def test_open_store_must_be_overridden() -> None:
    with pytest.raises(NotImplementedError, match="override open_store"):
        StoreConformance().open_store("ns")
