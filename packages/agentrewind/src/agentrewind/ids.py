"""Time-ordered ids (UUIDv7 layout) so "latest" and "newest first" are index scans."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """Return a 32-hex-digit UUIDv7-like id; ids from one process sort by creation."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter >= 1 << 12:
                ms += 1
                _counter = 0
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
        _last_ms = ms
        rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (_counter << 64) | (0b10 << 62) | rand
    return f"{value:032x}"


def check_id(value: object, what: str = "run id") -> str:
    """Return `value` if it can name a run (any text that UTF-8 can hold), else raise.

    Raises:
        ValueError: `value` is not a string, or holds a lone surrogate (it could never be
            stored: SQLite and Redis take UTF-8). The message names the id.
    """
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{what} {value!r} is not valid text: it holds a lone surrogate at index "
                f"{exc.start} (decode bytes with errors='strict' or 'replace' first)"
            ) from None
    raise ValueError(f"{what} must be a string, not {type(value).__name__} ({value!r})")
