"""Encrypted values are bound to their place; an encrypted store refuses plaintext (issue 23).

Item 3: AES-GCM ran with no associated data, so a ciphertext copied from run X (or another
namespace) into run Y's step decrypted there and replayed as Y's output. Item 9b: an
encrypted store read a plaintext output planted without the key as genuine. Now every
ciphertext (format v2) is bound to namespace, run, record and field; plaintext and v1 values
are read only in migration mode; fork and import re-encrypt for the new place, and refuse
without the key (writing nothing).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Any

import pytest

pytest.importorskip("cryptography")

import agentrewind
from agentrewind.documents import DocumentError, export_run, import_run
from agentrewind.documents.locating import fork
from agentrewind.errors import DecryptionError
from agentrewind.records import StepRecord
from agentrewind.serde import Serializer
from agentrewind.serde.encryption import (
    ENV_VAR,
    MIGRATE_ENV_VAR,
    Encryption,
    checkpoint_place,
    generate_key,
    key_id,
    place,
    step_place,
)
from agentrewind.serde.tags import TAG
from agentrewind.stores import Store, connect

CALLS: list[str] = []


def _approve(what: str) -> dict[str, Any]:
    CALLS.append(what)
    return {"approved": what, "call": len(CALLS)}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.clear()
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv(MIGRATE_ENV_VAR, raising=False)


@pytest.fixture
def store(store_url: str) -> Any:
    opened = connect(store_url)
    yield opened
    opened.close()


def _other_namespace(store_url: str) -> str:
    if store_url.startswith("memory://"):
        return store_url + "?namespace=other"
    return store_url.replace("namespace=", "namespace=other-")


def _record(store: Store, run_id: str) -> StepRecord:
    (record,) = [r for r in store.load_steps(run_id) if r.kind != "document"]
    return record


def _recorded(store: Store, enc: Encryption | bool, run_id: str, what: str) -> StepRecord:
    with agentrewind.Middleware(store, encryption=enc).run(run_id) as run:
        run.step("approve", _approve, what)
    return _record(store, run_id)


def _replay(store: Store, enc: Encryption | bool, run_id: str, what: str) -> Any:
    with agentrewind.Middleware(store, encryption=enc).run(run_id) as run:
        return run.step("approve", _approve, what)


def _plant(store: Store, record: StepRecord, output: Any) -> None:
    store.put_step(dataclasses.replace(record, output=output))


def _v1(key: str, tree: Any) -> dict[str, Any]:
    """A ciphertext as versions before the binding wrote it (no associated data)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    nonce = os.urandom(12)
    text = json.dumps(tree, separators=(",", ":"), sort_keys=True).encode()
    blob = b"\x01" + key_id(raw) + nonce + AESGCM(raw).encrypt(nonce, text, None)
    return {TAG: "enc", "v": base64.b64encode(blob).decode()}


# -- item 3: a ciphertext replays only where it was written -----------------------------------
def test_a_ciphertext_copied_to_another_run_is_refused(store: Store) -> None:
    enc = Encryption(generate_key())
    approved = _recorded(store, enc, "run-x", "order")  # call 1: the output to steal
    target = _recorded(store, enc, "run-y", "order")  # call 2
    assert approved.key == target.key  # same step (a hash of the name and input) in both runs
    _plant(store, target, approved.output)  # no key needed to copy bytes
    with pytest.raises(DecryptionError, match=r"run 'run-y' step .* field output.*another place"):
        _replay(store, enc, "run-y", "order")
    assert CALLS == ["order", "order"]  # refused, never replayed as y's output, nothing re-ran
    assert _replay(store, enc, "run-x", "order") == {"approved": "order", "call": 1}


def test_a_ciphertext_copied_to_another_step_is_refused(store: Store) -> None:
    enc = Encryption(generate_key())
    with agentrewind.Middleware(store, encryption=enc).run("run-s") as run:
        run.step("approve", _approve, "small")
        run.step("approve", _approve, "large")
    small, large = sorted(store.load_steps("run-s"), key=lambda r: r.seq)
    _plant(store, large, small.output)
    with (
        pytest.raises(DecryptionError, match=f"step {large.key!r} field output"),
        agentrewind.Middleware(store, encryption=enc).run("run-s") as run,
    ):
        run.step("approve", _approve, "small")
        run.step("approve", _approve, "large")
    assert CALLS == ["small", "large"]


def test_a_ciphertext_copied_to_another_namespace_is_refused(store_url: str) -> None:
    enc = Encryption(generate_key())
    with connect(store_url) as a, connect(_other_namespace(store_url)) as b:
        mine = _recorded(a, enc, "shared-id", "tenant a")
        theirs = _recorded(b, enc, "shared-id", "tenant a")
        _plant(b, theirs, mine.output)  # tenant a's ciphertext into tenant b's run
        with pytest.raises(DecryptionError, match="another place"):
            _replay(b, enc, "shared-id", "tenant a")
        assert _replay(a, enc, "shared-id", "tenant a") == {"approved": "tenant a", "call": 1}
    assert CALLS == ["tenant a", "tenant a"]


