"""The CLI reference as Markdown, rendered from the argument parser (so docs never drift).

`python -m agentrewind.cli.reference > docs/cli.md` writes it; a docs build can call
`render()` from a hook instead.
"""

from __future__ import annotations

import argparse
from typing import Any

from .parser import EPILOG, build_parser

__all__ = ["commands", "render"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by name (plugin commands as registered by name only)."""
    return _subparsers(parser or build_parser([]))


def _usage(p: argparse.ArgumentParser) -> str:
    return " ".join(p.format_usage().split())[len("usage: ") :]


def _row(action: argparse.Action) -> tuple[str, str] | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
        return None
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
    else:
        name = str(action.metavar or action.dest)
    text = str(action.help or "").replace("%(default)s", str(action.default))
    choices: Any = action.choices
    if choices and not isinstance(choices, dict) and "one of" not in text:
        listed = ", ".join(f"`{c}`" for c in choices)
        if listed not in text:
            text += f" (one of {listed})"
    return f"`{name}`", text.replace("|", "\\|")


def _table(p: argparse.ArgumentParser) -> list[str]:
    rows = [r for r in map(_row, p._actions) if r is not None]
    if not rows:
        return []
    return ["| argument | meaning |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows), ""]


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole CLI reference: global options, then one section per command."""
    parser = parser or build_parser([])
    lines = [
        "# `agentrewind` command reference",
        "",
        "Generated from the argument parser by `agentrewind.cli.reference`; do not edit.",
        "",
        "```text",
        (parser.description or "").strip(),
        "```",
        "",
        "## Global options",
        "",
        *_table(parser),
        "## Exit codes",
        "",
        "```text",
        EPILOG.strip(),
        "```",
        "",
    ]
    for name, sub in commands(parser).items():
        lines += [f"## `agentrewind {name}`", "", (sub.description or "").strip(), ""]
        lines += ["```text", _usage(sub), "```", "", *_table(sub)]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
