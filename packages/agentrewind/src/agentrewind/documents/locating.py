"""Finding a run wherever it lives, naming its steps, and forking any kind of run.

Forking asks the run's source, so one entry point serves journal runs, timelines and
LangGraph threads.

Runs come from the store and from run sources (LangGraph threads...); a step is named by its
sequence number, a unique id prefix or a branch name. The CLI and `Middleware.fork` share it.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from ..errors import RunNotFoundError
from ..plugins import load_group
from ..records import RunInfo, StepRecord
from ..serde.encryption import Encryption
from ..stores import Store
from ..tree import MIN_PREFIX, short_ids
from .document import DOC_KIND, DocumentError
from .foreign import hidden_source_of, noun
from .transfer import fork_run

__all__ = [
    "MIN_PREFIX",
    "Forked",
    "Located",
    "crashed_source_runs",
    "find_step",
    "fork",
    "labels",
    "linked",
    "locate",
    "present",
    "run_sources",
    "run_steps",
    "warn",
]


def run_sources() -> list[Any]:
    """Installed `agentrewind.run_sources` plugins (classes are instantiated)."""
    return [
        obj() if isinstance(obj, type) else obj for obj in load_group("agentrewind.run_sources")
    ]


def warn(source: Any, exc: Exception) -> None:
    """Say on stderr that a run source failed (one broken plugin must not stop the rest)."""
    name = getattr(source, "name", type(source).__name__)
    print(f"warning: run source {name!r} failed: {exc}", file=sys.stderr)


def present(source: Any, store: Store) -> bool:
    """Whether the store may hold runs of `source` (sources without `present` always may)."""
    check = getattr(source, "present", None)
    return True if check is None else bool(check(store))


def crashed_source_runs(store: Store, limit: int) -> list[RunInfo]:
    """Runs of the run sources whose status is `crashed` (each `meta["source"]` its source)."""
    found: list[RunInfo] = []
    for source in run_sources():
        try:
            if present(source, store):
                runs = source.list_runs(store, limit=1_000_000)
                found += [r for r in runs if r.status == "crashed"][:limit]
        except Exception as exc:
            warn(source, exc)
    return found


class Located:
    """A run found in the store (`source` None) or in a run source."""

    def __init__(self, run_id: str, info: RunInfo | None, source: Any = None) -> None:
        self.run_id = run_id
        self.info = info
        self.source = source

    @property
    def name(self) -> str:
        """`agentrewind` or the run source's name."""
        return "agentrewind" if self.source is None else str(self.source.name)


def _source_run(store: Store, source: Any, run_id: str) -> RunInfo | None:
    try:
        if not present(source, store):
            return None
        if hasattr(source, "get_run"):
            return source.get_run(store, run_id)  # type: ignore[no-any-return]
        # an older run source: a run exists when it has steps
        return (source.load_steps(store, run_id) and RunInfo(run_id, "completed", 0, 0)) or None
    except Exception as exc:
        warn(source, exc)
        return None


def locate(store: Store, run_id: str) -> Located:
    """The run `run_id` of the store, else of a run source.

    `<source>:<id>` (`langgraph:order-42`) names the source's run `id` even where a journal
    run has the same id (a graph wrapped by `Middleware.wrap` and saved by `RewindSaver`
    under one thread id: two linked entries, see `linked`).

    Raises:
        RunNotFoundError: Neither knows the run.
    """
    info = store.get_run(run_id)
    if info is not None:
        return Located(run_id, info)
    sources = run_sources()
    for source in sources:
        found = _source_run(store, source, run_id)
        if found:
            return Located(run_id, found, source)
    prefix, _, rest = run_id.partition(":")
    for source in sources:
        if rest and getattr(source, "name", None) == prefix:
            found = _source_run(store, source, rest)
            if found:
                return Located(rest, found, source)
    names = [str(getattr(s, "name", "")) for s in sources]
    foreign = hidden_source_of(store, run_id, names)
    if foreign is not None:
        raise RunNotFoundError(
            f"{run_id!r} is a {noun(foreign.source)} in {store.url} (namespace "
            f"{store.namespace}) that this installation cannot read: run `{foreign.install}`"
        )
    raise RunNotFoundError(f"no run {run_id!r} in {store.url} (namespace {store.namespace})")


