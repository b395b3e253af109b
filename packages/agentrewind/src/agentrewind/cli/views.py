"""CLI commands that read one run: tree, branches, show, diff, fork; and run lookup helpers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..diff import diff_states
from ..documents import RunNotFoundError, fork_run
from ..documents.document import DOC_KIND
from ..plugins import load_group
from ..records import RunInfo, StepRecord
from ..stores import Store, connect
from ..timeline import HEAD, Timeline
from ..tree import TreeNode, render_tree, short_id


def open_store(args: argparse.Namespace) -> Store:
    """The store named by `--store`/`--namespace`."""
    return connect(args.store, namespace=args.namespace)


def color() -> bool:
    """Colour output only on a terminal, and never with `NO_COLOR` set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def dumps(data: Any) -> str:
    """JSON for `--json` output."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


# -- run sources ----------------------------------------------------------------------------------
def run_sources() -> list[Any]:
    """Installed `agentrewind.run_sources` plugins (classes are instantiated)."""
    return [
        obj() if isinstance(obj, type) else obj for obj in load_group("agentrewind.run_sources")
    ]


def _warn(source: Any, exc: Exception) -> None:
    name = getattr(source, "name", type(source).__name__)
    print(f"warning: run source {name!r} failed: {exc}", file=sys.stderr)


def all_runs(store: Store, limit: int) -> list[tuple[str, RunInfo]]:
    """Runs of the store and of every run source, most recently updated first."""
    found = [("agentrewind", r) for r in store.list_runs(limit=limit)]
    for source in run_sources():
        try:
            found += [(source.name, r) for r in source.list_runs(store, limit=limit)]
        except Exception as exc:
            _warn(source, exc)
    found.sort(key=lambda item: item[1].updated_at, reverse=True)
    return found[:limit]


def run_steps(store: Store, run_id: str) -> tuple[str, list[StepRecord]]:
    """`(source, steps)` of a run from the store, else from a run source.

    Raises:
        RunNotFoundError: Neither knows the run.
    """
    if store.get_run(run_id) is not None:
        return "agentrewind", [s for s in store.load_steps(run_id) if s.kind != DOC_KIND]
    for source in run_sources():
        try:
            steps = source.load_steps(store, run_id)
        except Exception as exc:
            _warn(source, exc)
            continue
        if steps is not None:
            return source.name, steps
    raise RunNotFoundError(f"no run {run_id!r} in {store.url} (namespace {store.namespace})")


def is_timeline(steps: list[StepRecord]) -> bool:
    """True when the run's steps are timeline checkpoints."""
    return any(s.kind == "checkpoint" for s in steps)


def find_step(steps: list[StepRecord], ref: str, heads: dict[str, str]) -> StepRecord:
    """A step by id, branch name, or unique id prefix/suffix."""
    ref = heads.get(ref, ref)
    exact = [s for s in steps if s.step_id == ref]
    found = exact or [s for s in steps if s.step_id.startswith(ref) or s.step_id.endswith(ref)]
    if len(found) != 1 or len(ref) < 4:
        what = "is ambiguous" if len(found) > 1 else "matches no step"
        raise RunNotFoundError(f"{ref!r} {what}")
    return found[0]


def step_json(s: StepRecord, *, output: bool = False) -> dict[str, Any]:
    """A step as JSON data."""
    data = {
        "step_id": s.step_id,
        "seq": s.seq,
        "parent_id": s.parent_id,
        "key": s.key,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "created_at": s.created_at,
        "meta": s.meta,
    }
    if output:
        data["output"] = s.output
    return data


# -- commands -------------------------------------------------------------------------------------
def _generic_nodes(steps: list[StepRecord], heads: dict[str, str]) -> list[TreeNode]:
    refs: dict[str, list[str]] = {}
    for branch, head in sorted(heads.items()):
        if branch != HEAD:
            refs.setdefault(head, []).append(branch)
    status = {"completed": "active", "failed": "failed", "started": "rolled_back"}
    nodes = []
    for s in steps:
        label = f"{s.kind}:{s.name}"
        if s.status == "started":
            label += "  (started, never completed)"
        nodes.append(
            TreeNode(
                s.step_id,
                s.parent_id,
                label,
                status.get(s.status, "active"),
                refs.get(s.step_id, []),
            )
        )
    return nodes


