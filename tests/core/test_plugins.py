"""Entry-point plugins: one adapter that fails to import must not disable the others."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def _install_plugins(root: Path) -> None:
    dist = root / "demo_plugins-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[agentrewind.adapters]\nbroken = broken_adapter:ADAPTER\ngood = good_adapter:ADAPTER\n"
    )
    (root / "broken_adapter.py").write_text(
        "raise ImportError('llama-index-workflows 2.0 is too old: need >= 2.26')\n"
    )
    (root / "good_adapter.py").write_text(
        textwrap.dedent(
            """
            class _Adapter:
                def claims(self, obj):
                    return isinstance(obj, int)

                def wrap(self, middleware, obj, **kwargs):
                    return ("wrapped", obj)

            ADAPTER = _Adapter()
            """
        )
    )


def test_a_broken_adapter_does_not_disable_the_others(tmp_path: Path) -> None:
    _install_plugins(tmp_path)
    code = textwrap.dedent(
        """
        import agentrewind
        mw = agentrewind.Middleware("memory://")
        print(mw.wrap(7))
        try:
            mw.wrap(object())
        except agentrewind.AdapterNotFoundError as exc:
            print("ERROR", exc)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "('wrapped', 7)"
    assert lines[1].startswith("ERROR no installed agentrewind adapter can wrap builtins.object")
    assert "broken: llama-index-workflows 2.0 is too old" in lines[1]
    assert "broken_adapter" in out.stderr  # the failed load is logged, not hidden
