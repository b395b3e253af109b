"""`RunContext`: entering a run (`with middleware.run(id)`) takes its lease; leaving ends it."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ..errors import RunInterruptedError, StoreUnavailableError
from .call import log
from .context import CURRENT_RUN
from .lease import Ending
from .run import Run

__all__ = ["RunContext"]


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
        self.run._close(failed=exc_type is not None, ending=_ending(exc_type))

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
        await self.run._aclose(failed=exc_type is not None, ending=_ending(exc_type))


def _ending(exc_type: type[BaseException] | None) -> Ending:
    """How a run that raised `exc_type` (None: returned) ends (see `Run._close`)."""
    if exc_type is not None and issubclass(exc_type, StoreUnavailableError):
        return "unreachable"
    if exc_type is not None and issubclass(exc_type, RunInterruptedError):
        return "interrupted"
    return "normal"