def cmd_tree(args: argparse.Namespace) -> int:
    """`agentrewind tree RUN`: the run's steps (or checkpoints) as a tree."""
    with open_store(args) as store:
        source, steps = run_steps(store, args.run)
        heads = store.get_heads(args.run) if source == "agentrewind" else {}
        if source == "agentrewind" and is_timeline(steps):
            tl = Timeline(args.run, store=store, events=False)
            nodes, text = tl.tree_nodes(), tl.visualize_tree(color=color())
        else:
            nodes = _generic_nodes(steps, heads)
            text = f"run {args.run} ({source}): {len(steps)} step(s)\n" + render_tree(
                nodes, color=color()
            )
    if args.json:
        print(dumps([_node_json(n) for n in nodes]))
    else:
        print(text)
    return 0


def _node_json(n: TreeNode) -> dict[str, Any]:
    return {
        "id": n.id,
        "parent_id": n.parent_id,
        "label": n.label,
        "status": n.status,
        "refs": n.refs,
        "merged": n.merged,
    }


def cmd_branches(args: argparse.Namespace) -> int:
    """`agentrewind branches RUN`: a timeline's branches and their heads."""
    with open_store(args) as store:
        run_steps(store, args.run)
        tl = Timeline(args.run, store=store, events=False)
        branches = tl.list_branches()
    if args.json:
        print(dumps([b.to_dict() for b in branches]))
        return 0
    if not branches or all(b.head is None for b in branches):
        print(f"run {args.run} has no branches")
        return 0
    for b in branches:
        mark = "*" if b.is_current else " "
        head = short_id(b.head) if b.head else "-"
        print(f"{mark} {b.name:<24} {head:<12} {b.checkpoint_count:>5} checkpoint(s)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """`agentrewind show RUN STEP`: one step with its output and meta."""
    with open_store(args) as store:
        source, steps = run_steps(store, args.run)
        heads = store.get_heads(args.run) if source == "agentrewind" else {}
    step = find_step(steps, args.step, heads)
    data = step_json(step, output=True)
    if args.json:
        print(dumps(data))
        return 0
    for name in ("step_id", "seq", "parent_id", "key", "kind", "name", "status"):
        print(f"{name:<10} {data[name]}")
    print(f"{'meta':<10} {dumps(step.meta)}")
    print(f"{'output':<10} {dumps(step.output)}")
    return 0


def _resolve_state(store: Store, spec: str, default_run: str | None) -> tuple[str, Any]:
    run_id, _, ref = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if default_run is not None and "@" not in spec:
        run_id, ref = default_run, spec
    source, steps = run_steps(store, run_id)
    heads = store.get_heads(run_id) if source == "agentrewind" else {}
    if ref:
        step = find_step(steps, ref, heads)
    else:
        head = heads.get(heads.get(HEAD, "main"), "")
        done = [s for s in steps if s.step_id == head] or [
            s for s in steps if s.status == "completed"
        ]
        if not done:
            raise RunNotFoundError(f"run {run_id!r} has no completed step to compare")
        step = done[-1]
    return f"{run_id}@{short_id(step.step_id)}", step.output


def cmd_diff(args: argparse.Namespace) -> int:
    """`agentrewind diff A B`: what changed between two states."""
    with open_store(args) as store:
        name_a, a = _resolve_state(store, args.a, args.run)
        name_b, b = _resolve_state(store, args.b, args.run)
    changes = diff_states(a, b)
    result: dict[str, Any] = {"a": name_a, "b": name_b, **changes}
    if args.json:
        print(dumps(result))
        return 0
    print(f"--- {name_a}\n+++ {name_b}")
    paint = color()

    def line(code: str, text: str) -> None:
        print(f"\x1b[{code}m{text}\x1b[0m" if paint else text)

    for path, value in changes["removed"].items():
        line("31", f"- {path}: {json.dumps(value, default=str)}")
    for path, value in changes["added"].items():
        line("32", f"+ {path}: {json.dumps(value, default=str)}")
    for path, change in changes["changed"].items():
        before, after = (json.dumps(change[k], default=str) for k in ("before", "after"))
        line("33", f"~ {path}: {before} -> {after}")
    if not any(changes.values()):
        print("(no differences)")
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    """`agentrewind fork RUN --at STEP --to NEW`: copy a prefix of a run into a new run."""
    with open_store(args) as store:
        copied = fork_run(store, args.run, at=args.at, to=args.to)
    if args.json:
        print(dumps({"run_id": args.to, "from": args.run, "at": args.at, "steps": copied}))
    else:
        print(f"forked {args.run} at {args.at} into {args.to} ({copied} step(s) copied)")
    return 0
