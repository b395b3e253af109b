"""Crafted or odd stored input gives a named agentrewind error, never a raw exception.

On old main: malformed type tags behind a valid checksum raised TypeError / ValueError /
OverflowError, a deep record RecursionError, a bytes tag with invalid base64 decoded to b'',
a run id with a lone surrogate UnicodeEncodeError, `import deep.json` printed a traceback,
`import` stored malformed tags, and any dataclass already imported was rebuilt from a name.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind.documents import DocumentError
from agentrewind.errors import CorruptRecordError, SerializationError
from agentrewind.serde import Serializer

MALFORMED = {
    "tuple-not-list": {"__ar__": "tuple", "v": 5},
    "timedelta-overflow": {"__ar__": "timedelta", "v": 1e300},
    "uuid-garbage": {"__ar__": "uuid", "v": "zz"},
    "date-number": {"__ar__": "date", "v": 5},
    "bytes-bad-base64": {"__ar__": "bytes", "v": "!!not base64!!"},
    "set-unhashable": {"__ar__": "set", "v": [{"a": 1}]},
    "dict-not-pairs": {"__ar__": "dict", "v": [1, 2]},
    "decimal-garbage": {"__ar__": "decimal", "v": "1.2.3"},
    "zone-unknown": {"__ar__": "datetime", "v": "2030-01-01T00:00:00", "tz": "Nowhere/X"},
    "tag-not-string": {"__ar__": ["x"], "v": 1},
    "dataclass-no-name": {"__ar__": "dataclass", "v": {}},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_tag_behind_a_valid_checksum_is_a_named_error(store_url: str, case: str) -> None:
    mw = agentrewind.Middleware(store_url)
    with mw.run("tagged") as run:
        run.step("fetch", lambda: "fine")
    (record,) = mw.store.load_steps("tagged")
    crafted = dataclasses.replace(record, output={"rows": [1, MALFORMED[case]]})
    mw.store.put_steps([crafted])  # a valid checksum: only the tag payload is wrong
    with mw.run("tagged") as run, pytest.raises(SerializationError) as info:
        run.step("fetch", lambda: "fine")
    msg = str(info.value)
    assert "'tagged'" in msg and record.key in msg and "output" in msg
    assert "$.rows[1]" in msg or info.value.path in ("$", "$.rows[1]")
    mw.store.close()


def test_deep_tree_is_a_named_error_not_recursion_error() -> None:
    deep: Any = 1
    for _ in range(700):  # json reads it; rebuilding it recurses past the limit
        deep = [deep]
    with pytest.raises(SerializationError, match="recursion limit"):
        Serializer().from_tree(deep, "run 'r' step 'k' field output")
    with pytest.raises(SerializationError, match="recursion limit"):
        Serializer().loads(b"[" * 200_000 + b"]" * 200_000)


def _raw_record(run_id: str, depth: int) -> bytes:
    head = {"run_id": run_id, "step_id": "s", "key": "custom:k:0#0", "kind": "custom",
            "name": "k", "status": "completed", "seq": 0, "parent_id": None, "meta": {},
            "created_at": 0, "updated_at": 0}  # fmt: skip
    body = (json.dumps(head)[:-1] + ',"output":' + "[" * depth + "]" * depth + "}").encode()
    return b"AR1:%08x:%s" % (zlib.crc32(body), body)


def test_200k_deep_record_in_sqlite_is_corrupt_record_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'deep.db'}"
    store = agentrewind.connect(url)
    store.begin_run("deep")
    store.put_steps([agentrewind.StepRecord("deep", "s", "custom:k:0#0", "custom", "k",
                                            "completed", 0, output=1)])  # fmt: skip
    store.close()
    conn = sqlite3.connect(tmp_path / "deep.db")
    conn.execute("UPDATE ar_steps SET data = ?", (_raw_record("deep", 200_000),))
    conn.commit()
    conn.close()
    with agentrewind.connect(url) as store, pytest.raises(CorruptRecordError, match="deep"):
        store.load_steps("deep")


def test_200k_deep_record_in_redis_is_corrupt_record_error(redis_url: str) -> None:
    import redis

    from agentrewind.stores.redis._keys import RunKeys

    ns = "deep-" + zlib.crc32(redis_url.encode()).to_bytes(4, "big").hex()
    with agentrewind.connect(f"{redis_url}?namespace={ns}") as store:
        store.begin_run("deep")
        client = redis.Redis.from_url(redis_url)
        client.hset(
            RunKeys.of("ar", ns, "deep").steps, "custom:k:0#0", _raw_record("deep", 200_000)
        )
        client.close()
        with pytest.raises(CorruptRecordError, match="deep"):
            store.load_steps("deep")
        store.delete_run("deep")


def test_record_fields_of_the_wrong_type_are_corrupt() -> None:
    good = agentrewind.StepRecord("r", "s", "k", "custom", "k", "completed", 0).encode()
    body = json.loads(good.split(b":", 2)[2])
    for field, value in [("seq", "1"), ("status", "nope"), ("meta", []), ("run_id", 5)]:
        raw = json.dumps({**body, field: value}).encode()
        data = b"AR1:%08x:%s" % (zlib.crc32(raw), raw)
        with pytest.raises(CorruptRecordError, match=field):
            agentrewind.StepRecord.decode(data)


def test_lone_surrogate_ids_are_value_errors_naming_them(store_url: str) -> None:
    bad = "run-\ud800"
    mw = agentrewind.Middleware(store_url)
    with pytest.raises(ValueError, match="run-"):
        mw.run(bad)
    with pytest.raises(ValueError, match="timeline name"):
        agentrewind.Timeline(bad, store=mw.store)
    for call in (mw.store.begin_run, mw.store.load_steps, mw.store.get_run, mw.store.delete_run):
        with pytest.raises(ValueError, match="lone surrogate"):
            call(bad)
    with pytest.raises(ValueError, match="lone surrogate"):
        mw.store.acquire_lease(bad, "me", 1.0)
    mw.store.close()


def test_imported_classes_are_not_rebuilt_unless_allowed() -> None:
    tree = {"__ar__": "dataclass", "t": "pathlib:PurePath", "v": {}}
    with pytest.raises(SerializationError, match="allowed_types"):
        Serializer().from_tree(tree)
    tree = {"__ar__": "enum", "t": "signal:Signals", "v": 9}
    with pytest.raises(SerializationError, match="allowed_types"):
        Serializer().from_tree(tree)
    import signal

    assert Serializer(allowed_types=[signal.Signals]).from_tree(tree) is signal.SIGKILL


def _doc(output: Any) -> dict[str, Any]:
    return {
        "format": "agentrewind.run", "version": 1, "run_id": "imp", "status": "partial",
        "steps": [{"step_id": "s1", "key": "custom:k:0#0", "kind": "custom", "name": "k",
                   "status": "completed", "seq": 0, "output": output}],
    }  # fmt: skip


def test_import_validates_every_tag_before_writing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'imp.db'}"
    for case in ("bytes-bad-base64", "timedelta-overflow", "tuple-not-list", "tag-not-string"):
        with pytest.raises(DocumentError) as info:
            agentrewind.import_run(url, _doc({"x": MALFORMED[case]}))
        assert any("steps[0].output.x" in str(i) for i in info.value.issues), info.value.issues
    with agentrewind.connect(url) as store:
        assert store.get_run("imp") is None and store.list_runs() == []


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrewind.cli", *args],
        capture_output=True, text=True, cwd=cwd, timeout=60,
    )  # fmt: skip


def test_cli_import_of_hostile_files_prints_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    deep_doc = _doc(None)
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    deep_doc["steps"][0]["output"] = deep
    (tmp_path / "deepdoc.json").write_text(json.dumps(deep_doc))
    (tmp_path / "tags.json").write_text(json.dumps(_doc(MALFORMED["bytes-bad-base64"])))
    for name in ("deep.json", "deepdoc.json", "tags.json"):
        done = _cli("--store", url, "import", name, cwd=tmp_path)
        assert done.returncode == 1, (name, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.startswith("error:"), done.stderr
        assert done.stderr.count("\n") <= 1 or "problem" in done.stderr
    with agentrewind.connect(url) as store:
        assert store.list_runs() == []
