"""The built wheels and sdists are publishable: LICENSE, a full README, metadata, pins.

Runs in the nox `package` session (it builds all four distributions with `uv build`).
"""

from __future__ import annotations

import ast
import email
import email.message
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LICENSE = (ROOT / "LICENSE").read_text()
DISTS = {
    "agentrewind": ROOT / "packages/agentrewind",
    "agentrewind_langchain": ROOT / "adapters/langchain",
    "agentrewind_langgraph": ROOT / "adapters/langgraph",
    "agentrewind_llamaindex": ROOT / "adapters/llamaindex",
    "agentrewind_pydantic_ai": ROOT / "adapters/pydantic-ai",
}
REPO = "https://github.com/agentrewind/agentrewind"


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--all-packages", "--out-dir", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    return out


def _wheel(dist_dir: Path, name: str) -> Path:
    (found,) = dist_dir.glob(f"{name}-*.whl")
    return found


def _sdist(dist_dir: Path, name: str) -> Path:
    (found,) = dist_dir.glob(f"{name}-*.tar.gz")
    return found


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (path,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_string(zf.read(path).decode("utf-8"))


@pytest.mark.parametrize("name", sorted(DISTS))
def test_wheel_and_sdist_hold_license_and_full_readme(dist_dir: Path, name: str) -> None:
    readme = (DISTS[name] / "README.md").read_text()
    assert len(readme) > 2000, f"{name}: README too short for a package page"
    # A package page has no repository files: every link is absolute.
    for target in re.findall(r"\]\(([^)]+)\)", readme):
        assert target.startswith(("https://", "#")), f"{name}: relative link {target}"
    assert (DISTS[name] / "LICENSE").read_text() == LICENSE

    with zipfile.ZipFile(_wheel(dist_dir, name)) as zf:
        licenses = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses, f"{name}: no LICENSE in the wheel"
        assert zf.read(licenses[0]).decode() == LICENSE
        assert any(n.endswith("/py.typed") for n in zf.namelist()), f"{name}: no py.typed"
    meta = _metadata(_wheel(dist_dir, name))
    assert meta.get_payload().strip() == readme.strip(), f"{name}: wheel README differs"

    with tarfile.open(_sdist(dist_dir, name)) as tf:
        members = {m.name.split("/", 1)[1]: m for m in tf.getmembers() if "/" in m.name}
        for wanted in ("LICENSE", "README.md", "pyproject.toml"):
            assert wanted in members, f"{name}: {wanted} missing from the sdist"
        extracted = tf.extractfile(members["LICENSE"])
        assert extracted is not None and extracted.read().decode() == LICENSE


@pytest.mark.parametrize("name", sorted(DISTS))
def test_metadata_for_a_package_index(dist_dir: Path, name: str) -> None:
    meta = _metadata(_wheel(dist_dir, name))
    assert meta["License-Expression"] == "MIT"
    assert meta["Author"], name
    assert meta["Keywords"], name
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL", []))
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = meta.get_all("Classifier", [])
    for wanted in ("Programming Language :: Python :: 3.11", "Typing :: Typed"):
        assert wanted in classifiers, (name, wanted)
    assert any(c.startswith("Development Status ::") for c in classifiers), name


def test_versions_move_together_and_adapters_pin_the_core_series(dist_dir: Path) -> None:
    core = _metadata(_wheel(dist_dir, "agentrewind"))
    major, minor = (int(x) for x in core["Version"].split(".")[:2])
    series = f"<{major}.{minor + 1},>={major}.{minor}.0"
    for name in sorted(DISTS):
        meta = _metadata(_wheel(dist_dir, name))
        assert meta["Version"] == core["Version"], name
        requires = meta.get_all("Requires-Dist", [])
        if name != "agentrewind":
            assert f"agentrewind{series}" in requires, (name, requires)
    extras = core.get_all("Requires-Dist", [])
    for adapter in ("langchain", "langgraph", "llamaindex", "pydantic-ai"):
        assert f"agentrewind-{adapter}{series}; extra == '{adapter}'" in extras, extras
    # What the README's examples import comes with the extra.
    assert "langchain<2,>=1.0; extra == 'langchain'" in extras, extras
    assert "langgraph<2,>=1.0; extra == 'langgraph'" in extras, extras


# Import names of third-party modules and the distribution that provides each.
PROVIDERS = {
    "redis": "redis",
    "langchain_core": "langchain-core",
    "langchain": "langchain",
    "langgraph": "langgraph-checkpoint",
    "wrapt": "wrapt",
    "pydantic": "pydantic",
    "ormsgpack": "ormsgpack",
    "workflows": "llama-index-workflows",
    "llama_index": "llama-index-core",
    "pydantic_ai": "pydantic-ai-slim",
    "pydantic_core": "pydantic-core",
    "pytest": "pytest",  # agentrewind.testing, the `testing` extra
    "psycopg": "psycopg",  # the `postgres` extra
    "psycopg_pool": "psycopg-pool",
    "cryptography": "cryptography",  # the `encryption` extra
    "opentelemetry": "opentelemetry-api",  # the `otel` extra
}


def _imports(package: Path) -> set[str]:
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("name", sorted(DISTS))
def test_every_import_is_declared(dist_dir: Path, name: str) -> None:
    meta = _metadata(_wheel(dist_dir, name))
    declared = {
        re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0].lower() for r in meta.get_all("Requires-Dist", [])
    }
    own = set(DISTS) | set(sys.stdlib_module_names) | {"_typeshed", "typing_extensions"}
    third_party = _imports(DISTS[name] / "src" / name) - own
    unknown = third_party - set(PROVIDERS)
    assert not unknown, f"{name} imports {unknown}: add them to PROVIDERS and to its pyproject"
    # `langgraph` in the LangChain adapter is a lazy import inside create_agent's runtime.
    missing = {PROVIDERS[m] for m in third_party} - declared
    if name == "agentrewind_langchain":
        missing -= {"langgraph-checkpoint"}
    assert not missing, f"{name} imports modules of undeclared distributions: {missing}"


