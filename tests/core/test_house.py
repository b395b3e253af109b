"""The core's house rules (issue 10): no import circle, adapters import only public names,
the public names of 0.1 are still importable, one meaning of `step`."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentrewind

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "packages" / "agentrewind" / "src" / "agentrewind"
ADAPTERS = ROOT / "adapters"

# `agentrewind.__all__` of 0.1.0 (before the move into subpackages)
PUBLIC_0_1 = [
    "AdapterNotFoundError", "AgentRewindError", "AlternativePathStrategy", "Branch", "Call",
    "CallEvent", "Checkpoint", "CheckpointContext", "Codec", "CompositeStrategy",
    "CorruptRecordError", "DegradeGracefully", "DivergenceError", "DivergenceWarning",
    "DocumentError", "IncompleteStepError", "MemoryStore", "Middleware", "RecordedStepError",
    "RecoveryError", "RecoveryStrategy", "Retry", "RetryWithBackoff", "Run", "RunContext",
    "RunDocument", "RunInfo", "RunLockedError", "RunMetrics", "RunNotFoundError", "SQLiteStore",
    "SchemaVersionError", "SerializationError", "Serializer", "StepRecord", "Store",
    "StoreBusyError", "StoreError", "StoreUnavailableError", "Subscription", "Timeline",
    "TimelineError", "TimelineEvent", "ValidationIssue", "__version__", "checkpoint_context",
    "connect", "current_run", "diff_states", "emit", "export_run", "fork_run", "get_timeline",
    "idempotency_key", "import_run", "parse", "register_codec", "resume_from", "step", "validate",
]  # fmt: skip
ADAPTERS_0_1 = {
    "agentrewind_langchain": ["ALLOWED_OBJECTS", "REPLAYED_TAG", "RUN_ID_KEY", "Middleware",
                              "RewindAgentMiddleware", "RewindRunnable", "install",
                              "resolve_run_id"],
    "agentrewind_langgraph": ["RewindSaver", "migrate_sqlite_saver"],
    "agentrewind_llamaindex": ["ADAPTER", "LlamaIndexAdapter", "Middleware", "RewindRuntime",
                               "RewindWorkflow", "check_workflows_version", "install_call_hooks"],
    # added in 0.1.x (issue 29)
    "agentrewind_pydantic_ai": ["ADAPTER", "JournalValueError", "Middleware", "NoRunError",
                                "PydanticAIAdapter", "RewindAgent", "RewindDurability",
                                "RewindOperationBackend"],
}  # fmt: skip


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, src: Path) -> list[str]:
    """Absolute names of every module `path` imports, wherever the import statement sits
    (module level, `if TYPE_CHECKING:`, or inside a function)."""
    name = _module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(target)
            # `from pkg import module` imports the module itself
            found += [f"{target}.{a.name}" for a in node.names]
    return found


def _core_graph() -> dict[str, set[str]]:
    src = CORE.parent
    modules = {_module_name(p, src): p for p in CORE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {d for d in _imports(path, src) if d in modules and d != name}
        # a module may import its own package's names; a package importing its own
        # submodules is how packages are built: neither is a layering edge
        graph[name] = {
            d for d in deps if not name.startswith(f"{d}.") and not d.startswith(f"{name}.")
        }
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_core_has_no_import_circle() -> None:
    graph = _core_graph()
    assert "agentrewind.journal.run" in graph and graph["agentrewind.journal.middleware"]
    assert _find_cycle(graph) is None, " -> ".join(_find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = _core_graph()
    graph["agentrewind.errors"] = {"agentrewind.journal.middleware"}
    assert _find_cycle(graph) is not None


def test_lower_layers_never_import_higher_ones() -> None:
    layers = [
        {"errors", "ids", "diff", "tree", "serde", "records", "_flowsteps", "_callsite"},
        {"stores"},
        {"plugins", "telemetry"},
        {"journal", "timeline", "documents", "numbers"},
        {"adapters", "testing", "cli", "__main__", "ui"},
    ]
    rank = {mod: i for i, group in enumerate(layers) for mod in group}
    for name, deps in _core_graph().items():
        top = name.split(".")[1] if "." in name else ""
        if not top:
            continue  # the package's __init__ re-exports everything
        for dep in deps:
            dep_top = dep.split(".")[1] if "." in dep else ""
            assert dep_top and rank[dep_top] <= rank[top], f"{name} imports {dep}"
    # the three concepts are independent of each other
    for name, deps in _core_graph().items():
        for a, b in [("journal", "timeline"), ("timeline", "journal"), ("documents", "journal")]:
            if name.startswith(f"agentrewind.{a}"):
                assert not any(d.startswith(f"agentrewind.{b}") for d in deps), (name, deps)


def test_every_core_module_says_what_it_holds() -> None:
    for path in CORE.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text("utf-8")))
        assert doc and doc.splitlines()[0].strip(), f"{path} has no docstring"
        assert len(path.read_text("utf-8").splitlines()) <= 450, f"{path} is too long"


# -- one folder per backend (issue 22) -----------------------------------------------------------
PACKAGES = [
    CORE,
    ADAPTERS / "langgraph" / "src" / "agentrewind_langgraph",
]


def _cross_private_imports(root: Path) -> list[str]:
    """`a -> b` for each module of package `root` that imports a private module (a name
    starting with `_`, not `__init__`) of a subpackage it does not live in."""
    src = root.parent
    found = []
    for path in root.rglob("*.py"):
        name = _module_name(path, src)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for dep in _imports(path, src):
            parts = dep.split(".")
            private = [i for i, part in enumerate(parts) if part.startswith("_")]
            if not dep.startswith(f"{root.name}.") or not private:
                continue
            owner = ".".join(parts[: private[0]])  # the package the private name belongs to
            if owner != package and not package.startswith(f"{owner}."):
                found.append(f"{name} -> {'.'.join(parts[: private[0] + 1])}")
    return sorted(set(found))


def _prefixed_modules(folder: Path) -> list[str]:
    """Modules at the top of `folder` whose backend prefix does a folder's work."""
    prefixes = ("_pg_", "_redis_", "_sqlite_", "_postgres", "_redis.", "_sqlite.")
    return sorted(p.name for p in folder.glob("*.py") if p.name.startswith(prefixes))


