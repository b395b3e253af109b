"""Sessions: lint, core, langchain, langgraph, llamaindex, pydantic-ai, reliability, ui, package,
docs, bench, upstream (langchain, langgraph, llamaindex, pydantic-ai).

Each session syncs its own environment from the committed uv.lock with only the extras it
tests, so the core is proven to work with no LLM framework installed and each adapter with
only its own framework.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
# Each adapter session also proves that adapter's public names of 0.1 still import.
NAMES_TEST = "tests/core/test_house.py::test_adapter_public_names_are_still_importable"
# pytest-xdist workers for the adapter sessions and every session's docs blocks, whose tests
# are isolated from each other (own tmp dirs, namespaces, free ports; each worker starts its own
# Redis servers and scratch database). Work stealing keeps both workers busy to the end.
# AGENTREWIND_TEST_WORKERS=0: one process.
WORKERS = ("-n", os.environ.get("AGENTREWIND_TEST_WORKERS", "2"), "--dist=worksteal")
nox.options.sessions = [
    "lint",
    "core",
    "langchain",
    "langgraph",
    "llamaindex",
    "pydantic-ai",
    "reliability",
    "ui",
    "package",
    "docs",
]


def sync(
    session: nox.Session,
    *extras: str,
    groups: tuple[str, ...] = ("test",),
    compile_bytecode: bool = True,
) -> None:
    """Install the locked workspace into the session's virtualenv.

    Bytecode is compiled at install (once per new virtualenv, then only what changed): the
    tests start hundreds of Python processes, and with PYTHONDONTWRITEBYTECODE set (as in this
    machine's environment) each would compile every framework module it imports again
    (importing llama-index: 5.6 s of CPU uncompiled, 2.3 s compiled). Off for the sessions
    that start few processes (lint, package, docs), where compiling costs more than it saves.
    """
    args = ["uv", "sync", "--frozen", "--no-default-groups", "--inexact"]
    if compile_bytecode:
        args.append("--compile-bytecode")
    args += [f"--extra={e}" for e in extras]
    args += [f"--group={g}" for g in groups]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


def install_pinned(session: nox.Session, locked: tuple[str, ...], deps: tuple[str, ...]) -> None:
    """Install an upstream suite's test dependencies without moving the locked frameworks under
    test: the installed packages whose `name==` starts with one of `locked` are constraints."""
    frozen = session.run("uv", "pip", "freeze", silent=True, external=True, env=_venv(session))
    constraints = Path(session.create_tmp()) / "locked.txt"
    pins = [line for line in str(frozen).splitlines() if line.startswith(locked)]
    constraints.write_text("\n".join(pins))
    session.install("-c", str(constraints), *deps)


def docs_blocks(session: nox.Session, framework: str) -> None:
    """Run the docs' code blocks that need exactly what this session installed."""
    if not session.posargs:
        session.run("pytest", "tests/docs", "-q", "-k", framework, *WORKERS)


def apt_install(session: nox.Session, binary: str, *packages: str) -> None:
    """Install Debian packages when `binary` is missing and we may (root, apt-get); a fresh
    machine's package lists may be empty, so one `apt-get update` is tried on failure."""
    if Path(binary).exists() or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    install = ("apt-get", "install", "-y", "--no-install-recommends", *packages)
    try:
        session.run(*install, external=True)
    except Exception:
        session.run("apt-get", "update", external=True)
        session.run(*install, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff (lint + format check) everywhere, mypy strict on the core."""
    # test: agentrewind.testing uses pytest
    sync(
        session, "redis", "postgres", "encryption", groups=("lint", "test"), compile_bytecode=False
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    # A user's view of the API: inferred types and the mistakes that must stay errors.
    session.run("mypy", "--strict", "tests/typing/user_script.py")


@nox.session
def core(session: nox.Session) -> None:
    """The core's tests with no LLM framework installed (stores: SQLite, Redis, PostgreSQL)."""
    sync(session, "redis", "postgres", "encryption")
    env = {"AGENTREWIND_CORE_ONLY": "1"}
    if session.posargs:
        session.run("pytest", "tests/core", *session.posargs, env=env)
    else:
        # Tests marked `solo` measure their own process (tracemalloc), where an xdist worker's
        # channel thread would allocate meanwhile: they run in a process of their own first.
        session.run("pytest", "tests/core", "-m", "solo", "-p", "no:xdist", env=env)
        session.run("pytest", "tests/core", "-m", "not solo", *WORKERS, env=env)
    docs_blocks(session, "core")


@nox.session
def langchain(session: nox.Session) -> None:
    """LangChain adapter tests (langchain-core, langchain, langgraph; SQLite, Redis, PostgreSQL)."""
    sync(
        session,
        *("redis", "postgres", "langchain", "langgraph"),
        groups=("test", "lint", "test-langchain"),
    )
    session.run("mypy", "--strict", "adapters/langchain/src", "tests/typing/langchain_script.py")
    session.run("pytest", "tests/langchain", NAMES_TEST, *WORKERS, *session.posargs)
    docs_blocks(session, "langchain")


@nox.session
def langgraph(session: nox.Session) -> None:
    """LangGraph saver tests, including langgraph-checkpoint-conformance."""
    sync(
        session,
        "redis",
        "postgres",
        "encryption",
        "langgraph",
        groups=("lint", "test", "test-langgraph"),
    )
    session.run("mypy", "--strict", "adapters/langgraph/src")
    session.run("pytest", "tests/langgraph", NAMES_TEST, *WORKERS, *session.posargs)
    docs_blocks(session, "langgraph")


@nox.session
def llamaindex(session: nox.Session) -> None:
    """LlamaIndex adapter tests (SQLite, Redis, PostgreSQL)."""
    sync(session, "redis", "postgres", "llamaindex", groups=("test", "lint", "test-llamaindex"))
    session.run("mypy", "--strict", "adapters/llamaindex/src")
    session.run("pytest", "tests/llamaindex", NAMES_TEST, *WORKERS, *session.posargs)
    docs_blocks(session, "llamaindex")


@nox.session(name="pydantic-ai")
def pydantic_ai(session: nox.Session) -> None:
    """Pydantic AI adapter tests (pydantic-ai-slim only; SQLite, Redis, PostgreSQL)."""
    sync(session, "redis", "postgres", "pydantic-ai", groups=("test", "lint", "test-pydantic-ai"))
    session.run("mypy", "--strict", "adapters/pydantic-ai/src")
    session.run("pytest", "tests/pydanticai", NAMES_TEST, *WORKERS, *session.posargs)
    docs_blocks(session, "pydantic_ai")


@nox.session
def reliability(session: nox.Session) -> None:
    """Crash (SIGKILL), lock, lease, chaos, Redis- and Postgres-failure tests (restart, PgBouncer),
    LangGraph for the saver's."""
    groups = ("test", "test-langgraph", "test-celery")
    sync(session, "redis", "postgres", "langgraph", groups=groups)
    # PgBouncer in transaction mode in front of a scratch database (the tests start their own)
    apt_install(session, "/usr/sbin/pgbouncer", "pgbouncer")
    if session.posargs:
        session.run("pytest", "tests/reliability", *session.posargs)
    else:
        # Most of these tests wait (for a lease to lapse, a worker to die): two workers overlap
        # the waits. Those marked `solo` measure timeouts to the second and run alone.
        session.run("pytest", "tests/reliability", "-m", "solo", "-p", "no:xdist")
        session.run("pytest", "tests/reliability", "-m", "not solo", *WORKERS)


@nox.session
def ui(session: nox.Session) -> None:
    """The viewer in a real browser: Debian's Chromium (apt-get install chromium) + Playwright.

    Playwright drives /usr/bin/chromium (never `playwright install`: no browser download).
    Screenshots of every page go to .artifacts/ui/.
    """
    sync(session, "redis", "langgraph", groups=("test", "ui-test", "test-langgraph"))
    apt_install(session, "/usr/bin/chromium", "chromium", "chromium-driver")
    # Without Chromium (no root, no apt) the browser tests skip and say why, unless
    # AGENTREWIND_REQUIRE_BROWSER=1 (set by .ci/run) turns the skip into a failure.
    env = {"AGENTREWIND_REQUIRE_BROWSER": os.environ.get("AGENTREWIND_REQUIRE_BROWSER", "0")}
    session.run("pytest", "tests/ui", "tests/core/test_ui_api.py", *session.posargs, env=env)


@nox.session
def package(session: nox.Session) -> None:
    """Build every wheel and sdist; check LICENSE, README, metadata, pins; run the core wheel."""
    sync(session, compile_bytecode=False)
    session.run("pytest", "tests/packaging", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs site with `mkdocs build --strict` (the CLI page needs every adapter)."""
    sync(session, "all", groups=("docs",), compile_bytecode=False)
    session.run("mkdocs", "build", "--strict", "--site-dir", f"{session.create_tmp()}/site")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print our figures beside the anchors'."""
    sync(session, "all", groups=("test", "bench"))
    session.run("python", "benchmarks/core_bench.py", *session.posargs)
    session.run("python", "benchmarks/timeline_bench.py", "--stores", "memory,sqlite,redis")
    session.run("python", "benchmarks/langchain_bench.py")
    session.run("python", "benchmarks/langchain_multicall.py")
    session.run("python", "benchmarks/langgraph_bench.py", "--quick")
    session.run("python", "benchmarks/async_bench.py", "--quick")
    session.run("python", "benchmarks/postgres_bench.py", "--quick")
    session.run("python", "benchmarks/workflow_bench.py")
    session.run("python", "benchmarks/queue_bench.py", "--quick")
    session.run("python", "benchmarks/pydantic_ai_bench.py")


UPSTREAM_LANGCHAIN_TEST_DEPS = (
    "pip",  # downloads the sdists the tests ship in
    "pytest-asyncio",
    "pytest-mock",
    "pytest-socket",
    "pytest-benchmark",
    "freezegun",
    "syrupy>=5,<6",
    "responses",
    "blockbuster>=1.5.26,<1.6",
    "grandalf",
    "numpy",
    "toml",
    "langchain-tests>=1.1.9,<2",
    "langchain-openai",
    "fastmcp>=4.0.11,<5",
)


def _venv(session: nox.Session) -> dict[str, str]:
    return {"VIRTUAL_ENV": session.virtualenv.location}


@nox.session(name="upstream-langchain", tags=["upstream"], default=False)
def upstream_langchain(session: nox.Session) -> None:
    """langchain-core's runnable tests and langchain's agent tests, outermost runnable wrapped.

    Not in the default run. Prints the tests that fail wrapped (SQLite, Redis) but pass
    unwrapped; arguments after `--` go to tests/upstream/langchain_upstream.py.
    """
    sync(session, "redis", "langchain", "langgraph", groups=("test", "test-langchain"))
    install_pinned(
        session, ("langchain-core==", "langchain==", "langgraph"), UPSTREAM_LANGCHAIN_TEST_DEPS
    )
    session.run("python", "tests/upstream/langchain_upstream.py", *session.posargs)


UPSTREAM_PYDANTIC_AI_TEST_DEPS = (
    "pytest-mock",
    "pytest-timeout",
    "dirty-equals",
    "inline-snapshot",
    "vcrpy",
    "pytest-recording",
    "brotli",
    "httpx",
    "httpx2",
    "anyio",
    "pyyaml",
    "blockbuster>=1.5.26,<1.6",
)


@nox.session(name="upstream-pydantic-ai", tags=["upstream"], default=False)
def upstream_pydantic_ai(session: nox.Session) -> None:
    """pydantic-ai's agent and durable-execution tests with every agent wrapped (not default).

    Prints the tests that fail wrapped (SQLite journal per test) but pass unwrapped, each
    wrapped-only failure beside its known cause. The tests are not in pydantic-ai's sdists and
    the session fetches none: pass a checkout's tests folder after `--`
    (`-- --tests <pydantic-ai>/tests`) or set $AGENTREWIND_UPSTREAM_PYDANTIC_AI_TESTS; without
    one it stops with a BLOCKED line before installing anything (see CONTRIBUTING.md).
    """
    given = any(a == "--tests" or a.startswith("--tests=") for a in session.posargs)
    if not given and not os.environ.get("AGENTREWIND_UPSTREAM_PYDANTIC_AI_TESTS"):
        session.error(
            "BLOCKED: no pydantic-ai tests given (its sdists ship none; nothing is fetched). "
            "Check out pydantic/pydantic-ai at the tag of the locked pydantic-ai-slim (or the "
            "nearest) and run `nox -s upstream-pydantic-ai -- --tests <checkout>/tests`"
        )
    sync(session, "pydantic-ai", groups=("test", "test-pydantic-ai"))
    install_pinned(session, ("pydantic",), UPSTREAM_PYDANTIC_AI_TEST_DEPS)
    session.run("python", "tests/upstream/pydantic_ai_upstream.py", *session.posargs)


UPSTREAM_LANGGRAPH_TEST_DEPS = (
    "pip",  # downloads the sdist the tests ship in
    "pytest-mock",
    "syrupy>=4",
    "pytest-repeat",
    "pycryptodome",  # the conftest's AES saver (imported, not run)
    "httpx",
)


@nox.session(name="upstream-langgraph", tags=["upstream"], default=False)
def upstream_langgraph(session: nox.Session) -> None:
    """LangGraph's engine tests with RewindSaver as their checkpointer (not default).

    Prints the tests that fail with RewindSaver (SQLite, Redis, Redis Cluster, PostgreSQL)
    but pass with InMemorySaver; arguments after `--` go to
    tests/upstream/langgraph_upstream.py.
    """
    sync(session, "redis", "postgres", "langgraph", groups=("test", "test-langgraph"))
    install_pinned(session, ("langchain-core==", "langgraph"), UPSTREAM_LANGGRAPH_TEST_DEPS)
    session.run("python", "tests/upstream/langgraph_upstream.py", *session.posargs)


@nox.session(name="upstream-llamaindex", tags=["upstream"], default=False)
def upstream_llamaindex(session: nox.Session) -> None:
    """llama-index-workflows' own tests with every workflow wrapped (not in the default run).

    Prints the tests that fail wrapped (SQLite, Redis) but pass unwrapped. The tests come from
    the installed version's sdist, else a pinned older sdist (see
    tests/upstream/llamaindex_upstream.py), else `-- --tests <workflows-py>/packages/
    llama-index-workflows/tests`.
    """
    sync(session, "redis", "llamaindex", groups=("test", "test-llamaindex"))
    # pip fetches the sdists; time-machine is imported by the suite's runtime tests
    session.install("pip", "time-machine<3")
    session.run("python", "tests/upstream/llamaindex_upstream.py", *session.posargs)
