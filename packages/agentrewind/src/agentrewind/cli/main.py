"""The `agentrewind` command line: parse, run one command, map failures to exit codes.

Every failure is one line on stderr and a documented exit code (see `common.EXIT_*`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..documents import DocumentError, RunNotFoundError
from ..errors import AgentRewindError, StoreError
from . import caching, deleting, listing, moving, views
from .common import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_STORE, CliError, open_store
from .parser import build_parser

__all__ = ["build_parser", "main"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    with open_store(args, write=True) as store:
        run_demo(store)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from ..ui import cmd_ui  # the viewer is imported only by its own command

    return cmd_ui(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _cmd_demo,
    "runs": listing.cmd_runs,
    "log": views.cmd_log,
    "tree": views.cmd_tree,
    "branches": views.cmd_branches,
    "show": views.cmd_show,
    "diff": views.cmd_diff,
    "metrics": listing.cmd_metrics,
    "fork": moving.cmd_fork,
    "rm": deleting.cmd_rm,
    "prune": deleting.cmd_prune,
    "export": moving.cmd_export,
    "import": moving.cmd_import,
    "ui": _cmd_ui,
    "cancel": lambda args: _worker().cmd_cancel(args),
    "resume": lambda args: _worker().cmd_resume(args),
    "worker": lambda args: _worker().cmd_worker(args),
    "cache": caching.cmd_cache,
    "queues": lambda args: _worker().cmd_queues(args),
}


def _worker() -> Any:
    from . import worker  # imports the journal only for these commands

    return worker


def _fail(message: object, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentrewind` command; returns the exit code.

    Exit codes: 0 success; 1 not found (run, step, file) or invalid input (document,
    refused change); 2 usage error; 3 store unavailable or busy; 130 interrupted.
    """
    try:
        args = build_parser(argv).parse_args(argv)
        handler = _COMMANDS.get(args.command) or args.func
        return int(handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RunNotFoundError, DocumentError, CliError, ValueError) as exc:
        return _fail(exc, EXIT_NOT_FOUND)
    except (StoreError, ImportError) as exc:
        return _fail(exc, EXIT_STORE)
    except AgentRewindError as exc:
        return _fail(exc, EXIT_NOT_FOUND)
    except BrokenPipeError:  # `agentrewind log RUN | head`: no flush error at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        return _fail(exc, EXIT_STORE)
    except RecursionError:
        return _fail("input nested deeper than Python's recursion limit", EXIT_NOT_FOUND)
    except Exception as exc:  # one line, never a traceback (the CLI is a user interface)
        return _fail(f"{type(exc).__name__}: {exc}", EXIT_NOT_FOUND)


if __name__ == "__main__":
    sys.exit(main())
