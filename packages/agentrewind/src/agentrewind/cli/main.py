"""The `agentrewind` command line: inspect, fork, move and prune recorded runs."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..documents import (
    DocumentError,
    RunNotFoundError,
    emit,
    export_run,
    import_run,
    parse,
)
from ..errors import AgentRewindError
from ..plugins import load_group
from ..records import RunMetrics
from ..stores import default_url
from ..timeline import Timeline
from ..tree import short_id
from . import views as views
from .demo import run_demo
from .views import dumps, open_store


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_demo(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        run_demo(store)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from ..ui import cmd_ui  # the viewer is imported only by its own command

    return cmd_ui(args)


def _run_json(r: Any, source: str = "agentrewind") -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "source": source,
        "status": r.status,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "expires_at": r.expires_at,
        "metrics": r.metrics.as_dict(),
    }


def _cmd_runs(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        runs = views.all_runs(store, args.limit)
    if args.json:
        print(dumps([_run_json(r, source) for source, r in runs]))
        return 0
    if not runs:
        print(f"no runs in {store.url} (namespace {store.namespace})")
        return 0
    print(f"{'RUN':<36} {'SOURCE':<12} {'STATUS':<10} {'STEPS':>5} {'REPLAYED':>8}  UPDATED")
    for source, r in runs:
        print(
            f"{r.run_id:<36} {source:<12} {r.status:<10} {r.metrics.steps:>5} "
            f"{r.metrics.replay_hits:>8}  {_when(r.updated_at)}"
        )
    return 0


def _cmd_log(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        source, steps = views.run_steps(store, args.run)
        if args.branch:
            wanted = {c.id for c in Timeline(args.run, store=store, events=False).history(
                args.branch, limit=args.limit or 1_000_000_000)}  # fmt: skip
            steps = [s for s in steps if s.step_id in wanted]
    if args.limit:
        steps = steps[-args.limit :]
    if args.json:
        print(dumps([views.step_json(s) for s in steps]))
        return 0
    print(f"run {args.run} ({source}): {len(steps)} step(s)")
    for s in steps:
        ms = float(s.meta.get("duration", 0.0) or 0.0) * 1000
        label = s.meta.get("description") or s.name
        print(
            f"{s.seq:>5}  {s.status:<9} {s.kind:<10} {label[:40]:<40} {ms:8.1f} ms  "
            f"{short_id(s.step_id)}"
        )
    return 0


def _cmd_metrics(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.run:
            info = store.get_run(args.run)
            if info is None:
                raise RunNotFoundError(
                    f"no run {args.run!r} in {store.url} (namespace {store.namespace})"
                )
            runs = [info]
        else:
            runs = store.list_runs(limit=1_000_000)
    total = RunMetrics()
    for r in runs:
        total.add(r.metrics)
    if args.json:
        print(dumps({**total.as_dict(), "runs": len(runs)}))
        return 0
    print(f"runs             {len(runs)}")
    print(f"steps recorded   {total.steps}")
    print(f"replay hits      {total.replay_hits}")
    print(f"seconds saved    {total.seconds_saved:.3f}")
    print(f"tokens saved     {total.tokens_saved}")
    print(f"failures         {total.failures}")
    print(f"reruns           {total.reruns}")
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        deleted = store.prune(
            keep_last=args.keep_last, older_than=args.older_than, force=args.force
        )
    skipped = list(deleted.skipped)
    if args.json:
        print(dumps({"deleted": int(deleted), "skipped": skipped}))
        return 0
    print(f"deleted {int(deleted)} run(s)")
    if skipped:
        print(
            f"skipped {len(skipped)} run(s) another process is driving (live lease): "
            f"{', '.join(skipped)}; pass --force to delete them anyway"
        )
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        doc = export_run(
            store,
            args.run,
            task_summary=args.task_summary,
            retry_strategy=args.retry_strategy,
            executor_hint=args.executor_hint,
            remaining_steps=args.remaining or None,
        )
    text = emit(doc)
    if args.output and args.output != "-":
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"exported run {args.run} ({len(doc.steps)} step(s), {doc.status}) to {args.output}")
    else:
        print(text)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        doc = parse(raw)
    except DocumentError as exc:
        if args.json:
            print(dumps({"valid": False, "issues": [vars_of(i) for i in exc.issues]}))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with open_store(args) as store:
        run_id = import_run(store, doc, run_id=args.run_id, replace=args.replace, force=args.force)
    if args.json:
        print(dumps({"valid": True, "run_id": run_id, "steps": len(doc.steps)}))
    else:
        print(f"imported run {run_id} ({len(doc.steps)} step(s), {doc.status}) into {store.url}")
    return 0


def vars_of(issue: Any) -> dict[str, str]:
    """A validation issue as JSON data."""
    return {"field": issue.field, "message": issue.message}


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the `agentrewind` command."""
    parser = argparse.ArgumentParser(prog="agentrewind", description=__doc__)
    parser.add_argument("--store", default=None, help=f"store URL (default: {default_url()})")
    parser.add_argument("--namespace", default=None, help="store namespace (default: default)")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, *, listing: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if listing:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    command("demo", "offline demo: a run fails and resumes with replay; a timeline branches "
            "and merges", listing=False)  # fmt: skip
    p = command("runs", "list runs (and runs of installed run sources), newest first")
    p.add_argument("--limit", type=int, default=50)
    p = command("log", "list the steps of a run")
    p.add_argument("run")
    p.add_argument("--branch", help="only the history of this timeline branch")
    p.add_argument("--limit", type=int, default=0, help="only the last N steps")
    p = command("tree", "show a run's steps as a tree (branches, statuses, ids)")
    p.add_argument("run")
    p = command("branches", "list a run's branches and their heads")
    p.add_argument("run")
    p = command("show", "show one step: fields, meta and output")
    p.add_argument("run")
    p.add_argument("step", help="step id, its last digits, or a branch name")
    p = command("diff", "compare two states: RUN, RUN@STEP or RUN@BRANCH (or refs with --run)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--run", help="A and B are steps or branches of this run")
    p = command("metrics", "steps, replay hits, tokens and seconds saved, failures")
    p.add_argument("run", nargs="?")
    p = command("fork", "copy a run's history up to a step into a new run")
    p.add_argument("run")
    p.add_argument("--at", required=True, help="the last step to copy")
    p.add_argument("--to", required=True, help="the new run id")
    p = command("prune", "delete expired, old or surplus runs")
    p.add_argument("--keep-last", type=int, default=None)
    p.add_argument("--older-than", type=float, default=None, help="seconds since last write")
    p.add_argument(
        "--force", action="store_true", help="also delete runs another process is driving"
    )
    p = command("export", "write a run as a portable JSON document", listing=False)
    p.add_argument("run")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.add_argument("--task-summary")
    p.add_argument("--retry-strategy", choices=["resume", "restart", "escalate"])
    p.add_argument("--executor-hint")
    p.add_argument("--remaining", action="append", help="a step still to do (repeatable)")
    p = command("import", "validate a run document and import it into the store")
    p.add_argument("file", help="document path, or - for stdin")
    p.add_argument("--run-id", help="import under another run id")
    p.add_argument("--replace", action="store_true", help="replace an existing run")
    p.add_argument(
        "--force", action="store_true", help="with --replace: even a run another process drives"
    )
    p = command("ui", "serve a local read-only web viewer of the store", listing=False)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8642, help="port (0: a free one; default: 8642)")
    for register in load_group("agentrewind.cli_commands"):
        register(sub)
    return parser


_COMMANDS = {
    "demo": _cmd_demo,
    "runs": _cmd_runs,
    "log": _cmd_log,
    "tree": views.cmd_tree,
    "branches": views.cmd_branches,
    "show": views.cmd_show,
    "diff": views.cmd_diff,
    "metrics": _cmd_metrics,
    "fork": views.cmd_fork,
    "prune": _cmd_prune,
    "export": _cmd_export,
    "import": _cmd_import,
    "ui": _cmd_ui,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentrewind` command.

    Returns 0 on success, 1 for an unknown run or step or an invalid document, 2 when the
    store cannot be reached or another error stops the command.
    """
    args = build_parser().parse_args(argv)
    try:
        handler = _COMMANDS.get(args.command) or args.func
        return int(handler(args))
    except RunNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (AgentRewindError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - `agentrewind log | head`
        return 0
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error: input nested deeper than Python's recursion limit", file=sys.stderr)
        return 2
    except Exception as exc:  # one line, never a traceback (the CLI is a user interface)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
