"""What every CLI command shares: the store, output, input, confirmation, exit codes.

Output: JSON, colour, tree glyphs, ISO-8601 UTC times; input: durations and times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from typing import Any

from ..errors import AgentRewindError
from ..stores import Store, connect

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_USAGE",
    "CliError",
    "color",
    "confirm",
    "dumps",
    "iso",
    "open_store",
    "parse_duration",
    "parse_since",
    "unicode_ok",
]

EXIT_OK = 0
"""The command did what was asked."""
EXIT_NOT_FOUND = 1
"""An unknown run or step, or invalid input (a document, a duration, a refused change)."""
EXIT_USAGE = 2
"""The command line itself is wrong (argparse's code)."""
EXIT_STORE = 3
"""The store cannot be opened or reached, is busy, or is not an agentrewind store."""
EXIT_INTERRUPTED = 130
"""Ctrl-C."""


class CliError(AgentRewindError):
    """A refused or invalid request, reported on one line with exit code 1."""


def open_store(args: argparse.Namespace, *, write: bool = False) -> Store:
    """The store named by `--store`/`--namespace`.

    Read commands (`write=False`) open a SQLite store read-only: a missing file is an error
    and nothing is created. Commands that write create the store as usual.
    """
    url = getattr(args, "store", None)
    ns = getattr(args, "namespace", None)
    if write:
        return connect(url, namespace=ns)
    from ..stores import default_url
    from .readonly import connect_read_only

    return connect_read_only(url or default_url(), ns)


def color() -> bool:
    """Colour output only on a terminal, and never with `NO_COLOR` set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def unicode_ok() -> bool:
    """Whether stdout can encode the tree glyphs (a cp1252 redirect cannot)."""
    try:
        "●◉○✗◆├└│─".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def dumps(data: Any) -> str:
    """JSON for `--json` output."""
    return json.dumps(data, indent=2, ensure_ascii=not unicode_ok(), default=str)


def iso(ts: float | None) -> str | None:
    """A Unix time as ISO-8601 UTC with a `Z`, to the second (None stays None)."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `15m`, `12h`, `7d`, `2w` as seconds (argparse `type`)."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number with s, m, h, d or w (7d, 12h, 90s)"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_since(text: str) -> float:
    """A duration back from now (`2h`) or an ISO-8601 time, as a Unix time (argparse `type`)."""
    if _DURATION.match(text):
        return dt.datetime.now(dt.UTC).timestamp() - parse_duration(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (2h, 7d) nor an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def confirm(question: str, *, yes: bool) -> bool:
    """Ask on a terminal; `--yes` (or no terminal to ask on) answers yes."""
    if yes or not sys.stdin.isatty():  # scripts and pipes: no one to ask
        return True
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")
