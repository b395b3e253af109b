"""The `agentrewind` argument parser: every command, option and its help.

Plugin commands are registered lazily: a plugin is imported only when its command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..plugins import declared
from ..plugins import log as plugin_log
from ..stores import DEFAULT_URL
from .common import parse_duration, parse_since
from .status import KINDS, STATUSES

__all__ = ["CORE_COMMANDS", "build_parser"]

DESCRIPTION = """Inspect, fork, move and prune the runs agentrewind recorded.

The store is --store URL, else $AGENTREWIND_STORE, else {default}.
--store and --namespace may come before or after the command. Steps are named by the
sequence number `log` prints or by any unique prefix of their id (LangGraph checkpoints too).
Read commands open the store read-only and create nothing."""

EPILOG = """exit codes:
  0    success
  1    not found (run, step, file) or invalid input (document, refused change)
  2    usage error (unknown command or option, bad value)
  3    store unavailable or busy (cannot connect, missing file, locked, too new)
  130  interrupted (Ctrl-C)"""

CORE_COMMANDS = (
    "demo", "runs", "log", "tree", "branches", "show", "diff", "metrics", "fork", "rm",
    "prune", "export", "import", "ui", "cancel", "resume", "worker", "cache", "queues",
)  # fmt: skip


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("agentrewind")
        except PackageNotFoundError:  # pragma: no cover - a source checkout
            text = "unknown"
        print(f"agentrewind {text}")
        parser.exit()


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"keep_last must be 0 or more, not {n}")
    return n


def _store_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    g = p.add_argument_group("store")
    g.add_argument("--store", metavar="URL", default=default,
                   help=f"store URL: sqlite:///path.db, redis://host:port/db, "
                        f"postgresql://user@host/db, memory:// "
                        f"(default: $AGENTREWIND_STORE, else {DEFAULT_URL})")  # fmt: skip
    g.add_argument(
        "--namespace",
        metavar="NAME",
        default=default,
        help="store namespace (default: the URL's ?namespace=, else 'default')",
    )


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Return the argument parser of the `agentrewind` command.

    Args:
        argv: The command line about to be parsed: a plugin command named in it is loaded
            (imported) and registered in full; other plugin commands appear by name only.
    """
    parser = argparse.ArgumentParser(
        prog="agentrewind",
        description=DESCRIPTION.format(default=DEFAULT_URL),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    _store_options(parser, top=True)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="the command to run (below)"
    )

    def command(name: str, help: str, *, json: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        _store_options(p, top=False)
        if json:
            p.add_argument("--json", action="store_true", help="machine-readable JSON output")
        return p

    def run_arg(p: argparse.ArgumentParser, help: str = "the run id (as `runs` prints it)") -> None:
        p.add_argument("run", metavar="RUN", help=help)

    def all_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--all", action="store_true", help="also the framework's internal "
                       "bookkeeping (LangGraph's branch:to:* and __*__ channels)")  # fmt: skip

    step_help = "a step: its sequence number or a unique id prefix, as `log` prints them"
    p = command("demo", "offline demo: a run fails and resumes with replay; a timeline "
                "branches and merges", json=False)  # fmt: skip
    p = command("runs", "list runs (and LangGraph threads), newest first")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)")
    p.add_argument(
        "--status",
        action="append",
        choices=STATUSES,
        metavar="STATUS",
        help=f"only runs with this status (repeatable): {', '.join(STATUSES)}",
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        metavar="KIND",
        help=f"only runs of this kind (repeatable): {', '.join(KINDS)}",
    )
    p.add_argument("--since", type=parse_since, metavar="WHEN",
                   help="only runs updated since WHEN: a duration back from now (2h, 7d) or an "
                        "ISO-8601 time (2026-01-31T12:00:00Z)")  # fmt: skip
    p = command("log", "list the steps of a run: sequence number, status, kind, name, id")
    run_arg(p)
    p.add_argument("--branch", metavar="BRANCH", help="only the history of this timeline branch")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="only the last N steps")
    p = command("tree", "show a run's steps as a tree (branches, statuses, ids)")
    run_arg(p)
    p.add_argument(
        "--format",
        choices=["text", "mermaid", "dot"],
        default="text",
        help="text (default), a Mermaid flowchart, or a Graphviz digraph",
    )
    p = command("branches", "list a timeline's branches and their heads")
    run_arg(p)
    p = command("show", "show one step: fields, meta and output")
    run_arg(p)
    p.add_argument("step", metavar="STEP", help=step_help + ", or a branch name")
    all_arg(p)
    p = command("diff", "compare two states: RUN, RUN@STEP or RUN@BRANCH (or steps with --run)")
    p.add_argument("a", metavar="A", help="the old state: RUN, RUN@STEP, RUN@BRANCH (or STEP "
                   "with --run)")  # fmt: skip
    p.add_argument("b", metavar="B", help="the new state, written like A")
    p.add_argument("--run", metavar="RUN", help="A and B are steps or branches of this run")
    all_arg(p)
    p.add_argument(
        "--format",
        choices=["text", "json-patch"],
        default="text",
        help="text (default) or an RFC 6902 JSON Patch turning A into B",
    )
    p = command("metrics", "steps, replay hits, tokens and seconds saved, failures")
    p.add_argument("run", nargs="?", metavar="RUN", help="one run (default: every run)")
    p = command("fork", "copy a run's history up to a step into a new run")
    run_arg(p, "the run to copy from")
    p.add_argument(
        "--at", required=True, metavar="STEP", help="the last step to copy: " + step_help
    )
    p.add_argument("--to", required=True, metavar="NEW", help="the new run id")
    for name, what in (("rm", "delete runs (and LangGraph threads) by id"),
                       ("prune", "delete expired runs, runs idle too long, runs beyond the "
                                 "newest N")):  # fmt: skip
        p = command(name, what + "; lists them, asks on a terminal, reclaims space")
        if name == "rm":
            p.add_argument("runs", nargs="+", metavar="RUN", help="the runs to delete")
        else:
            p.add_argument(
                "--keep-last",
                type=_count,
                metavar="N",
                help="delete all but the N most recently updated runs",
            )
            p.add_argument(
                "--older-than",
                type=parse_duration,
                metavar="DURATION",
                help="delete runs idle longer than DURATION: 90s, 15m, 12h, 7d, 2w",
            )
            p.add_argument(
                "--expired",
                action="store_true",
                help="only purge runs whose TTL ran out (done by every prune)",
            )
        p.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
        p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
        p.add_argument(
            "--force", action="store_true", help="also delete runs whose lease a live process holds"
        )
    p = command("export", "write a run (or LangGraph thread) as a portable JSON document",
                json=False)  # fmt: skip
    run_arg(p)
    p.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    p.add_argument("--task-summary", metavar="TEXT", help="what the run was doing")
    p.add_argument(
        "--retry-strategy",
        choices=["resume", "restart", "escalate"],
        help="how whoever picks the run up should go on",
    )
    p.add_argument("--executor-hint", metavar="TEXT", help="who or what should resume it")
    p.add_argument(
        "--remaining", action="append", metavar="STEP", help="a step still to do (repeatable)"
    )
    p = command("import", "validate a run document and import it into the store")
    p.add_argument("file", metavar="FILE", help="document path, or - for stdin")
    p.add_argument("--run-id", metavar="RUN", help="import under another run id")
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace an existing run of that id whose content differs",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --replace: even a run another process drives (holds its lease)",
    )
    p = command("cache", "the cross-run cache: per call site statistics, or clear it")
    p.add_argument("action", choices=["stats", "clear"], metavar="ACTION",
                   help="stats: entries, bytes, hits, misses, hit rate, seconds and tokens "
                        "saved per call site; clear: drop entries and statistics")  # fmt: skip
    p.add_argument("--site", metavar="SITE", help="only this call site (kind:name, as "
                   "`cache stats` lists it)")  # fmt: skip
    p = command("queues", "durable queues: waiting (delayed), in flight, oldest waiting")
    p.add_argument("name", nargs="?", metavar="QUEUE", help="only this queue")
    p.add_argument("--app", metavar="MODULE:ATTR", help="the Middleware that declares the "
                   "queues: their limits are shown too")  # fmt: skip
    p = command("ui", "serve a local read-only web viewer of the store", json=False)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8642, help="port (0: a free one; default: 8642)")
    _lifecycle_commands(command)
    _plugin_commands(sub, command, sys.argv[1:] if argv is None else list(argv))
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def _lifecycle_commands(command: Callable[..., Any]) -> None:
    p = command("cancel", "cancel runs: each owner stops at its next step; never recovered",
                json=False)  # fmt: skip
    p.add_argument("runs", nargs="+", metavar="RUN", help="the runs to cancel")
    p = command("resume", "clear a run's cancel mark (with --app: run its workflow here)",
                json=False)  # fmt: skip
    p.add_argument("run", metavar="RUN", help="the cancelled run")
    p.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="the middleware that registers the run's workflow: resume it in this process "
        "(its store, not --store); without it a worker or recover() resumes the run",
    )
    p = command("worker", "run queued workflow runs as their queues allow, and recover "
                "crashed ones", json=False)  # fmt: skip
    p.add_argument(
        "app",
        metavar="MODULE:ATTR",
        help="the Middleware (or a function returning it) that registers the workflows; "
        "MODULE is imported with the current directory on the path",
    )
    p.add_argument(
        "-q",
        "--queue",
        dest="queues",
        action="append",
        default=[],
        metavar="NAME",
        help="take runs from this queue (repeatable; declared in MODULE with "
        "middleware.queue(NAME, ...))",
    )
    p.add_argument("-c", "--concurrency", type=_count, default=4, help="runs at once (default: 4)")
    p.add_argument(
        "--poll", type=_positive, default=1.0, help="seconds between looks at the store when idle"
    )
    p.add_argument(
        "--no-recover",
        dest="recover",
        action="store_false",
        help="only take queued runs; leave crashed runs of other workflows alone",
    )
    p.add_argument(
        "--drain-timeout",
        type=_positive,
        default=30.0,
        help="seconds to wait on SIGTERM/SIGINT for runs in flight to reach their next step",
    )
    p.add_argument(
        "--once", action="store_true", help="exit when nothing is left to run (no polling)"
    )


