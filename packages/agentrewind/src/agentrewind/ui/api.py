"""The viewer's JSON API: read-only views of a store (runs, a run's calls, graphs, diffs, metrics).

Every function takes an open `Store` and returns JSON data; nothing here writes. Runs of
framework-native sources (LangGraph threads) come through the `agentrewind.run_sources`
plugins, so the core never imports a framework.
"""

from __future__ import annotations

import time
from typing import Any

from ..cli import sources as _sources
from ..cli import views as _views
from ..cli.listing import refs
from ..cli.status import RunView, describe
from ..cli.views import generic_nodes
from ..diff import diff_states
from ..documents import RunNotFoundError
from ..documents.locating import find_step, labels
from ..journal.inputs import inputs_of
from ..numbers import with_steps
from ..records import RunInfo, RunMetrics, StepRecord
from ..stores import Store
from ..stores.urls import redact_url
from ..timeline import HEAD, Timeline

__all__ = [
    "diff",
    "graph",
    "list_runs",
    "metrics",
    "run_detail",
    "step_detail",
    "store_info",
]

JOURNAL, TIMELINE, LANGGRAPH = "journal", "timeline", "langgraph"


run_sources = _sources.run_sources


def all_runs(store: Store, limit: int) -> list[tuple[str, RunInfo]]:
    """`(source, run)` of the store and the run sources, most recently updated first."""
    return [(v.source, v.info) for v in _sources.all_runs(store, limit)]


def run_steps(store: Store, run_id: str) -> tuple[str, list[StepRecord]]:
    """`(source, steps)` of a run."""
    where, steps = _sources.run_steps(store, run_id)
    return where.name, steps


def step_json(s: StepRecord, *, output: bool = False, inputs: Any = None) -> dict[str, Any]:
    """A step as the CLI prints it, with its Unix `created_at` (the pages format times)."""
    data = _views.step_json(s, s.step_id, output=output, inputs=inputs)
    return data | {"created_at": s.created_at}


def _node_json(n: Any) -> dict[str, Any]:
    return _views._node_json(n, {})


def safe_url(url: str) -> str:
    """The store URL without its secrets (it is shown in the page): `stores.urls.redact_url`."""
    return redact_url(url)


def store_info(store: Store) -> dict[str, Any]:
    """What the header shows: the store (no secrets) and the installed run sources."""
    return {
        "url": safe_url(store.url),
        "namespace": store.namespace,
        "sources": [getattr(s, "name", type(s).__name__) for s in run_sources()],
        # Runs of frameworks whose adapter is not installed here: how many, what to install.
        "hidden": [
            {"source": h.source, "count": h.count, "install": h.install, "text": h.sentence()}
            for h in _sources.hidden(store)
        ],
    }


def _view(store: Store, source: str, info: RunInfo) -> RunView:
    """The run as `agentrewind runs` lists it: the same status and step count."""
    if source == "agentrewind":
        return describe(store, [info])[0]
    return _sources.source_view(source, info)


def _run_json(store: Store, v: RunView, heads: dict[str, str] | None = None) -> dict[str, Any]:
    """The run as the viewer lists it (`heads`: its branch heads, when read already)."""
    source, info = v.source, v.info
    kind = LANGGRAPH if source == "langgraph" else JOURNAL
    if heads is None and source == "agentrewind":
        heads = store.get_heads(info.run_id)
    if source == "agentrewind" and heads:
        kind = TIMELINE
    elif source not in ("agentrewind", "langgraph"):
        kind = source
    m = with_steps(info, v.steps)  # the figures `runs`, `metrics` and OpenTelemetry show
    return {
        "run_id": info.run_id,
        "source": source,
        "kind": kind,
        "status": v.status,
        "cancelled_at": info.meta.get("cancelled_at"),
        **m.as_dict(),
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        # A framework's own words on where the run stands (LangGraph: the node raising, the
        # interrupt payloads, the nodes due next).
        "framework": {k: info.meta[k] for k in ("error", "interrupts", "next") if k in info.meta},
    }