def test_a_ciphertext_of_another_field_or_checkpoint_is_refused(store: Store) -> None:
    enc = Encryption(generate_key())
    serializer = Serializer(encryption=enc)
    with agentrewind.Timeline("tl", store=store, serializer=serializer) as tl:
        first = tl.checkpoint(state={"step": "approved"}, metadata={"who": "alice"})
        second = tl.checkpoint(state={"step": "draft"})
    records = {r.step_id: r for r in store.load_steps("tl")}
    victim = records[second.id]
    store.put_step(dataclasses.replace(victim, output=records[first.id].output))
    with agentrewind.Timeline("tl", store=store, serializer=serializer) as tl:
        with pytest.raises(DecryptionError, match=f"checkpoint {second.id!r} field state"):
            _ = tl.head.state  # type: ignore[union-attr]
        assert tl.get_checkpoint(first.id).state == {"step": "approved"}  # type: ignore[attr-defined]
    meta = records[first.id].meta["metadata"]  # the metadata ciphertext as a state
    store.put_step(dataclasses.replace(victim, output=meta))
    with (
        agentrewind.Timeline("tl", store=store, serializer=serializer) as tl,
        pytest.raises(DecryptionError, match="field state"),
    ):
        _ = tl.head.state  # type: ignore[union-attr]


def test_places_never_collide_and_are_bound() -> None:
    assert place("a", "bc", "d", "e") != place("ab", "c", "d", "e")
    assert place("", "x", "y", "z") != place("x", "", "y", "z")
    s = Serializer(encryption=Encryption(generate_key()))
    here = step_place("ns", "r", "llm:x#0")
    tree = s.store_tree({"v": 1}, "output", here)
    assert s.open(tree, here) == {"v": 1}
    for elsewhere in (
        step_place("ns", "r", "llm:x#0", "state"),
        step_place("ns", "r2", "llm:x#0"),
        step_place("ns2", "r", "llm:x#0"),
        step_place("ns", "r", "llm:x#1"),
        checkpoint_place("ns", "r", "llm:x#0", "output"),
    ):
        with pytest.raises(DecryptionError, match="another place"):
            s.open(tree, elsewhere)
    with pytest.raises(ValueError, match="bound to its place"):
        s.seal({"v": 1})


