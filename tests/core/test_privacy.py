"""Privacy: a redaction hook and AES-GCM encryption at rest; replay works with both.

Old main stored every output in clear and had neither option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")

import base64

import agentrewind
from agentrewind.errors import DecryptionError
from agentrewind.serde import Serializer
from agentrewind.serde.encryption import ENV_VAR, Encryption, generate_key, step_place

SECRET = "4111-1111-1111-1111"


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'p.db'}?namespace={namespace}"
        return
    from redis_support import cleanup_redis

    base = request.getfixturevalue("redis_url")
    yield f"{base}?namespace={namespace}"
    cleanup_redis(base, namespace)


def _stored_bytes(url: str, run_id: str) -> bytes:
    with agentrewind.connect(url) as store:
        return b"".join(r.encode() for r in store.load_steps(run_id))


CALLS: list[int] = []


def _card(n: int) -> dict[str, Any]:
    CALLS.append(n)
    return {"card": SECRET, "n": n}


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


def test_redaction_hook_masks_outputs_and_replay_returns_them(url: str) -> None:
    def redact(field: str, value: Any) -> Any:
        assert field in ("output", "inputs")  # inputs go through the same hook
        return {**value, "card": "****" + value["card"][-4:]} if isinstance(value, dict) else value

    mw = agentrewind.Middleware(url, redact=redact)
    with mw.run("pay") as run:
        assert run.step("card", _card, 1)["card"] == SECRET  # the live value
        run.step("card", _card, 2)
    assert SECRET.encode() not in _stored_bytes(url, "pay")
    with mw.run("pay") as run:  # replay: no call runs, the redacted values come back
        assert run.step("card", _card, 1) == {"card": "****1111", "n": 1}
        assert run.step("card", _card, 2) == {"card": "****1111", "n": 2}
    assert CALLS == [1, 2]
    mw.store.close()


def test_encrypted_outputs_replay_and_need_the_key(url: str) -> None:
    key = generate_key()
    mw = agentrewind.Middleware(url, encryption=Encryption(key))
    with mw.run("enc") as run:
        run.step("card", _card, 1)
    mw.store.close()
    raw = _stored_bytes(url, "enc")
    assert SECRET.encode() not in raw and b'"__ar__":"enc"' in raw
    with agentrewind.Middleware(url, encryption=Encryption(key)).run("enc") as run:
        assert run.step("card", _card, 1) == {"card": SECRET, "n": 1}
    assert CALLS == [1]
    wrong = Encryption(generate_key())
    for encryption, says in ((wrong, "not among the keys"), (False, "no key is configured")):
        mw = agentrewind.Middleware(url, encryption=encryption)
        with pytest.raises(DecryptionError, match=says), mw.run("enc") as run:
            run.step("card", _card, 1)
        mw.store.close()
    assert CALLS == [1]  # a refused replay never re-ran the step


def test_key_rotation_and_the_environment_variable(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = generate_key(), generate_key()
    with agentrewind.Middleware(url, encryption=Encryption(old)).run("rot") as run:
        run.step("card", _card, 1)
    monkeypatch.setenv(ENV_VAR, f"{new},{old}")  # new key first; the old one still reads
    mw = agentrewind.Middleware(url)
    with mw.run("rot") as run:
        assert run.step("card", _card, 1)["card"] == SECRET  # old data, old key
        run.step("card", _card, 2)  # new data, new key
    assert CALLS == [1, 2]
    monkeypatch.setenv(ENV_VAR, new)
    mw.store.close()
    mw = agentrewind.Middleware(url)
    with pytest.raises(DecryptionError, match="old_keys"), mw.run("rot") as run:
        run.step("card", _card, 1)
    mw.store.close()


def test_timeline_state_and_metadata_encrypted(url: str) -> None:
    enc = Encryption(generate_key())
    with agentrewind.Timeline("tl", store=url, serializer=Serializer(encryption=enc)) as tl:
        first = tl.checkpoint(state={"card": SECRET}, metadata={"who": SECRET, "confidence": 1})
        second = tl.checkpoint(state={"card": "other"}, description="second")
        tl.rollback(to_checkpoint_id=first.id)
    raw = _stored_bytes(url, "tl")
    assert SECRET.encode() not in raw
    with agentrewind.Timeline("tl", store=url, serializer=Serializer(encryption=enc)) as tl:
        head = tl.head
        assert head is not None and head.state == {"card": SECRET}
        assert head.metadata["who"] == SECRET
        assert tl.diff(first.id, second.id)["changed"] == {
            "card": {"before": SECRET, "after": "other"}
        }
    with pytest.raises(DecryptionError, match="field metadata"):
        agentrewind.Timeline("tl", store=url, serializer=Serializer(encryption=False))


def test_altered_ciphertext_fails_authentication() -> None:
    enc = Encryption(generate_key())
    s = Serializer(encryption=enc)
    place = step_place("default", "r", "k")
    tree = s.store_tree({"x": SECRET}, "output", place)
    blob = bytearray(base64.b64decode(tree["v"]))
    blob[-1] ^= 1
    tree["v"] = base64.b64encode(bytes(blob)).decode()
    with pytest.raises(DecryptionError, match="altered"):
        s.open(tree, place)
