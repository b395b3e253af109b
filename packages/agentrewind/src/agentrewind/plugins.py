"""Extension points that adapters register through entry points.

- `agentrewind.adapters`: an `Adapter` (`claims(obj)`, `wrap(middleware, obj, **kw)`) used by
  `Middleware.wrap`.
- `agentrewind.run_sources`: a `RunSource` that lets every CLI command see framework-native
  runs (for example LangGraph threads and their checkpoints) beside the journal's runs. Keep
  its module free of framework imports: the CLI loads it on every command that lists runs.
- `agentrewind.cli_commands`: a function `register(subparsers)` adding CLI subcommands; each
  subparser sets `func=callable(args) -> int` with `set_defaults`. Name the entry point after
  the command: the CLI lists it by name and imports the plugin only when that command runs.
- `agentrewind.demos`: a function `demo(store, out)` run by `agentrewind demo` after the core
  story, when its adapter is installed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol

from .records import RunInfo, StepRecord
from .stores import Store

__all__ = [
    "RUN_SOURCE_OPTIONAL",
    "CliRegistrar",
    "Demo",
    "RunSource",
    "declared",
    "demos",
    "load_failures",
    "load_group",
]

log = logging.getLogger("agentrewind.plugins")


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


RUN_SOURCE_OPTIONAL = {
    "present": "present(store) -> bool: whether the store holds runs of this source at all "
    "(cheap; lets the CLI skip importing a framework)",
    "get_run": "get_run(store, run_id) -> RunInfo | None: one run, `metrics.steps` its true "
    "step count (`metrics`, `export`, `rm`, `fork`)",
    "output": "output(store, run_id, step[, everything=False]) -> JSON data: a step's state "
    "(`show`, `diff`, `export`); with `everything`, the framework's bookkeeping too (`--all`)",
    "heads": "heads(store, run_id) -> {branch: step_id}: the run's branches (`branches`, "
    "`tree`, the viewer)",
    "export_native": "export_native(store, run_id) -> JSON data: the run itself, carried by "
    "`export` in `meta[name]` so `import` can restore it",
    "import_native": "import_native(store, run_id, data, *, replace) -> int: restore an "
    "exported run as this source's run (`import`); without it, `import` refuses such documents",
    "delete_run": "delete_run(store, run_id) -> bool (`rm`, `prune`)",
    "fork_run": "fork_run(store, run_id, at_step_id, to) -> int: steps copied (`fork`)",
}
"""Methods a `RunSource` may add; the CLI calls each one it finds and does without the rest
(a source with only `list_runs` and `load_steps` keeps working)."""


CliRegistrar = Callable[[Any], None]
"""An `agentrewind.cli_commands` entry point: `register(subparsers)` adds subcommands to the
CLI's `argparse` subparsers; each sets `func=callable(args) -> int` with `set_defaults`."""

Demo = Callable[[Store, Callable[[str], None]], None]
"""An `agentrewind.demos` entry point: `demo(store, out)` tells its story after the core's."""


@functools.cache
def _all_entry_points() -> Any:
    return entry_points()  # one scan of the installed distributions per process


def declared(group: str) -> tuple[EntryPoint, ...]:
    """The entry points of `group`, not loaded: names and targets cost no import."""
    return tuple(_all_entry_points().select(group=group))


@functools.cache
def _load(group: str) -> tuple[tuple[Any, ...], tuple[tuple[str, Exception], ...]]:
    loaded: list[Any] = []
    failed: list[tuple[str, Exception]] = []
    for ep in declared(group):
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
