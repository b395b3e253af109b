"""The CLI and `import` with leases (issue 11, item 2); the store-level fencing contract runs
on every backend from `agentrewind.testing` (`_fencing_contract.py`, in test_store_conformance).

Each test failed on the main before fencing: deletes ignored leases, and a run whose owner
died still said `running`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrewind
from agentrewind import RunLockedError
from agentrewind.testing.fencing import FencingContract

_dead_owner = FencingContract._dead_owner


def test_cli_shows_crashed_runs_and_prune_says_what_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrewind.cli import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with agentrewind.connect(url) as store:
        dead = _dead_owner()
        assert store.acquire_lease("killed", dead, 30).acquired
        store.begin_run("killed", owner=dead)
        assert store.acquire_lease("busy", "vm:1:live", 30).acquired
        store.begin_run("busy", owner="vm:1:live")
        assert main(["--store", url, "runs"]) == 0
        out = capsys.readouterr().out
        assert "crashed" in out and "killed" in out
        assert main(["--store", url, "prune", "--keep-last", "0"]) == 0
        out = capsys.readouterr().out
        assert "deleted 1 run(s)" in out and "skipped 1 run(s)" in out and "busy" in out
        assert main(["--store", url, "prune", "--keep-last", "0", "--force"]) == 0
        assert "deleted 1 run(s)" in capsys.readouterr().out
        assert store.list_runs() == []


def test_import_replace_refuses_a_leased_run_unless_forced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'imp.db'}"
    with agentrewind.connect(url) as store:
        mw = agentrewind.Middleware(store)
        with mw.run("job") as run:
            run.step("s", lambda: 1)
        doc = agentrewind.export_run(store, "job")
        assert store.acquire_lease("job", "vm:1:live", 30).acquired
        with pytest.raises(RunLockedError, match="not deleted"):
            agentrewind.import_run(store, {**doc.to_dict(), "steps": []}, replace=True)
        agentrewind.import_run(store, doc, replace=True, force=True)
        assert [r.name for r in store.load_steps("job") if r.name == "s"] == ["s"]
