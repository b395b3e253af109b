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
