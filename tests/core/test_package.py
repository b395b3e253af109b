from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec

import pytest

import agentrewind
from agentrewind import AdapterNotFoundError, Middleware


def test_all_is_sorted_and_complete() -> None:
    names = agentrewind.__all__
    assert names == sorted(names)
    public = {n for n in dir(agentrewind) if not n.startswith("_")}
    modules = {"errors", "journal", "records", "serde", "stores", "plugins", "cli", "ids"}
    modules |= {
        "documents",
        "timeline",
        "diff",
        "tree",
        "adapters",
        "testing",
        "encryption",
        "tags",
        "telemetry",
        "numbers",
        "ui",
    }
    assert public - modules - {"annotations"} <= set(names) | {"__version__"}
    for name in names:
        assert hasattr(agentrewind, name), name


def test_import_is_light() -> None:
    mods = ("redis", "langchain_core", "llama_index", "langgraph")
    code = f"import sys, agentrewind; print([m for m in {mods!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "redis" not in out and "langchain_core" not in out and "llama_index" not in out


@pytest.mark.skipif(
    os.environ.get("AGENTREWIND_CORE_ONLY") != "1", reason="only in the core session"
)
def test_no_framework_installed_in_core_session() -> None:
    from importlib.metadata import PackageNotFoundError, distribution

    for dist in (
        "langchain-core",
        "langgraph",
        "llama-index-core",
        "llama-index-workflows",
        "wrapt",
    ):
        with pytest.raises(PackageNotFoundError):
            distribution(dist)


def test_wrap_without_adapter_names_the_extra() -> None:
    mw = Middleware("memory://")
    fake = type("Runnable", (), {"__module__": "langchain_core.runnables.base"})()
    if find_spec("agentrewind_langchain") is None:
        with pytest.raises(AdapterNotFoundError, match=r"agentrewind\[langchain\]"):
            mw.wrap(fake)
    with pytest.raises(AdapterNotFoundError, match=r"middleware\.run"):
        mw.wrap(object())
    with pytest.raises(TypeError):  # AdapterNotFoundError is a TypeError too
        mw.wrap(42)


def test_invalid_policy() -> None:
    with pytest.raises(ValueError, match="on_incomplete"):
        Middleware("memory://", on_incomplete="maybe")  # type: ignore[arg-type]


def test_demo_runs_offline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "AGENTREWIND_STORE": ""}
    out = subprocess.run(
        [sys.executable, "-m", "agentrewind.cli", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "replayed  custom:fetch_order" in out.stdout
    assert "executed  custom:send_receipt" in out.stdout
    assert (tmp_path / ".agentrewind" / "agentrewind.db").exists()
