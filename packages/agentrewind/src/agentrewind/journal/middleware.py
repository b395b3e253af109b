"""`Middleware`: the entry point for recording and replaying runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from ..errors import AdapterNotFoundError
from ..plugins import load_failures, load_group
from ..records import RunInfo, RunMetrics
from ..serde import Redactor, Serializer
from ..stores import Store, connect
from .call import log
from .context import CURRENT_RUN
from .run import IncompletePolicy, Run
from .steps import make_step_decorator

if TYPE_CHECKING:
    from ..encryption import Encryption

__all__ = ["Adapter", "Middleware", "RunContext"]

F = TypeVar("F", bound=Callable[..., Any])
W = TypeVar("W")

_EXTRAS = {
    "langchain_core": "langchain",
    "langchain": "langchain",
    "langgraph": "langchain",
    "llama_index": "llamaindex",
    "workflows": "llamaindex",
    "pydantic_ai": "pydantic-ai",
}


class Adapter(Protocol):
    """What an entry point in the `agentrewind.adapters` group must provide."""

    def claims(self, obj: Any) -> bool:
        """True when this adapter knows how to wrap `obj`."""
        ...

    def wrap(self, middleware: Middleware, obj: Any, **kwargs: Any) -> Any:
        """Return `obj` wrapped so its runs are recorded and replayed."""
        ...


class RunContext:
    """`with middleware.run(id) as run:` or `async with ...`: owns the run's lease meanwhile.

    Entering a run that is already active in this context with the same id reuses it.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._token: Any = None
        self._reused: Run | None = None

    def _active(self) -> Run | None:
        active = CURRENT_RUN.get()
        if (
            active is not None
            and active.run_id == self.run.run_id
            and (active.middleware is self.run.middleware)
        ):
            return active
        return None

    def _opened(self) -> None:
        run, n = self.run, len(self.run._records)  # records() would read an indexed journal
        where = run.middleware.store.url
        log.debug("run %r opened in %s: %d recorded step(s)", run.run_id, where, n)

    def __enter__(self) -> Run:
        self._reused = self._active()
        if self._reused is not None:
            return self._reused
        self.run._open()
        self._opened()
        self._token = CURRENT_RUN.set(self.run)
        return self.run

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._reused is not None:
            return
        CURRENT_RUN.reset(self._token)
        self.run._close(failed=exc_type is not None)

    async def __aenter__(self) -> Run:
        self._reused = self._active()
        if self._reused is not None:
            return self._reused
        await self.run._aopen()
        self._opened()
        self._token = CURRENT_RUN.set(self.run)
        return self.run

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._reused is not None:
            return
        CURRENT_RUN.reset(self._token)
        await self.run._aclose(failed=exc_type is not None)