# -- item 9b: an encrypted store refuses plaintext --------------------------------------------
def test_a_planted_plaintext_output_is_refused_and_read_in_migration_mode(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    record = _recorded(store, Encryption(key), "run-p", "real")
    _plant(store, record, {"approved": "forged"})  # written without the key
    with pytest.raises(
        DecryptionError,
        match=r"run 'run-p' step .* field output.*stored in plaintext but this store is encrypted",
    ):
        _replay(store, Encryption(key), "run-p", "real")
    assert CALLS == ["real"]
    # migration mode (a store encrypted after the fact) reads it, by option or variable
    got = _replay(store, Encryption(key, migrate=True), "run-p", "real")
    assert got == {"approved": "forged"}
    monkeypatch.setenv(MIGRATE_ENV_VAR, "1")
    assert _replay(store, Encryption(key), "run-p", "real") == {"approved": "forged"}
    assert CALLS == ["real"]


def test_a_store_encrypted_after_the_fact_migrates(store: Store) -> None:
    _recorded(store, False, "old", "plain")  # recorded before encryption was turned on
    key = generate_key()
    with pytest.raises(DecryptionError, match="plaintext"):
        _replay(store, Encryption(key), "old", "plain")
    with agentrewind.Middleware(store, encryption=Encryption(key, migrate=True)).run("old") as run:
        assert run.step("approve", _approve, "plain")["call"] == 1  # old: plaintext
        run.step("approve", _approve, "new")  # new writes are sealed, bound
    new = next(r for r in store.load_steps("old") if r.seq == 2)
    assert new.output[TAG] == "enc"
    assert base64.b64decode(new.output["v"])[:1] == b"\x02"
    assert CALLS == ["plain", "new"]


def test_a_v1_ciphertext_is_read_only_in_migration_mode(store: Store) -> None:
    key = generate_key()
    record = _recorded(store, Encryption(key), "run-v1", "v1")
    _plant(store, record, _v1(key, {"approved": "from v1"}))
    with pytest.raises(DecryptionError, match="format v1"):
        _replay(store, Encryption(key), "run-v1", "v1")
    got = _replay(store, Encryption(key, migrate=True), "run-v1", "v1")
    assert got == {"approved": "from v1"}
    assert CALLS == ["v1"]


def test_timeline_metadata_planted_in_plaintext_is_refused(store: Store) -> None:
    enc = Encryption(generate_key())
    with agentrewind.Timeline("tm", store=store, serializer=Serializer(encryption=enc)) as tl:
        cp = tl.checkpoint(state={"s": 1}, metadata={"who": "alice"})
    (record,) = [r for r in store.load_steps("tm") if r.step_id == cp.id]
    meta = {**record.meta, "metadata": {"who": "mallory"}}
    store.put_step(dataclasses.replace(record, meta=meta))
    with pytest.raises(DecryptionError, match=f"checkpoint {cp.id!r} field metadata.*plaintext"):
        agentrewind.Timeline("tm", store=store, serializer=Serializer(encryption=enc))


# -- fork, export and import re-encrypt for the new place ---------------------------------------
def test_fork_of_an_encrypted_run_with_the_key_replays(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    with agentrewind.Middleware(store, encryption=Encryption(key)).run("src") as run:
        run.step("approve", _approve, "one")
        run.step("approve", _approve, "two")
    done = fork(store, "src", "2", "dst", encryption=Encryption(key))
    assert done.steps == 2
    with agentrewind.Middleware(store, encryption=Encryption(key)).run("dst") as run:
        assert run.step("approve", _approve, "one") == {"approved": "one", "call": 1}
        assert run.step("approve", _approve, "two") == {"approved": "two", "call": 2}
    monkeypatch.setenv(ENV_VAR, key)  # the CLI's way: the key from the environment
    fork(store, "src", "1", "dst-env")
    assert _replay(store, Encryption(key), "dst-env", "one") == {"approved": "one", "call": 1}
    assert CALLS == ["one", "two"]


def test_fork_of_an_encrypted_run_without_the_key_writes_nothing(store: Store) -> None:
    _recorded(store, Encryption(generate_key()), "src", "one")
    with pytest.raises(DocumentError, match=r"encrypted.*needs the key.*nothing was written"):
        fork(store, "src", "1", "dst")
    assert store.get_run("dst") is None and store.load_steps("dst") == []


def test_fork_of_an_encrypted_timeline(store: Store) -> None:
    enc = Encryption(generate_key())
    serializer = Serializer(encryption=enc)
    with agentrewind.Timeline("tl-src", store=store, serializer=serializer) as tl:
        tl.checkpoint(state={"n": 1}, metadata={"who": "a"})
        cp = tl.checkpoint(state={"n": 2})
    fork(store, "tl-src", cp.id[-8:], "tl-dst", encryption=enc)
    with agentrewind.Timeline("tl-dst", store=store, serializer=serializer) as tl:
        assert tl.head.state == {"n": 2}  # type: ignore[union-attr]
        assert [c.metadata for c in tl.history()] == [{}, {"who": "a"}]  # type: ignore[attr-defined]


def test_import_under_another_id_or_namespace_re_encrypts(store_url: str) -> None:
    key = generate_key()
    with connect(store_url) as a, connect(_other_namespace(store_url)) as b:
        _recorded(a, Encryption(key), "src", "one")
        doc = export_run(a, "src")
        assert import_run(a, doc, run_id="copy", encryption=Encryption(key)) == "copy"
        assert _replay(a, Encryption(key), "copy", "one") == {"approved": "one", "call": 1}
        with pytest.raises(DocumentError, match="needs the key"):
            import_run(b, doc)
        assert b.get_run("src") is None
        import_run(b, doc, encryption=Encryption(key))
        assert _replay(b, Encryption(key), "src", "one") == {"approved": "one", "call": 1}
        import_run(a, doc)  # the same place: nothing to re-encrypt, no key needed
    assert CALLS == ["one"]


def test_cli_fork_and_import_use_the_key_of_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrewind.cli.main import main

    url, key = f"sqlite:///{tmp_path / 'runs.db'}", generate_key()
    with connect(url) as store:
        _recorded(store, Encryption(key), "src", "one")
    doc = tmp_path / "src.json"
    assert main(["--store", url, "export", "src", "-o", str(doc)]) == 0
    assert main(["--store", url, "fork", "src", "--at", "1", "--to", "dst"]) == 1
    assert "AGENTREWIND_ENCRYPTION_KEY" in capsys.readouterr().err
    assert main(["--store", url, "import", str(doc), "--run-id", "imp"]) == 1
    assert "nothing was written" in capsys.readouterr().err
    monkeypatch.setenv(ENV_VAR, key)
    assert main(["--store", url, "fork", "src", "--at", "1", "--to", "dst"]) == 0
    assert main(["--store", url, "import", str(doc), "--run-id", "imp"]) == 0
    with connect(url) as store:
        for run_id in ("dst", "imp"):
            assert store.get_run(run_id) is not None
            assert _replay(store, Encryption(key), run_id, "one") == {"approved": "one", "call": 1}
    assert CALLS == ["one"]