def list_runs(store: Store, limit: int = 500) -> list[dict[str, Any]]:
    """Every run of the store and of the run sources, most recently updated first."""
    out = []
    views = _sources.all_runs(store, limit)
    names = refs(views)
    for v in views:
        row = _run_json(store, v) | {"ref": names[id(v)]}
        if row["kind"] in (TIMELINE, LANGGRAPH) and not row["steps"]:
            row["steps"] = len(run_steps(store, row["ref"])[1])  # checkpoints are not calls
        out.append(row)
    return out


def _find(store: Store, run_id: str) -> tuple[str, RunInfo, list[StepRecord]]:
    where, steps = _sources.run_steps(store, run_id)
    source, info, run_id = where.name, where.info, where.run_id
    if info is None:
        when = [s.created_at for s in steps] or [0.0]
        info = RunInfo(run_id, "completed", min(when), max(when))
    return source, info, steps


def _waterfall(steps: list[StepRecord], metrics: RunMetrics) -> dict[str, Any]:
    """Calls on a time axis: each executed call, and the replays noted on the record after them."""
    by_key = {s.key: s for s in steps}
    rows: list[dict[str, Any]] = []
    noted = 0
    for s in steps:
        meta = s.meta
        duration = float(meta.get("duration", 0.0) or 0.0)
        end = s.created_at  # a completed record is written when the call returns
        start = float(meta.get("started_at", end)) if s.status == "started" else end - duration
        replayed = meta.get("replayed") or []
        noted += int(meta.get("replayed_count", len(replayed)) or 0)
        for key in replayed:
            original = by_key.get(key)
            rows.append(
                {
                    "step_id": original.step_id if original else None,
                    "kind": original.kind if original else key.split(":", 1)[0],
                    "name": original.name if original else key,
                    "outcome": "replayed",
                    "start": start,
                    "end": start,
                    "duration": 0.0,
                    "seconds_saved": float(original.meta.get("duration", 0.0) or 0.0)
                    if original
                    else 0.0,
                    "tokens": int(original.meta.get("tokens", 0) or 0) if original else 0,
                }
            )
        outcome = {"completed": "executed", "failed": "failed", "started": "started"}[s.status]
        if outcome == "executed" and meta.get("cached"):
            outcome = "cached"  # served from the cross-run cache (journal/cache.py)
        error = meta.get("error")
        rows.append(
            {
                "step_id": s.step_id,
                "seq": s.seq,
                "kind": s.kind,
                "name": s.meta.get("description") or s.name,
                "outcome": outcome,
                "start": start,
                "end": end if s.status != "started" else start,  # never finished
                "duration": duration,
                "tokens": int(meta.get("tokens", 0) or 0),
                "diverged": bool(meta.get("diverged")),
                "error": f"{error.get('type', 'Error')}: {error.get('message', '')}"
                if isinstance(error, dict)
                else None,
            }
        )
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("executed", "replayed", "cached")}
    counts |= {
        "failed": sum(r["outcome"] == "failed" for r in rows),
        "started": sum(r["outcome"] == "started" for r in rows),
        "replayed_unplaced": max(0, metrics.replay_hits - noted),
    }
    return {"rows": rows, "counts": counts}


def _heads(store: Store, source: str, run_id: str) -> dict[str, str]:
    """Branch heads: a timeline's, or those a run source names (the leaves of a thread)."""
    if source == "agentrewind":
        return store.get_heads(run_id)
    for plugin in run_sources():
        heads = getattr(plugin, "heads", None)
        if getattr(plugin, "name", None) == source and callable(heads):
            return dict(heads(store, run_id))
    return {}


def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """A run and its calls as a waterfall (each row links to its step by id).

    Raises:
        RunNotFoundError: No store or run source knows the run.
    """
    source, info, steps = _find(store, run_id)
    heads = _heads(store, source, info.run_id)
    run = _run_json(store, _view(store, source, info), heads)
    return {
        "run": run,
        "heads": heads,
        "waterfall": _waterfall(steps, info.metrics),
    }


