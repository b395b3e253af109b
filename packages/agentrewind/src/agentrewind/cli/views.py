"""CLI commands that read one run: log, tree, branches, show, diff."""

from __future__ import annotations

import argparse
import inspect
import json
from typing import Any

from ..diff import diff_states
from ..documents import RunNotFoundError
from ..errors import CheckpointCycleError
from ..journal.inputs import inputs_of
from ..records import INPUT_FIELDS, StepRecord
from ..stores import Store
from ..timeline import HEAD, Timeline
from ..tree import TreeNode, find_cycle, render_tree
from . import formats
from .common import color, dumps, iso, open_store, unicode_ok
from .sources import Located, find_step, labels, linked, run_steps

__all__ = [
    "cmd_branches",
    "cmd_diff",
    "cmd_log",
    "cmd_show",
    "cmd_tree",
    "generic_nodes",
    "linked_note",
    "resume_marker",
    "step_json",
]


def step_json(
    s: StepRecord, ref: str, *, output: bool = False, inputs: Any = None
) -> dict[str, Any]:
    """A step as JSON data; `ref` is the short name `log` prints.

    With `output`, its `inputs` (as `journal.inputs` rebuilds them) and output are added;
    the meta entries that hold the inputs are left out of `meta` either way.
    """
    meta = s.meta
    if any(f in meta for f in INPUT_FIELDS):
        meta = {k: v for k, v in meta.items() if k not in INPUT_FIELDS}
    data = {
        "seq": s.seq,
        "ref": ref,
        "step_id": s.step_id,
        "parent_id": s.parent_id,
        "key": s.key,
        "kind": s.kind,
        "name": s.name,
        "status": s.status,
        "created_at": iso(s.created_at) if s.created_at else None,
        "meta": meta,
    }
    if output:
        data["inputs"] = inputs
        data["output"] = s.output
    return data


def _heads(store: Store, where: Located) -> dict[str, str]:
    """Branch name -> head step: a timeline's, or what a run source calls its branches."""
    if where.source is None:
        return store.get_heads(where.run_id)
    heads = getattr(where.source, "heads", None)
    return dict(heads(store, where.run_id)) if heads is not None else {}


def _output(store: Store, where: Located, step: StepRecord, everything: bool) -> Any:
    """A run source's step output; internal bookkeeping only with `everything` (`--all`)."""
    fn = where.source.output
    if "everything" in inspect.signature(fn).parameters:
        return fn(store, where.run_id, step, everything=everything)
    return fn(store, where.run_id, step)


def cmd_log(args: argparse.Namespace) -> int:
    """`agentrewind log RUN`: the run's steps, oldest first."""
    with open_store(args) as store:
        where, steps = run_steps(store, args.run)
        if args.branch:
            tl = Timeline(args.run, store=store, events=False)
            wanted = {c.id for c in tl.history(args.branch, limit=1_000_000_000)}
            steps = [s for s in steps if s.step_id in wanted]
    names = labels(steps)
    if args.limit:
        steps = steps[-args.limit :]
    if args.json:
        print(dumps([step_json(s, names[s.step_id]) for s in steps]))
        return 0
    print(f"run {args.run} ({where.name}): {len(steps)} step(s)")
    if twins := linked_note(args, where):
        print(twins)
    print(f"{'SEQ':>5}  {'STATUS':<9} {'KIND':<10} {'NAME':<40} {'TIME':>11}  ID")
    for s in steps:
        ms = float(s.meta.get("duration", 0.0) or 0.0) * 1000
        label = str(s.meta.get("description") or s.name)
        if marker := resume_marker(s):
            print(marker)
        print(
            f"{s.seq:>5}  {s.status:<9} {s.kind:<10} {label[:40]:<40} {ms:8.1f} ms  "
            f"{names[s.step_id]}"
        )
    return 0


def linked_note(args: argparse.Namespace, where: Located) -> str | None:
    """The line naming the other entry under the same id (a wrapped graph's thread), if any."""
    with open_store(args) as store:
        twins = linked(store, where)
    if not twins:
        return None
    what = "its LangGraph thread" if where.source is None else "its journal run"
    return f"also under this id: {what}, `{twins[0]}` (agentrewind log {twins[0]})"


