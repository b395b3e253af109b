"""`agentrewind cache stats|clear [--site]` on every store (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agentrewind
from agentrewind.cli import main


def _fill(store_url: str) -> None:
    mw = agentrewind.Middleware(store_url)
    for run_id in ("a", "b"):
        with mw.run(run_id) as run:
            run.step("search", str.upper, "q", cache_ttl=60)
            run.step("fetch", str.lower, "Q", cache_ttl=60)
    mw.close()


def test_stats_and_clear(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(store_url)
    assert main(["--store", store_url, "cache", "stats", "--json"]) == 0
    stats = {s["site"]: s for s in json.loads(capsys.readouterr().out)}
    assert set(stats) == {"custom:search", "custom:fetch"}
    search = stats["custom:search"]
    assert (search["entries"], search["hits"], search["misses"], search["hit_rate"]) == (
        1,
        1,
        1,
        0.5,
    )
    assert search["bytes"] > 0 and search["seconds_saved"] >= 0
    assert main(["--store", store_url, "cache", "stats"]) == 0
    assert "custom:fetch" in capsys.readouterr().out
    assert main(["--store", store_url, "cache", "clear", "--site", "custom:search"]) == 0
    assert capsys.readouterr().out.strip() == "cleared 1 entry of custom:search"
    assert main(["--store", store_url, "cache", "stats", "--site", "custom:search"]) == 1
    assert "no cache entries" in capsys.readouterr().err
    assert main(["--store", store_url, "cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"cleared": 1, "site": None}
    assert main(["--store", store_url, "cache", "stats"]) == 0
    assert capsys.readouterr().out.strip() == "the cache is empty"


def test_stats_of_a_store_that_never_cached_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agentrewind.connect(url).close()
    before = (tmp_path / "runs.db").read_bytes()
    assert main(["--store", url, "cache", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert (tmp_path / "runs.db").read_bytes() == before
    assert main(["--store", str(url) + "x", "cache", "stats"]) == 3  # a missing file: no store
