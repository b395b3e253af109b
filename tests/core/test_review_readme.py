"""Review: the README's timeline example is the file the example test runs, word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_timeline_block_is_examples_timeline_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The timeline", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    example = (ROOT / "examples" / "timeline_example.py").read_text(encoding="utf-8")
    assert match.group(1).strip() in example
