"""The `agentrewind` command line: `main` parses arguments and runs one command.

`main` holds the parser and the commands that list, export, import and prune runs; `views`
the commands that read one run (tree, branches, show, diff, fork); `demo` the offline demo.
"""

from .main import main

__all__ = ["main"]
