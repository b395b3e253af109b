"""pytest plugin: LangChain's own tests, with the outermost runnable of every call wrapped.

Loaded with `-p langchain_upstream_plugin` into a run of langchain-core's or langchain's unit
tests (see `langchain_upstream.py`). Every execution method (`invoke`, `stream`,
`astream_events`, ...) of every `Runnable` class is patched so that a call made by the test
itself, outside any runnable (no parent config) and outside a wrapped run, goes through
`agentrewind_langchain.Middleware(store).wrap(runnable)` instead, as a careful user who swapped
their runnable for the wrapped one would. Calls inside the run reach the original methods.

The store is `AGENTREWIND_UPSTREAM_STORE` (a store URL); each test journals in a namespace of
its own, opened before the test starts (so no store is opened inside a test's event loop).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

METHODS = (
    "invoke",
    "ainvoke",
    "stream",
    "astream",
    "batch",
    "abatch",
    "batch_as_completed",
    "abatch_as_completed",
    "transform",
    "atransform",
    "astream_log",
    "astream_events",
    "stream_events",
)

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("upstream_inside", default=False)
_patched: set[tuple[type, str]] = set()
_middleware: Any = None
_tests = itertools.count()


def _mw() -> Any:
    if _middleware is None:
        raise RuntimeError("langchain_upstream_plugin: no middleware outside a test")
    return _middleware


def _outermost(runnable: Any) -> bool:
    from langchain_core.runnables.config import var_child_runnable_config

    from agentrewind_langchain import RewindRunnable
    from agentrewind_langchain._scope import ACTIVE

    return not (
        _INSIDE.get()
        or isinstance(runnable, RewindRunnable)
        or var_child_runnable_config.get() is not None
        or ACTIVE.get() is not None
    )


def _patch(cls: type, name: str, original: Callable[..., Any]) -> None:
    @functools.wraps(original)
    def through_the_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _outermost(self):
            return original(self, *args, **kwargs)
        token = _INSIDE.set(True)  # what the wrapper calls on `self` right away is the original
        try:
            return getattr(_mw().wrap(_as_wrapped(self, name)), name)(*args, **kwargs)
        finally:
            _INSIDE.reset(token)

    setattr(cls, name, through_the_wrapper)
    _patched.add((cls, name))


def _as_wrapped(runnable: Any, name: str) -> Any:
    """The object a user would have wrapped, given the one whose method the test called.

    A test that replaced the method on the instance (`mocker.spy(fake, "invoke")`) called
    that replacement, which called the class method we patched: the call has reached the
    instance once already. A user who wraps `fake` calls the replacement once, through the
    wrapper; so the wrapper here drives a shallow copy without the instance's replacement,
    or the replacement would see every call twice (a harness artefact, not the wrapper's).
    """
    if name not in getattr(runnable, "__dict__", {}):
        return runnable
    twin = copy.copy(runnable)
    with contextlib.suppress(AttributeError, TypeError):
        object.__delattr__(twin, name)
    return twin


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def patch_all() -> int:
    """Patch every execution method a `Runnable` class defines itself (idempotent)."""
    from langchain_core.runnables import Runnable

    from agentrewind_langchain import RewindRunnable

    count = 0
    for cls in [Runnable, *_subclasses(Runnable)]:
        if issubclass(cls, RewindRunnable):
            continue
        for name in METHODS:
            original = cls.__dict__.get(name)
            if original is None or (cls, name) in _patched or not callable(original):
                continue
            _patch(cls, name, original)
            count += 1
    return count


def pytest_collection_finish(session: pytest.Session) -> None:
    """Test modules are imported by now: patch the classes they define too."""
    patch_all()


@pytest.fixture(autouse=True)
def _agentrewind_per_test_journal() -> Iterator[None]:
    """A fresh journal namespace per test; patch classes defined since collection."""
    global _middleware
    from agentrewind_langchain import Middleware

    patch_all()
    url = os.environ["AGENTREWIND_UPSTREAM_STORE"]
    namespace = f"up{os.getpid()}-{next(_tests)}"
    sep = "&" if "?" in url else "?"
    _middleware = Middleware(f"{url}{sep}namespace={namespace}")
    try:
        yield
    finally:
        store, _middleware = _middleware.store, None
        store.close()
        if url.startswith("redis"):
            from redis_support import cleanup_redis

            cleanup_redis(url, namespace)