def step_detail(store: Store, run_id: str, step_id: str) -> dict[str, Any]:
    """One step with its output; a run source may add more (LangGraph: channel values).

    The step is named by id, or as the CLI prints it (a sequence number, an id prefix).

    Raises:
        RunNotFoundError: The run or the step does not exist.
    """
    source, info, steps = _find(store, run_id)
    run_id = info.run_id  # `langgraph:ID` names the thread ID
    # What the CLI prints names a step here too: a sequence number or a short id.
    step = find_step(steps, step_id)
    inputs = inputs_of(step, steps, namespace=store.namespace)
    data, step_id = step_json(step, output=True, inputs=inputs), step.step_id
    data["short"] = labels(steps).get(step_id, step_id)  # the id as the CLI prints it
    for plugin in run_sources():
        detail = getattr(plugin, "step_detail", None)
        if getattr(plugin, "name", None) == source and callable(detail):
            data["detail"] = detail(store, run_id, step_id)
    return data


def graph(store: Store, run_id: str) -> dict[str, Any]:
    """The run's steps as a graph: nodes with parent links, merges, branch heads."""
    source, info, steps = _find(store, run_id)
    run_id = info.run_id
    heads = _heads(store, source, run_id)
    timeline = source == "agentrewind" and any(s.kind == "checkpoint" for s in steps)
    if timeline:
        tl = Timeline(run_id, store=store, events=False)
        nodes = tl.tree_nodes()
        branches = [b.to_dict() for b in tl.list_branches()]
    else:
        nodes = generic_nodes(steps, heads)
        branches = []
    at = {s.step_id: s for s in steps}
    short = labels(steps)  # ids as the CLI prints them
    out = []
    for n in nodes:
        node = _node_json(n)
        node["short"] = short.get(n.id, n.id)
        s = at.get(n.id)
        node["seq"] = s.seq if s else 0
        node["created_at"] = s.created_at if s else 0.0
        node["kind"] = s.kind if s else ""
        if s is not None and "confidence" in s.meta:
            node["confidence"] = s.meta["confidence"]
        out.append(node)
    current = heads.get(HEAD)
    return {"kind": TIMELINE if timeline else source, "nodes": out, "branches": branches,
            "heads": {b: h for b, h in heads.items() if b != HEAD}, "current": current,
            "labels": short}  # fmt: skip


def diff(store: Store, run_id: str, a: str, b: str) -> dict[str, Any]:
    """Two steps' outputs (states) and what changed between them.

    Raises:
        RunNotFoundError: The run or a step does not exist.
    """
    left, right = step_detail(store, run_id, a), step_detail(store, run_id, b)

    def state(step: dict[str, Any]) -> Any:
        detail = step.get("detail")
        if isinstance(detail, dict) and "channel_values" in detail:
            return detail["channel_values"]
        return step["output"]

    changes = diff_states(state(left), state(right))
    return {"a": left, "b": right, "changes": changes,
            "inputs": diff_states(left["inputs"], right["inputs"])}  # fmt: skip


def metrics(store: Store, run_id: str | None = None, limit: int = 500) -> dict[str, Any]:
    """Totals and per-run series (for charts) of the store, or of one run.

    Raises:
        RunNotFoundError: `run_id` names no run.
    """
    if run_id is not None:
        runs = [r for r in list_runs(store, limit) if r["run_id"] == run_id]
        if not runs:
            raise RunNotFoundError(f"no run {run_id!r} in this store")
    else:
        runs = list_runs(store, limit)
    total = {k: sum(r[k] for r in runs) for k in RunMetrics().as_dict()}
    series = sorted(runs, key=lambda r: r["updated_at"])
    return {"runs": len(runs), "total": total, "series": series}


def queues(store: Store) -> list[dict[str, Any]]:
    """Each queue holding runs: waiting (delayed), in flight, oldest waiting, and its runs."""
    out = []
    for s in store.queues.stats():
        row = s.as_dict()
        row["age"] = None if s.oldest_enqueued_at is None else time.time() - s.oldest_enqueued_at
        out.append(row)
    return out
