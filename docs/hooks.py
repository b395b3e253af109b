"""MkDocs hooks: pages generated from the code, so the reference cannot drift from it.

- `<!-- cli-reference -->`: every command of `agentrewind`, with its help, from the argparse
  parser itself.
- `<!-- api-reference -->`: a `:::` directive for every name in `agentrewind.__all__`.
- `<!-- exception-hierarchy -->`: the tree of agentrewind's exceptions and warnings.
- `<!-- changelog -->`: CHANGELOG.md from the repository root.
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _cli_reference() -> str:
    from agentrewind.cli.main import build_parser

    parser = build_parser()
    parts = ["```text", parser.format_help().rstrip(), "```"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [f"### `agentrewind {name}`", "", "```text"]
                parts += [sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def public_api() -> list[str]:
    """The names the API page documents: `agentrewind.__all__` less dunder names."""
    import agentrewind

    return [n for n in agentrewind.__all__ if not n.startswith("__")]


def _api_reference() -> str:
    import agentrewind

    groups: dict[str, list[str]] = {"Classes": [], "Functions": [], "Exceptions and warnings": []}
    for name in public_api():
        obj = getattr(agentrewind, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            groups["Exceptions and warnings"].append(name)
        elif inspect.isclass(obj):
            groups["Classes"].append(name)
        else:
            groups["Functions"].append(name)
    parts: list[str] = []
    for title, names in groups.items():
        parts += [f"## {title}", ""]
        parts += [f"::: agentrewind.{n}\n" for n in sorted(names)]
    return "\n".join(parts)


def _exception_hierarchy() -> str:
    import agentrewind

    public = {
        getattr(agentrewind, n)
        for n in agentrewind.__all__
        if inspect.isclass(getattr(agentrewind, n, None))
        and issubclass(getattr(agentrewind, n), BaseException)
    }
    lines: list[str] = []

    def walk(cls: type, depth: int) -> None:
        bases = ", ".join(b.__name__ for b in cls.__bases__ if b not in public)
        extra = f" (also a `{bases}`)" if bases and depth else ""
        doc = (inspect.getdoc(cls) or "").split("\n", 1)[0]
        link = f"[`{cls.__name__}`](api.md#agentrewind.{cls.__name__})"
        lines.append(f"{'    ' * depth}- {link}{extra}: {doc}")
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            if sub in public:
                walk(sub, depth + 1)

    roots = sorted(
        (c for c in public if not any(b in public for b in c.__mro__[1:])),
        key=lambda c: (c.__name__ != "AgentRewindError", c.__name__),
    )
    for root in roots:
        walk(root, 0)
    return "\n".join(lines)


GENERATORS = {
    "<!-- cli-reference -->": _cli_reference,
    "<!-- api-reference -->": _api_reference,
    "<!-- exception-hierarchy -->": _exception_hierarchy,
    "<!-- changelog -->": lambda: (ROOT / "CHANGELOG.md").read_text(),
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each generator marker with the text generated from the code."""
    for marker, generate in GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
