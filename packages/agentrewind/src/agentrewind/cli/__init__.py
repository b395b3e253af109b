"""The `agentrewind` command line: `main` parses arguments and runs one command.

`parser` declares every command and option; `main` runs one and maps failures to exit codes;
`listing` (runs, metrics), `views` (log, tree, branches, show, diff), `moving` (export,
import, fork) and `deleting` (rm, prune) hold the commands; `sources` finds runs and names
steps; `status` tells kinds, counts and crashed runs; `formats` writes Mermaid, DOT and JSON
Patch; `reference` renders the parser as Markdown; `demo` is the offline demo.
"""

from .main import main

__all__ = ["main"]