class Middleware:
    """Records every step of a run into a store and replays finished steps on resume.

    Args:
        store: A `Store`, a store URL, or None for the default
            (`$AGENTREWIND_STORE`, else `sqlite:///.agentrewind/agentrewind.db`).
        strict: Raise `DivergenceError` instead of warning when a resumed run's calls changed.
        on_incomplete: What to do on resume with a step that started but never completed:
            `rerun` (default), `skip`, or `raise`.
        lease_ttl: Seconds a run's lease lasts without renewal (it is renewed every third).
        allow_pickle: Store values JSON cannot hold with pickle, and load them. Off by default.
        allowed_types: Dataclasses, pydantic models and enums that may be rebuilt on load
            (those this process recorded itself always may).
        record_failures: Journal failures so a replay raises them again instead of re-running.
        redact: `redact(field, value) -> value`, applied to each output before it is stored
            (mask secrets or personal data); a replay returns the redacted value.
        encryption: An `agentrewind.encryption.Encryption` to encrypt outputs at rest
            (AES-GCM); None uses `$AGENTREWIND_ENCRYPTION_KEY` when set; False: never.

    Example:
        >>> mw = Middleware("memory://")
        >>> with mw.run("order-42") as run:
        ...     run.step("double", lambda x: 2 * x, 21)
        42
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        strict: bool = False,
        on_incomplete: IncompletePolicy = "rerun",
        lease_ttl: float = 30.0,
        allow_pickle: bool = False,
        allowed_types: Iterable[type] = (),
        record_failures: bool = False,
        redact: Redactor | None = None,
        encryption: Encryption | bool | None = None,
    ) -> None:
        if on_incomplete not in ("rerun", "skip", "raise"):
            raise ValueError(f"on_incomplete must be rerun, skip or raise, not {on_incomplete!r}")
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else connect(store)
        self.strict = strict
        self.on_incomplete: IncompletePolicy = on_incomplete
        self.lease_ttl = lease_ttl
        self.record_failures = record_failures
        self.serializer = Serializer(
            allow_pickle=allow_pickle,
            allowed_types=allowed_types,
            redact=redact,
            encryption=encryption,
        )

    def __repr__(self) -> str:
        return f"Middleware({self.store!r})"

    def run(
        self,
        run_id: str | None = None,
        *,
        strict: bool | None = None,
        on_incomplete: IncompletePolicy | None = None,
        ttl: float | None = None,
    ) -> RunContext:
        """Open a run: a context manager (`with` or `async with`) yielding a `Run`.

        Args:
            run_id: The unit of resume: the same id continues where it stopped. None makes a
                new id (read it back from `run.run_id`).
            strict: Overrides the middleware's `strict`.
            on_incomplete: Overrides the middleware's `on_incomplete`.
            ttl: Seconds the run is kept after its last write (None: kept until pruned).

        Raises:
            RunLockedError: On enter, when another live process drives this run.
        """
        return RunContext(
            Run(
                self,
                run_id,
                strict=self.strict if strict is None else strict,
                on_incomplete=on_incomplete or self.on_incomplete,
                ttl=ttl,
                lease_ttl=self.lease_ttl,
            )
        )

    @overload
    def step(self, name: F, /) -> F: ...
    @overload
    def step(
        self,
        name: str | None = None,
        /,
        *,
        kind: str = "custom",
        side_effects: bool = True,
        key: Callable[..., Any] | None = None,
    ) -> Callable[[F], F]: ...
    def step(
        self,
        name: str | F | None = None,
        /,
        *,
        kind: str = "custom",
        side_effects: bool = True,
        key: Callable[..., Any] | None = None,
    ) -> F | Callable[[F], F]:
        """Decorate a function (sync or async) so calls inside a run are recorded/replayed.

        Outside a run of this middleware the function is called normally.

        Args:
            name: The step name (default: the function's qualified name).
            kind: The step kind stored with the record.
            side_effects: Write a `started` record before running (see `on_incomplete`).
            key: `key(*args, **kwargs)` returns what identifies a call (default: all arguments).
        """
        if callable(name):
            return self.step()(name)
        return make_step_decorator(
            self._current, name, kind=kind, side_effects=side_effects, key=key
        )

    def _current(self) -> Run | None:
        run = CURRENT_RUN.get()
        return run if run is not None and run.middleware is self else None

    def wrap(self, obj: W, **kwargs: Any) -> W:
        """Wrap a framework object (LangChain Runnable, LlamaIndex workflow...) for replay.

        Dispatches to the installed adapter that claims `obj` (entry-point group
        `agentrewind.adapters`). The wrapper behaves as `obj` (every other attribute is the
        wrapped object's), so it is typed as `obj`'s type.

        Raises:
            AdapterNotFoundError: No installed adapter claims `obj`; the message names the
                extra to install.
        """
        for adapter in _adapters():
            if adapter.claims(obj):
                wrapped: W = adapter.wrap(self, obj, **kwargs)
                return wrapped
        module = type(obj).__module__.split(".", 1)[0]
        extra = _EXTRAS.get(module)
        hint = (
            f'install the adapter: pip install "agentrewind[{extra}]"'
            if extra
            else "agentrewind has adapters for LangChain/LangGraph runnables, LlamaIndex "
            "workflows and pydantic-ai agents (extras: langchain, langgraph, llamaindex, "
            "pydantic-ai); for plain Python use "
            "middleware.run() and middleware.step()"
        )
        broken = "; ".join(f"{name}: {exc}" for name, exc in load_failures("agentrewind.adapters"))
        if broken:
            hint += f" (installed adapters that failed to load: {broken})"
        raise AdapterNotFoundError(
            f"no installed agentrewind adapter can wrap {type(obj).__module__}."
            f"{type(obj).__qualname__}: {hint}"
        )

    def metrics(self, run_id: str) -> RunMetrics:
        """Totals over every execution of the run (steps, replay hits, seconds/tokens saved)."""
        info = self.store.get_run(run_id)
        return RunMetrics() if info is None else info.metrics

    def crashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Runs whose owner died mid-run (status `crashed`), most recently updated first.

        A service calls this at start-up and resumes each one (`middleware.run(info.run_id)`).
        """
        return self.store.crashed_runs(limit=limit)

    async def acrashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Async twin of `crashed_runs`."""
        return await self.store.acrashed_runs(limit=limit)

    def close(self) -> None:
        """Close the store if this middleware opened it from a URL."""
        if self._owns_store:
            self.store.close()


def _adapters() -> tuple[Adapter, ...]:
    return load_group("agentrewind.adapters")
