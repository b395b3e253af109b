"""RewindSaver encrypts checkpoints, values, writes and metadata at rest; graphs resume.

Old main stored every blob and all metadata in clear and had no encryption option.
"""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("cryptography")

from langgraph.graph import END, START, StateGraph

from agentrewind.errors import DecryptionError
from agentrewind.serde.encryption import Encryption, generate_key
from agentrewind_langgraph import RewindSaver

SECRET = "4111-1111-1111-1111"


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph(saver: RewindSaver, calls: list[str]) -> Any:
    def charge(state: State) -> dict[str, Any]:
        calls.append("charge")
        return {"log": [f"charged {SECRET}"]}

    def done(state: State) -> dict[str, Any]:
        calls.append("done")
        return {"log": ["done"]}

    b = StateGraph(State)
    b.add_node("charge", charge)
    b.add_node("done", done)
    b.add_edge(START, "charge")
    b.add_edge("charge", "done")
    b.add_edge("done", END)
    return b.compile(checkpointer=saver, interrupt_before=["done"])


def _raw(url: str) -> bytes:
    out = b""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        out = b""
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                out += repr(row).encode()
        conn.close()
        return out
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url.partition("?")[0]) as pg:
            tables = pg.execute(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM "
                "information_schema.tables WHERE table_schema NOT IN "
                "('pg_catalog', 'information_schema')"
            ).fetchall()
            for (table,) in tables:
                for row in pg.execute(f"SELECT * FROM {table}"):
                    out += repr(row).encode()
        return out
    import redis

    base, _, query = url.partition("?")
    ns = query.split("namespace=")[1]
    client = redis.Redis.from_url(base)
    out = b"".join(client.dump(k) or b"" for k in client.scan_iter(match=f"ar:{ns}*"))
    client.close()
    return out


def test_encrypted_saver_resumes_and_stores_nothing_in_clear(saver_url: str) -> None:
    enc = Encryption(generate_key())
    config = {"configurable": {"thread_id": "order-1"}}
    calls: list[str] = []
    with RewindSaver(saver_url, encryption=enc) as saver:
        g = _graph(saver, calls)
        g.invoke({"log": ["start"]}, config, durability="sync")
        assert calls == ["charge"]
        meta = saver.get_tuple(config).metadata  # type: ignore[union-attr]
        assert meta["step"] >= 1
        flt = list(saver.list(config, filter={"source": "loop"}))
        assert flt and all(t.metadata["source"] == "loop" for t in flt)
    raw = _raw(saver_url)
    assert raw and SECRET.encode() not in raw and b'"source"' not in raw
    with RewindSaver(saver_url, encryption=enc) as saver:  # resume after the interrupt
        out = _graph(saver, calls).invoke(None, config, durability="sync")
    assert out["log"] == ["start", f"charged {SECRET}", "done"]
    assert calls == ["charge", "done"]
    for encryption, says in (
        (Encryption(generate_key()), "not among the keys"),
        (False, "no key is configured"),
    ):
        with (
            RewindSaver(saver_url, encryption=encryption) as saver,
            pytest.raises(DecryptionError, match=says),
        ):
            saver.get_tuple(config)


def test_key_rotation_reads_old_checkpoints(saver_url: str, tmp_path: Path) -> None:
    old, new = generate_key(), generate_key()
    config = {"configurable": {"thread_id": "rot"}}
    calls: list[str] = []
    with RewindSaver(saver_url, encryption=Encryption(old)) as saver:
        _graph(saver, calls).invoke({"log": []}, config, durability="sync")
    with RewindSaver(saver_url, encryption=Encryption(new, old_keys=[old])) as saver:
        out = _graph(saver, calls).invoke(None, config, durability="sync")
    assert out["log"] == [f"charged {SECRET}", "done"] and calls == ["charge", "done"]


def test_encrypted_saver_refuses_a_plaintext_checkpoint(
    saver_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 9b: a checkpoint written without the key is not loaded as genuine.

    Before: LangGraph's `EncryptedSerializer` read a value stored without a cipher as
    plaintext, so `RewindSaver(encryption=...)` resumed a planted checkpoint.
    """
    config = {"configurable": {"thread_id": "planted"}}
    calls: list[str] = []
    with RewindSaver(saver_url, encryption=False) as saver:  # no key: plaintext
        _graph(saver, calls).invoke({"log": ["planted"]}, config, durability="sync")
    key = generate_key()
    with RewindSaver(saver_url, encryption=Encryption(key)) as saver:
        with pytest.raises(DecryptionError, match="plaintext but this saver is encrypted"):
            saver.get_tuple(config)
        with pytest.raises(DecryptionError, match="plaintext"):
            _graph(saver, calls).invoke(None, config, durability="sync")
    assert calls == ["charge"]  # the refused resume ran nothing
    with RewindSaver(saver_url, encryption=Encryption(key, migrate=True)) as saver:
        out = _graph(saver, calls).invoke(None, config, durability="sync")
    assert out["log"] == ["planted", f"charged {SECRET}", "done"]
    monkeypatch.setenv("AGENTREWIND_ENCRYPTION_MIGRATE", "1")  # the variable turns it on too
    with RewindSaver(saver_url, encryption=Encryption(key)) as saver:
        assert saver.get_tuple(config) is not None


def test_saver_ciphertexts_are_bound_to_the_namespace(saver_url: str) -> None:
    """A ciphertext written in one namespace does not open in another (issue 23 item 3)."""
    from agentrewind_langgraph._serde import AesGcmCipher

    enc = Encryption(generate_key())
    a, b = AesGcmCipher(enc, "tenant-a"), AesGcmCipher(enc, "tenant-b")
    name, blob = a.encrypt(b"secret")
    assert a.decrypt(name, blob) == b"secret"
    with pytest.raises(DecryptionError, match="another place"):
        b.decrypt(name, blob)