def test_no_subpackage_imports_another_subpackages_private_module() -> None:
    for root in PACKAGES:
        assert _cross_private_imports(root) == [], root.name


def test_the_cross_private_check_catches_a_planted_import(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    for folder in (root / "a", root / "b"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text('"""x"""\n')
    (root / "__init__.py").write_text('"""x"""\n')
    (root / "a" / "_inner.py").write_text('"""x"""\n')
    (root / "a" / "mod.py").write_text("from . import _inner\n")  # its own: fine
    (root / "b" / "mod.py").write_text("from ..a._inner import x\nfrom ..a import _inner\n")
    assert _cross_private_imports(root) == ["pkg.b.mod -> pkg.a._inner"]


def test_each_backend_is_a_folder_not_a_prefix() -> None:
    assert _prefixed_modules(CORE / "stores") == []
    assert _prefixed_modules(PACKAGES[1]) == []
    for backend in ("sqlite", "redis", "postgres"):
        assert (CORE / "stores" / backend / "__init__.py").is_file()
        assert (PACKAGES[1] / backend / "__init__.py").is_file()


def test_the_prefix_check_catches_a_planted_module(tmp_path: Path) -> None:
    (tmp_path / "_pg_thing.py").write_text("")
    (tmp_path / "_redis_keys.py").write_text("")
    (tmp_path / "leases.py").write_text("")
    assert _prefixed_modules(tmp_path) == ["_pg_thing.py", "_redis_keys.py"]


def test_the_core_keeps_at_most_twelve_modules_at_its_top() -> None:
    top = [p.stem for p in CORE.glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 12, sorted(top)


def test_moved_modules_keep_their_public_import_paths() -> None:
    from agentrewind.encryption import Encryption

    from agentrewind.serde.encryption import Encryption as Moved
    from agentrewind.stores import SQLiteStore
    from agentrewind.stores.sqlite_db import SQLiteDatabase
    from agentrewind.testing import StoreConformance

    assert Encryption is Moved and SQLiteStore.__module__ == "agentrewind.stores.sqlite.store"
    assert SQLiteDatabase.__name__ == "SQLiteDatabase" and StoreConformance is not None


ALLOWED_FOR_ADAPTERS = {"agentrewind", "agentrewind.adapters"}


def _core_modules_imported(path: Path) -> list[str]:
    """Core modules an adapter file imports (`from agentrewind.x import y` -> `agentrewind.x`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
            if node.module == "agentrewind":  # `from agentrewind import _ids` is a module too
                found += [f"agentrewind.{a.name}" for a in node.names if a.name.startswith("_")]
    return [m for m in found if m == "agentrewind" or m.startswith("agentrewind.")]


def test_adapters_import_only_public_core_names() -> None:
    files = list(ADAPTERS.glob("*/src/**/*.py"))
    assert len(files) > 20
    offenders = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module in _core_modules_imported(path)
        if module not in ALLOWED_FOR_ADAPTERS
    ]
    assert offenders == []


def test_the_private_import_check_catches_one(tmp_path: Path) -> None:
    fake = tmp_path / "mod.py"
    fake.write_text(
        "from agentrewind.stores.base import Store\nimport agentrewind._ids\n"
        "from agentrewind import _ids, Run\nfrom agentrewind.adapters import Call\n"
    )
    found = set(_core_modules_imported(fake)) - ALLOWED_FOR_ADAPTERS
    assert found == {"agentrewind.stores.base", "agentrewind._ids"}


def test_public_names_of_0_1_are_still_importable() -> None:
    for name in PUBLIC_0_1:
        assert hasattr(agentrewind, name), name
        assert name in agentrewind.__all__, name
    assert "checkpointed" in agentrewind.__all__


@pytest.mark.skipif(os.environ.get("AGENTREWIND_CORE_ONLY") == "1", reason="needs the adapters")
@pytest.mark.parametrize("module", sorted(ADAPTERS_0_1))
def test_adapter_public_names_are_still_importable(module: str) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(f"{module} is not installed in this session: {exc}")
    for name in ADAPTERS_0_1[module]:
        assert hasattr(mod, name), f"{module}.{name}"


def test_adapters_module_exports_what_it_lists() -> None:
    import agentrewind.adapters as api

    assert api.__all__ == sorted(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.Middleware is agentrewind.Middleware and api.Run is agentrewind.Run


# -- one meaning of `step` -----------------------------------------------------------------------
def test_old_timeline_spelling_names_the_new_decorator() -> None:
    with pytest.raises(TypeError, match=r"@agentrewind\.checkpointed"):
        agentrewind.step("enrich", timeline="research", max_retries=2)  # type: ignore[call-overload]


def test_step_outside_a_run_is_a_plain_call_and_creates_no_store(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import agentrewind

        @agentrewind.step
        def double(x):
            return 2 * x

        print(double(21))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "42"
    assert list(tmp_path.iterdir()) == []  # no .agentrewind/ store was created


SCRIPT = """
import sys
from pathlib import Path

import agentrewind

calls = Path(sys.argv[2])


@agentrewind.step("charge")
def charge(amount):
    with calls.open("a") as f:
        f.write(f"charge {amount}\\n")
    return {"charged": amount}


@agentrewind.step
async def notify(text):
    with calls.open("a") as f:
        f.write(f"notify {text}\\n")
    return text.upper()


async def main():
    middleware = agentrewind.Middleware(sys.argv[1])
    async with middleware.run("order-42") as run:
        first = charge(30)
        said = await notify("paid")
        if sys.argv[3] == "crash":
            raise SystemExit(3)
        print(first, said, run.metrics.replay_hits)

import asyncio
asyncio.run(main())
"""


def test_agentrewind_step_inside_a_run_replays_in_a_new_process(store_url: str, tmp_path) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("a new process cannot see a memory store")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    calls = tmp_path / "calls.txt"
    crashed = subprocess.run(
        [sys.executable, str(script), store_url, str(calls), "crash"],
        capture_output=True,
        text=True,
    )
    assert crashed.returncode == 3, crashed.stderr
    assert calls.read_text().splitlines() == ["charge 30", "notify paid"]
    with agentrewind.connect(store_url) as store:
        keys = [r.key for r in store.load_steps("order-42")]
    assert len(keys) == 2 and keys[0].startswith("custom:charge:")
    resumed = subprocess.run(
        [sys.executable, str(script), store_url, str(calls), "finish"],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "{'charged': 30} PAID 2"
    assert calls.read_text().splitlines() == ["charge 30", "notify paid"]  # nothing re-ran
