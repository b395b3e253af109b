"""Extension points that adapters register through entry points.

- `agentrewind.adapters`: an `Adapter` (`claims(obj)`, `wrap(middleware, obj, **kw)`) used by
  `Middleware.wrap`.
- `agentrewind.run_sources`: a `RunSource` that lets the CLI list framework-native runs (for
  example LangGraph threads and their checkpoints) beside the journal's runs.
- `agentrewind.cli_commands`: a function `register(subparsers)` adding CLI subcommands; each
  subparser sets `func=callable(args) -> int` with `set_defaults`.
- `agentrewind.demos`: a function `demo(store, out)` run by `agentrewind demo` after the core
  story, when its adapter is installed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Protocol

from .records import RunInfo, StepRecord
from .stores import Store

__all__ = ["CliRegistrar", "Demo", "RunSource", "demos", "load_failures", "load_group"]

log = logging.getLogger("agentrewind")


class RunSource(Protocol):
    """Framework-native runs the CLI can list (`runs`, `log`, `tree`)."""

    name: str
    """Shown in listings, e.g. `langgraph`."""

    def list_runs(self, store: Store, *, limit: int) -> list[RunInfo]:
        """Runs of this source in `store`, most recently updated first."""
        ...

    def load_steps(self, store: Store, run_id: str) -> list[StepRecord] | None:
        """Steps (checkpoints...) of one run with `parent_id` links, or None if unknown."""
        ...


CliRegistrar = Callable[[Any], None]
"""An `agentrewind.cli_commands` entry point: `register(subparsers)` adds subcommands to the
CLI's `argparse` subparsers; each sets `func=callable(args) -> int` with `set_defaults`."""

Demo = Callable[[Store, Callable[[str], None]], None]
"""An `agentrewind.demos` entry point: `demo(store, out)` tells its story after the core's."""


@functools.cache
def _load(group: str) -> tuple[tuple[Any, ...], tuple[tuple[str, Exception], ...]]:
    loaded: list[Any] = []
    failed: list[tuple[str, Exception]] = []
    for ep in entry_points(group=group):
        try:
            loaded.append(ep.load())
        except Exception as exc:  # one broken adapter must not disable the others
            log.warning("agentrewind plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)
            failed.append((ep.name, exc))
    return tuple(loaded), tuple(failed)


def load_group(group: str) -> tuple[Any, ...]:
    """Load every entry point of `group` once per process; ones that fail are skipped.

    A plugin that fails to import (an adapter whose framework is too old, say) is logged and
    left out, so the other adapters keep working; `load_failures` tells what failed.
    """
    return _load(group)[0]


def load_failures(group: str) -> tuple[tuple[str, Exception], ...]:
    """`(entry point name, error)` for each plugin of `group` that failed to load."""
    return _load(group)[1]


def demos() -> tuple[Demo, ...]:
    """Demo functions registered by installed adapters."""
    return load_group("agentrewind.demos")