def resume_marker(step: StepRecord) -> str | None:
    """The line `log` prints where an attempt replacing an earlier one (kept) began."""
    resumed, replaces = step.meta.get("resumed"), step.meta.get("replaces")
    if not isinstance(resumed, dict) or not isinstance(replaces, dict):
        return None
    at = iso(float(resumed.get("at", 0) or 0))
    return (
        f"{'':>5}  -- resumed: attempt {step.meta.get('attempt')} after a "
        f"{resumed.get('why')} one (seq {replaces.get('seq')}), {at}, "
        f"pid {resumed.get('pid')} on {resumed.get('host')}"
    )


def generic_nodes(steps: list[StepRecord], heads: dict[str, str]) -> list[TreeNode]:
    """Tree nodes of a run's steps, each head's branch names on the step it points at."""
    refs: dict[str, list[str]] = {}
    for branch, head in sorted(heads.items()):
        if branch != HEAD:
            refs.setdefault(head, []).append(branch)
    status = {"completed": "active", "failed": "failed", "started": "rolled_back"}
    ids = {s.step_id for s in steps}
    # Checkpoints (a LangGraph thread's) form a tree by their parents; a journal's records
    # are drawn in execution order even where some carry parents (a LlamaIndex run's calls
    # chain to each other, its ticks do not: by parents, the ticks would sink below them).
    linked = all(s.kind == "checkpoint" for s in steps) and any(s.parent_id in ids for s in steps)
    if linked:  # a crafted or damaged store: no tree to draw (it would show nothing)
        cycle = find_cycle({s.step_id: [s.parent_id] if s.parent_id else [] for s in steps})
        if cycle is not None:
            raise CheckpointCycleError(steps[0].run_id, cycle)
    nodes = []
    prev: str | None = None
    for s in steps:
        label = f"{s.kind}:{s.name}"
        if s.status == "started":
            label += "  (started, never completed)"
        # Journal steps carry no parent: they form one line in sequence order.
        parent = s.parent_id if linked else prev
        nodes.append(
            TreeNode(
                s.step_id, parent, label, status.get(s.status, "active"), refs.get(s.step_id, [])
            )
        )
        prev = s.step_id
    return nodes


def cmd_tree(args: argparse.Namespace) -> int:
    """`agentrewind tree RUN`: the run's steps (or checkpoints) as a tree."""
    with open_store(args) as store:
        where, steps = run_steps(store, args.run)
        heads = _heads(store, where)
        header = f"run {args.run} ({where.name}): {len(steps)} step(s)"
        if where.source is None and HEAD in heads:
            tl = Timeline(args.run, store=store, events=False)
            nodes = tl.tree_nodes()
            names = ", ".join(
                f"{b.name} (HEAD)" if b.is_current else b.name for b in tl.list_branches()
            )
            header = f"timeline {args.run}: {len(nodes)} checkpoint(s); branches: {names}"
        else:
            nodes = generic_nodes(steps, heads)
    short = labels(steps)
    if args.json:
        print(dumps([_node_json(n, short) for n in nodes]))
    elif args.format == "mermaid":
        print(formats.mermaid(nodes, short))
    elif args.format == "dot":
        print(formats.dot(nodes, short, args.run))
    else:
        plain = not unicode_ok()
        print(header + "\n" + render_tree(nodes, color=color(), names=short, plain=plain))
    return 0


def _node_json(n: TreeNode, short: dict[str, str]) -> dict[str, Any]:
    return {
        "id": n.id,
        "ref": short.get(n.id, n.id),
        "parent_id": n.parent_id,
        "label": n.label,
        "status": n.status,
        "refs": n.refs,
        "merged": n.merged,
    }


def cmd_branches(args: argparse.Namespace) -> int:
    """`agentrewind branches RUN`: a timeline's branches and their heads."""
    with open_store(args) as store:
        where, steps = run_steps(store, args.run)
        if where.source is not None:
            return _source_branches(args, steps, _heads(store, where))
        branches = Timeline(args.run, store=store, events=False).list_branches()
    short = labels(steps)
    if args.json:
        print(dumps([b.to_dict() | {"ref": short.get(b.head or "")} for b in branches]))
        return 0
    if not branches or all(b.head is None for b in branches):
        print(f"run {args.run} has no branches")
        return 0
    for b in branches:
        mark = "*" if b.is_current else " "
        head = short.get(b.head, b.head) if b.head else "-"
        print(f"{mark} {b.name:<24} {head:<16} {b.checkpoint_count:>5} checkpoint(s)")
    return 0


