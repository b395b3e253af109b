"""A stored payload crafted to run code runs nothing under the default config.

The attacker model: someone who can write to the store (a shared Redis, a copied SQLite file)
plants a record with a valid checksum. Loading it must not execute anything unless the user
opted in to pickle with `allow_pickle=True`.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import backend_url

import agentrewind


class Exploit:
    """Unpickling this creates a directory: the visible trace of code running."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def _pickle_tree(marker: Path) -> dict[str, str]:
    return {"__ar__": "pickle", "v": base64.b64encode(pickle.dumps(Exploit(marker))).decode()}


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    with backend_url(request.param, tmp_path, redis_url) as u:
        yield u


def _plant(url: str, run_id: str, output: Any) -> None:
    """Record a real step, then overwrite its output with `output` (checksum recomputed)."""
    mw = agentrewind.Middleware(url)
    with mw.run(run_id) as run:
        assert run.step("fetch", lambda: {"rows": 3}) == {"rows": 3}
    (record,) = mw.store.load_steps(run_id)
    mw.store.put_step(dataclasses.replace(record, output=output))
    mw.close()


def test_planted_pickle_runs_nothing_by_default(url: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _plant(url, "planted", {"rows": [_pickle_tree(marker)]})
    ran: list[str] = []

    mw = agentrewind.Middleware(url)
    (record,) = mw.store.load_steps("planted")  # loading the journal decodes no output
    assert record.output["rows"][0]["__ar__"] == "pickle"
    with mw.run("planted") as run:
        with pytest.raises(agentrewind.SerializationError) as info:
            run.step("fetch", lambda: ran.append("fetch"))
        assert "allow_pickle=True" in str(info.value)
        assert not marker.exists()
        assert ran == []  # refused, not silently re-run either
    with pytest.raises(agentrewind.SerializationError):
        mw.serializer.from_tree(record.output)
    assert not marker.exists()
    mw.close()


def test_pickle_loads_only_when_the_user_opts_in(url: str, tmp_path: Path) -> None:
    marker = tmp_path / "opted-in"
    _plant(url, "trusted", _pickle_tree(marker))
    mw = agentrewind.Middleware(url, allow_pickle=True)
    with mw.run("trusted") as run:
        assert run.step("fetch", lambda: {"rows": 3}) is None  # os.mkdir's return value
    assert marker.is_dir()  # the user trusted this store, and the payload did run
    mw.close()


@pytest.mark.parametrize(
    "tree",
    [
        {"__ar__": "dataclass", "t": "subprocess:Popen", "v": {"args": ["touch", "{m}"]}},
        {"__ar__": "pydantic", "t": "subprocess:Popen", "v": ["touch", "{m}"]},
        {"__ar__": "enum", "t": "os:mkdir", "v": "{m}"},
        {"__ar__": "enum", "t": "pathlib:Path", "v": "{m}"},
        {"__ar__": "dataclass", "t": "not_imported_module_xyz:Thing", "v": {}},
        {"__ar__": "no-such-codec", "v": "{m}"},
    ],
    ids=[
        "popen-as-dataclass",
        "popen-as-pydantic",
        "function-as-enum",
        "class-as-enum",
        "import-by-name",
        "unknown-tag",
    ],
)
def test_other_crafted_type_tags_run_nothing(tree: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    crafted = _fill(tree, str(marker))
    with pytest.raises(agentrewind.SerializationError):
        agentrewind.Serializer().from_tree(crafted)
    with pytest.raises(agentrewind.SerializationError):
        agentrewind.Serializer(allow_pickle=True).from_tree(crafted)
    assert not marker.exists()
    assert "not_imported_module_xyz" not in __import__("sys").modules


def _fill(tree: Any, marker: str) -> Any:
    if isinstance(tree, dict):
        return {k: _fill(v, marker) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_fill(v, marker) for v in tree]
    return tree.replace("{m}", marker) if isinstance(tree, str) else tree
