"""Every ```python block of the README, the docs site and each distribution's README runs, twice.

Each block runs on its own, as a user would paste it, in a fresh directory and process. Blocks
that import a framework carry its name in the test id (`langchain-...`, `langgraph-...`,
`llamaindex-...`); each nox session runs its own (`-k core`, `-k langchain`...). The Redis URL
`redis://127.0.0.1:6379/0` in a block is replaced by the test session's own server and
`redis://127.0.0.1:7000/0` by its own cluster, so a block never touches a user's Redis; the
database `postgresql://postgres@127.0.0.1:5432/app` is replaced by the session's scratch one.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "packages/agentrewind/README.md",
    *sorted(ROOT.glob("adapters/*/README.md")),
]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
FRAMEWORKS = {  # first import that marks a block as needing an adapter's session
    "langgraph": ("langgraph", "agentrewind_langgraph"),
    "langchain": ("langchain", "langchain_core", "agentrewind_langchain"),
    "llamaindex": ("llama_index", "workflows", "agentrewind_llamaindex"),
    "pydantic_ai": ("pydantic_ai", "agentrewind_pydantic_ai"),
}
# Pages whose blocks sketch code for a hypothetical framework: parsed, not run.
SKETCHES = {"docs/writing-an-adapter.md"}
USER_REDIS = "redis://127.0.0.1:6379/0"
USER_CLUSTER = "redis://127.0.0.1:7000/0"  # the docs' example cluster node
USER_POSTGRES = "postgresql://postgres@127.0.0.1:5432/app"  # the docs' example database


def _framework(code: str) -> str:
    imported = set(re.findall(r"^\s*(?:from|import) ([a-zA-Z_]+)", code, re.M))
    for name, modules in FRAMEWORKS.items():
        if imported & set(modules):
            return name
    return "core"


def _blocks() -> list[pytest.ParameterSet]:
    params = []
    for path in SOURCES:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            code = m.group(1)
            rel = path.relative_to(ROOT)
            tag = "sketch" if str(rel) in SKETCHES else _framework(code)
            params.append(pytest.param(code, id=f"{tag}-{rel}:{line}"))
    return params


BLOCKS = _blocks()


def test_core_and_every_framework_have_blocks() -> None:
    tags = {p.id.split("-", 1)[0] for p in BLOCKS if p.id}
    assert tags - {"sketch"} == {"core", *FRAMEWORKS}, tags


@pytest.mark.parametrize("code", BLOCKS)
def test_block_runs(code: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if request.node.callspec.id.startswith("sketch-"):
        ast.parse(code)  # a sketch must still be valid Python
        return
    framework = _framework(code)
    if framework != "core":
        pytest.importorskip(FRAMEWORKS[framework][0].split(".")[0])
    if "redis://" in code or "rediss://" in code:
        pytest.importorskip("redis")
        if USER_REDIS in code:
            code = code.replace(USER_REDIS, request.getfixturevalue("redis_url"))
        if USER_CLUSTER in code:
            code = code.replace(USER_CLUSTER, request.getfixturevalue("redis_cluster"))
    assert "127.0.0.1:6379" not in code, "a block would touch the user's Redis"
    scratch = ""
    if USER_POSTGRES in code:  # the session's scratch database, created and dropped by it
        pytest.importorskip("psycopg")
        scratch = request.getfixturevalue("postgres_url")
        code = code.replace(USER_POSTGRES, scratch)
    rest = code.replace(scratch, "") if scratch else code
    assert "127.0.0.1:5432" not in rest, "a block would touch a database of the user's"
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "AGENTREWIND_STORE"}
    # Twice in a row, in the same directory and against the same stores: a user runs an example
    # again, and the second run meets what the first one stored.
    for attempt in ("first", "second"):
        ran = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, f"{attempt} run:\n{ran.stdout}\n{ran.stderr}"
        assert "Traceback" not in ran.stderr, f"{attempt} run:\n{ran.stderr}"
