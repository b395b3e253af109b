"""`agentrewind ui` opens its store read-only, as the CLI's views do: it creates, migrates and
writes nothing, on SQLite and PostgreSQL (the real command, in a process of its own)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind.cli.common import EXIT_STORE, open_store
from agentrewind.cli.parser import build_parser
from agentrewind.errors import StoreError
from agentrewind.stores import Store
from postgres_support import step as rec

UI = [sys.executable, "-m", "agentrewind.cli"]


def _populate(url: str) -> None:
    with closing(agentrewind.Middleware(url)) as mw, mw.run("order") as run:
        run.step("fetch", lambda: "A-17")
        run.step("charge", lambda o: f"ch_{o}", "A-17")
    tl = agentrewind.Timeline("plan", store=url)
    tl.checkpoint({"draft": "a"}, {}, "First", "draft")
    tl.checkpoint({"draft": "b"}, {}, "Second", "draft")
    tl.close()


@contextlib.contextmanager
def _serve(url: str) -> Iterator[str]:
    """`agentrewind --store URL ui --port 0` until the caller is done; yields its address."""
    proc = subprocess.Popen([*UI, "--store", url, "ui", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        line = proc.stdout.readline()
        assert line.startswith("serving on http://"), (line, proc.stderr and proc.stderr.read())
        yield line.split()[2]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _every_view(address: str) -> list[Any]:
    def get(path: str) -> Any:
        with urllib.request.urlopen(address + "api/" + path, timeout=10) as resp:
            return json.loads(resp.read())

    runs = get("runs")
    assert {r["run_id"] for r in runs} == {"order", "plan"}
    out = [get("store"), runs, get("metrics")]
    for run in ("order", "plan"):
        steps = get(f"runs/{run}")["waterfall"]["rows"]
        ids = [s["step_id"] for s in steps]
        out += [steps, get(f"runs/{run}/graph"), get(f"runs/{run}/metrics")]
        out += [get(f"runs/{run}/steps/{ids[0]}"), get(f"runs/{run}/diff?a={ids[0]}&b={ids[-1]}")]
    return out


def _ui_exits(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*UI, "--store", url, "ui", "--port", "0"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def _ui_refuses_writes(url: str, match: str) -> None:
    """A write through the store as `agentrewind ui` opens it (`open_store(args)`) raises."""
    store: Store = open_store(build_parser().parse_args(["--store", url, "ui"]))
    try:
        with pytest.raises(StoreError, match=match):
            store.put_step(rec("order", "new", 9))
    finally:
        store.close()


def test_the_ui_creates_no_sqlite_file_and_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    done = _ui_exits(f"sqlite:///{missing}")
    assert done.returncode == EXIT_STORE and not missing.exists(), done.stderr

    url = f"sqlite:///{tmp_path / 'ui.db'}"
    _populate(url)
    with agentrewind.connect(url) as store:
        before = store.list_runs(), store.load_steps("order"), store.load_steps("plan")
    with _serve(url) as address:
        _every_view(address)
    with agentrewind.connect(url) as store:
        assert (store.list_runs(), store.load_steps("order"), store.load_steps("plan")) == before
    _ui_refuses_writes(url, "readonly database")


@pytest.mark.postgres
def test_the_ui_creates_and_migrates_nothing_on_postgres(postgres_url: str) -> None:
    import psycopg

    schema = f"ui_{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}?schema={schema}"

    def sql(statement: str) -> Any:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchone() if cur.description else None

    try:
        done = _ui_exits(url)
        assert done.returncode == EXIT_STORE and "nothing was created" in done.stderr
        assert sql(f"SELECT to_regnamespace('\"{schema}\"')") == (None,)

        # Tables an earlier release wrote (version 2): a writer would migrate them, the UI
        # serves every view from them as they are.
        _populate(url)
        sql(f'ALTER TABLE "{schema}".ar_steps DROP COLUMN site')
        sql(f'UPDATE "{schema}".ar_schema_version SET version = 2')
        with _serve(url) as address:
            _every_view(address)
        assert sql(f'SELECT version FROM "{schema}".ar_schema_version') == (2,)
        columns = f"""SELECT count(*) FROM information_schema.columns WHERE table_schema =
            '{schema}' AND table_name = 'ar_steps' AND column_name = 'site'"""
        assert sql(columns) == (0,)
        _ui_refuses_writes(url, "read-only")
    finally:
        sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