def test_core_wheel_alone_runs_the_demo(dist_dir: Path, tmp_path: Path) -> None:
    """The core wheel in a fresh virtualenv, with no dependency at all, runs `agentrewind demo`."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    uv = shutil.which("uv")
    assert uv is not None
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--no-index", "--python", str(venv / "bin/python"),
         str(_wheel(dist_dir, "agentrewind"))],
        check=True, timeout=120,
    )  # fmt: skip
    demo = subprocess.run(
        [str(venv / "bin/agentrewind"), "demo"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert "2 call(s) not re-run" in demo.stdout


EXTRA_PAGES = {
    "langchain": "docs/getting-started/langchain.md",
    "langgraph": "docs/getting-started/langgraph.md",
    "llamaindex": "docs/getting-started/llamaindex.md",
    "pydantic-ai": "docs/getting-started/pydantic-ai.md",
}


@pytest.mark.parametrize("extra", sorted(EXTRA_PAGES))
def test_each_extra_from_the_wheels_runs_its_example(
    dist_dir: Path, tmp_path: Path, extra: str
) -> None:
    """`pip install "agentrewind[extra]"` from the built wheels in a fresh venv runs the
    framework's getting-started example as printed in the docs."""
    uv = shutil.which("uv")
    assert uv is not None
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = str(venv / "bin/python")
    # Our wheels by path (never an index's), the frameworks from uv's cache when it has them.
    wheels = [str(_wheel(dist_dir, "agentrewind")) + f"[{extra}]"]
    wheels += [str(_wheel(dist_dir, f"agentrewind_{extra.replace('-', '_')}"))]
    install = [uv, "pip", "install", "--quiet", "--python", python, *wheels]
    if subprocess.run([*install, "--offline"], check=False, capture_output=True).returncode:
        subprocess.run(install, check=True, timeout=600)
    # The demo tells the adapter's story too: it must find everything it imports.
    demo = subprocess.run(
        [str(venv / "bin/agentrewind"), "demo"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, f"{extra}: {demo.stdout}\n{demo.stderr}"
    text = (ROOT / EXTRA_PAGES[extra]).read_text()
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert blocks, EXTRA_PAGES[extra]
    for code in blocks:
        ran = subprocess.run(
            [python, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0, f"{extra}: {ran.stdout}\n{ran.stderr}"
