"""pytest plugin: LangGraph's engine tests with their checkpointer fixtures swapped.

Loaded with `-p langgraph_upstream_plugin` into a run of langgraph's own `tests/` folder
(from its sdist). LangGraph's conftest parametrizes `sync_checkpointer` and
`async_checkpointer` over InMemorySaver, SQLite and PostgreSQL savers; this plugin replaces
both fixtures (before pytest reads the conftest) with one parameter, `memory`, so the test
ids are the same on every run:

- `AGENTREWIND_UPSTREAM_STORE` unset: the conftest's own in-memory saver (langgraph's
  `MemorySaverAssertImmutable`, an InMemorySaver that also checks stored checkpoints are
  never mutated): the baseline.
- set to a store URL: a fresh `RewindSaver` per test over that store (SQLite: a file per
  test in the URL's directory; Redis, Redis Cluster, PostgreSQL: a namespace per test),
  closed with `close()` (sync fixture) or `aclose()` (async fixture) as a user would.

Only the tests that use one of the two fixtures run (the rest do not touch a checkpointer).

The suite's graphs keep the suite's own classes in their state (`tests.agents.AgentAction`,
pydantic models, dataclasses). The baseline's serde (LangGraph's default) revives any type;
RewindSaver's refuses every type outside LangGraph's safe ones unless allowed (safe by
default, tests/langgraph/test_safe_loading.py), so each saver is given what a user whose
state holds these types passes: `allowed_msgpack_modules=` every class the suite's modules
(`tests.*`) define or import (see `_suite_types`). Nothing else is allowed, so a LangGraph
type missing from the safe list still fails here.
"""

from __future__ import annotations

import ast
import functools
import os
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

STORE = os.environ.get("AGENTREWIND_UPSTREAM_STORE")
FIXTURES = ("sync_checkpointer", "async_checkpointer")


def _url() -> tuple[str, Path | None]:
    """A fresh saver URL on the chosen store, and the SQLite file to remove after the test."""
    assert STORE is not None
    name = f"lg-{secrets.token_hex(6)}"  # not uuid4: tests mock it
    if STORE.startswith("sqlite:///"):
        path = Path(STORE.removeprefix("sqlite:///")) / f"{name}.db"
        return f"sqlite:///{path}", path
    return f"{STORE}{'&' if '?' in STORE else '?'}namespace={name}", None


def _cleanup(url: str, path: Path | None) -> None:
    if path is not None:
        for leftover in path.parent.glob(f"{path.name}*"):  # the file and its -wal, -shm
            leftover.unlink(missing_ok=True)
    elif url.startswith("redis://"):
        # our own server: drop the test's keys (on a cluster, those of the node the URL
        # names; the cluster dies with the script)
        from redis_support import cleanup_redis

        base, _, query = url.partition("?")
        cleanup_redis(base, query.rsplit("namespace=", 1)[-1])


@functools.cache  # by the first test, collection has imported every module of the suite
def _suite_types() -> list[tuple[str, str]]:
    """Every class the suite's modules (`tests.*`) define (at any depth: a test's own local
    classes are stored under their module's name) or import at module level."""
    found: set[tuple[str, str]] = set()
    root = Path.cwd() / "tests"
    for file in root.rglob("*.py"):
        dotted = ".".join(file.relative_to(root.parent).with_suffix("").parts)
        tree = ast.parse(file.read_text(errors="replace"))
        found |= {(dotted, n.name) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for name, module in list(sys.modules.items()):
        if name == "tests" or name.startswith("tests."):
            for value in list(vars(module).values()):
                if isinstance(value, type):
                    found.add((value.__module__, value.__name__))
    return sorted(found)


def _memory() -> Any:
    from tests.conftest_checkpointer import _checkpointer_memory  # langgraph's own

    return _checkpointer_memory()


@pytest.fixture(params=["memory"])
def sync_checkpointer() -> Iterator[Any]:
    if STORE is None:
        with _memory() as saver:
            yield saver
        return
    from agentrewind_langgraph import RewindSaver

    url, path = _url()
    try:
        with RewindSaver(url, allowed_msgpack_modules=_suite_types()) as saver:
            yield saver
    finally:
        _cleanup(url, path)


@pytest.fixture(params=["memory"])
async def async_checkpointer() -> AsyncIterator[Any]:
    if STORE is None:
        with _memory() as saver:
            yield saver
        return
    from agentrewind_langgraph import RewindSaver

    url, path = _url()
    try:
        async with RewindSaver(url, allowed_msgpack_modules=_suite_types()) as saver:
            yield saver
    finally:
        _cleanup(url, path)


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: object, plugin_name: str | None) -> None:
    """Swap langgraph's fixtures in its conftest before pytest reads them (at collection)."""
    ours = plugin_name and plugin_name.endswith(os.path.join("tests", "conftest.py"))
    if ours and all(hasattr(plugin, name) for name in FIXTURES):
        plugin.sync_checkpointer = sync_checkpointer  # type: ignore[attr-defined]
        plugin.async_checkpointer = async_checkpointer  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests that use a checkpointer fixture."""
    keep = [i for i in items if set(FIXTURES) & set(getattr(i, "fixturenames", ()))]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