def _plugin_commands(sub: Any, command: Callable[..., Any], argv: list[str]) -> None:
    """Register `agentrewind.cli_commands` plugins: by name only, unless named in `argv`.

    An entry point's name is its command's name. A plugin is imported only when its command
    is on the command line (or when a command nobody else knows is, for plugins whose
    entry point is named otherwise), so `--help` and `runs` import no framework.
    """
    eps = list(declared("agentrewind.cli_commands"))
    if not eps:
        return
    words = [a for a in argv if not a.startswith("-")]
    known = {*CORE_COMMANDS, *(ep.name for ep in eps)}
    unknown = bool(words) and not any(w in known for w in words)
    loaded: set[str] = set()
    for ep in eps:
        if ep.name in CORE_COMMANDS or ep.name in sub.choices:
            continue
        if (ep.name in words or unknown) and ep.value not in loaded:
            loaded.add(ep.value)  # one register() may add several commands
            try:
                ep.load()(sub)
                continue
            except Exception as exc:  # one broken plugin must not break the CLI
                plugin_log.warning("agentrewind CLI plugin %s failed to load: %s", ep.name, exc)
        if ep.name not in sub.choices:
            dist = getattr(ep.dist, "name", None) or ep.value.split(":")[0]
            p = command(ep.name, f"(from {dist}; `agentrewind {ep.name} --help` tells more)",
                        json=False)  # fmt: skip
            p.set_defaults(func=_unavailable(ep.name))


def _unavailable(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from .common import CliError

        raise CliError(f"the plugin providing {name!r} failed to load (see the warning above)")

    return run