def _source_branches(
    args: argparse.Namespace, steps: list[StepRecord], heads: dict[str, str]
) -> int:
    """`branches` of a run source's run: the heads it names (the leaves `tree` draws)."""
    short, by_id = labels(steps), {s.step_id: s for s in steps}

    def depth(step_id: str) -> int:
        n, seen, cur = 0, set(), by_id.get(step_id)
        while cur is not None and cur.step_id not in seen:
            seen.add(cur.step_id)
            n, cur = n + 1, by_id.get(cur.parent_id or "")
        return n

    rows = [
        {"name": name, "head": head, "ref": short.get(head), "is_current": name == "main",
         "checkpoint_count": depth(head)}
        for name, head in heads.items()
    ]  # fmt: skip
    if args.json:
        print(dumps(rows))
        return 0
    if not rows:
        print(f"run {args.run} has no branches")
    for r in rows:
        mark = "*" if r["is_current"] else " "
        print(
            f"{mark} {r['name']:<24} {r['ref'] or '-':<16} {r['checkpoint_count']:>5} checkpoint(s)"
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """`agentrewind show RUN STEP`: one step with its output and meta."""
    with open_store(args) as store:
        where, steps = run_steps(store, args.run)
        step = find_step(steps, args.step, _heads(store, where))
        if where.source is not None and step.output is None and hasattr(where.source, "output"):
            step.output = _output(store, where, step, bool(getattr(args, "all", False)))
    inputs = inputs_of(step, steps, namespace=store.namespace)
    data = step_json(step, labels(steps)[step.step_id], output=True, inputs=inputs)
    if args.json:
        print(dumps(data))
        return 0
    for name in ("seq", "ref", "step_id", "parent_id", "key", "kind", "name", "status"):
        print(f"{name:<10} {data[name]}")
    print(f"{'created':<10} {data['created_at']}")
    print(f"{'meta':<10} {dumps(data['meta'])}")
    if "error" in step.meta:  # a failed attempt: what it raised, then what it was given
        error = step.meta["error"]
        print(f"{'error':<10} {error.get('type', 'Error')}: {error.get('message', '')}")
    print(f"{'inputs':<10} {dumps(inputs)}")
    print(f"{'output':<10} {dumps(step.output)}")
    return 0


def _resolve_state(
    store: Store, spec: str, default_run: str | None, everything: bool = False
) -> tuple[str, Any, Any]:
    run_id, _, ref = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if default_run is not None and "@" not in spec:
        run_id, ref = default_run, spec
    where, steps = run_steps(store, run_id)
    heads = _heads(store, where)
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
    if where.source is not None and step.output is None and hasattr(where.source, "output"):
        step.output = _output(store, where, step, everything)
    inputs = inputs_of(step, steps, namespace=store.namespace)
    return f"{run_id}@{labels(steps)[step.step_id]}", step.output, inputs


def cmd_diff(args: argparse.Namespace) -> int:
    """`agentrewind diff A B`: what changed between two states."""
    with open_store(args) as store:
        everything = bool(getattr(args, "all", False))
        name_a, a, inputs_a = _resolve_state(store, args.a, args.run, everything)
        name_b, b, inputs_b = _resolve_state(store, args.b, args.run, everything)
    if args.format == "json-patch":
        print(dumps(formats.json_patch(a, b)))
        return 0
    changes = diff_states(a, b)
    result: dict[str, Any] = {"a": name_a, "b": name_b, **changes}
    given = None if inputs_a is None and inputs_b is None else diff_states(inputs_a, inputs_b)
    if given is not None:
        result["inputs"] = given
    if args.json:
        print(dumps(result))
        return 0
    print(f"--- {name_a}\n+++ {name_b}")
    paint = color()
    _print_changes(changes, paint)
    if not any(changes.values()):
        print("(no differences)")
    if given is not None and any(given.values()):
        print("inputs:")
        _print_changes(given, paint)
    return 0


def _print_changes(changes: dict[str, Any], paint: bool) -> None:
    """One line per removed (red), added (green) and changed (yellow) path of a `diff_states`."""

    def line(code: str, text: str) -> None:
        print(f"\x1b[{code}m{text}\x1b[0m" if paint else text)

    for path, value in changes["removed"].items():
        line("31", f"- {path}: {json.dumps(value, default=str)}")
    for path, value in changes["added"].items():
        line("32", f"+ {path}: {json.dumps(value, default=str)}")
    for path, change in changes["changed"].items():
        before, after = (json.dumps(change[k], default=str) for k in ("before", "after"))
        line("33", f"~ {path}: {before} -> {after}")
