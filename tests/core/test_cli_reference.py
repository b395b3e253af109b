"""The CLI reference is rendered from the parser: every command, every argument, with help."""

from __future__ import annotations

import argparse

from agentrewind.cli.parser import CORE_COMMANDS, build_parser
from agentrewind.cli.reference import commands, render


def test_reference_covers_every_command_and_argument() -> None:
    parser = build_parser([])
    text = render(parser)
    subs = commands(parser)
    assert set(CORE_COMMANDS) <= set(subs)
    assert "$AGENTREWIND_STORE" in text and "## Exit codes" in text and "130" in text
    for name, sub in subs.items():
        assert f"## `agentrewind {name}`" in text, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name}: {action.dest} has no help"
            shown = action.option_strings[0] if action.option_strings else action.metavar
            assert f"`{shown}" in text, (name, shown)
    for action in parser._actions:
        assert action.help, f"global {action.dest} has no help"