def linked(store: Store, where: Located) -> list[str]:
    """The other entries under the same id, as every command names them.

    A journal run's twin thread is `langgraph:<id>`; a thread's twin journal run is `<id>`.
    """
    if where.source is not None:
        return [where.run_id] if store.get_run(where.run_id) is not None else []
    return [
        f"{s.name}:{where.run_id}" for s in run_sources() if _source_run(store, s, where.run_id)
    ]


def run_steps(store: Store, run_id: str) -> tuple[Located, list[StepRecord]]:
    """The run and its steps (the run document record left out).

    Raises:
        RunNotFoundError: No such run.
    """
    where = locate(store, run_id)
    if where.source is None:
        return where, [s for s in store.load_steps(run_id) if s.kind != DOC_KIND]
    return where, list(where.source.load_steps(store, where.run_id) or [])


def labels(steps: list[StepRecord]) -> dict[str, str]:
    """Each step id's shortest unique prefix (`tree.short_ids`)."""
    return short_ids(s.step_id for s in steps)


def find_step(steps: list[StepRecord], ref: str, heads: dict[str, str] | None = None) -> StepRecord:
    """A step by sequence number, full id, unique id prefix, or branch name.

    Raises:
        RunNotFoundError: Nothing or more than one step matches (the candidates are named).
    """
    ref = ref.strip()
    if heads and ref in heads:
        ref = heads[heads[ref]] if ref == "HEAD" and heads[ref] in heads else heads[ref]
    exact = [s for s in steps if s.step_id == ref]
    if exact:
        return exact[0]
    if ref.isdigit():
        by_seq = [s for s in steps if s.seq == int(ref)]
        if len(by_seq) == 1:
            return by_seq[0]
    found = [s for s in steps if s.step_id.startswith(ref)] if len(ref) >= 4 else []
    if not found and len(ref) >= 6:  # ids printed by older versions: their last digits
        found = [s for s in steps if s.step_id.endswith(ref)]
    if len(found) == 1:
        return found[0]
    if found:
        names = labels(steps)
        shown = ", ".join(f"{s.seq} ({names[s.step_id]})" for s in found[:5])
        raise RunNotFoundError(f"step {ref!r} is ambiguous: it matches {shown}")
    seqs = f"{steps[0].seq}..{steps[-1].seq}" if steps else "none"
    raise RunNotFoundError(
        f"step {ref!r} matches no step: give a sequence number ({seqs}) or an id prefix "
        "of 4 or more characters as `log` prints them"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Forked:
    """What `fork` did: the new run, where it came from, and how many steps it copied."""

    run_id: str
    source_run: str
    at: StepRecord
    steps: int
    source: str
    """`agentrewind` for a journal run or timeline, else the run source's name (`langgraph`)."""


def fork(
    store: Store, run_id: str, at: str, to: str, *, encryption: Encryption | None = None
) -> Forked:
    """Copy run `run_id`'s history up to step `at` into a new run `to`, for every run kind.

    `at` is what `agentrewind log` prints (a sequence number or an id prefix) or a branch
    name. A journal run or a timeline is copied by `fork_run`; a run of a run source (a
    LangGraph thread: checkpoints) by the source's own `fork_run`.

    Raises:
        RunNotFoundError: No such run or step.
        DocumentError: `to` exists already, or the run's source cannot fork.
    """
    where, steps = run_steps(store, run_id)
    heads = store.get_heads(run_id) if where.source is None else {}
    point = find_step(steps, at, heads)
    if where.source is None:
        copied = fork_run(store, run_id, at=point.step_id, to=to, encryption=encryption)
    else:
        if not hasattr(where.source, "fork_run"):
            raise DocumentError(f"run source {where.name!r} cannot fork runs")
        try:
            exists: Located | None = locate(store, to)
        except RunNotFoundError:
            exists = None
        if exists is not None:
            raise DocumentError(f"run {to!r} already exists in {store.url}")
        copied = int(where.source.fork_run(store, where.run_id, point.step_id, to))
    return Forked(to, run_id, point, copied, where.name)
