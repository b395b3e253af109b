"""Tables created (or migrated) once per store object, on first use, by the first thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Once"]


class Once:
    """Calls a function the first time it is called, once, however many threads call it."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self._done = False
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        """True once the function ran (without error)."""
        return self._done

    def __call__(self) -> None:
        if self._done:
            return
        with self._lock:
            if not self._done:
                self._fn()
                self._done = True
