"""Opt-in encryption at rest: AES-GCM over stored payloads, with key ids for rotation.

What is encrypted: journal step outputs, timeline checkpoint states and metadata (through
`Serializer(encryption=...)`, which `Middleware(encryption=...)` builds), and the LangGraph
saver's checkpoints, channel values, pending writes and metadata (`RewindSaver(encryption=...)`).
What stays readable, so that listing, metrics and resume work without the key: run ids, step
keys (a hash of the input), statuses, timings, token counts, error types and messages, and a
checkpoint's state hash.

Keys are 16, 24 or 32 bytes, given as bytes, base64 or hex text, or read from the environment
variable `AGENTREWIND_ENCRYPTION_KEY` (comma-separated: the first encrypts, every one
decrypts). Each ciphertext names a short id of its key, so:

Rotation:
    1. Make a new key:
       `python -c "import agentrewind.serde.encryption as e; print(e.generate_key())"`.
    2. Deploy `Encryption(new_key, old_keys=[old_key])` (or `NEW,OLD` in the variable): new
       writes use the new key, old data still decrypts.
    3. Old data is rewritten as runs are re-recorded or pruned; once none is left (for example
       after `prune` of older runs, or the runs' TTL), drop the old key.

A value encrypted with a key that is not given raises `DecryptionError` naming the key id;
altered bytes fail authentication with the same error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from typing import Any

from ..errors import DecryptionError

__all__ = ["ENV_VAR", "Encryption", "generate_key"]

ENV_VAR = "AGENTREWIND_ENCRYPTION_KEY"
_VERSION = b"\x01"
_NONCE = 12


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ImportError(
            'encryption needs the cryptography package: pip install "agentrewind[encryption]"'
        ) from exc
    return AESGCM


def _key_bytes(key: bytes | str) -> bytes:
    if isinstance(key, bytes):
        raw = key
    else:
        text = key.strip()
        raw = b""
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            try:
                raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_")
            except (binascii.Error, ValueError):
                raw = b""
    if len(raw) not in (16, 24, 32):
        raise ValueError(
            "an encryption key must be 16, 24 or 32 bytes (raw, hex or base64 text); make one "
            "with agentrewind.serde.encryption.generate_key()"
        )
    return raw


def key_id(key: bytes) -> bytes:
    """Four bytes naming a key in each ciphertext (not secret: a hash of the key)."""
    return hashlib.sha256(b"agentrewind-key-id:" + key).digest()[:4]


def generate_key() -> str:
    """A new random 256-bit key as URL-safe base64 text."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


class Encryption:
    """AES-GCM with a current key and older keys kept for reading.

    Args:
        key: The key new data is encrypted with (bytes, hex or base64 text). None reads
            `AGENTREWIND_ENCRYPTION_KEY` (the first of its comma-separated keys).
        old_keys: Keys that only decrypt (data written before a rotation).

    Raises:
        ValueError: No key given and the variable is unset, or a key of the wrong size.
        ImportError: `cryptography` is not installed (the `encryption` extra).
    """

    def __init__(self, key: bytes | str | None = None, *, old_keys: Iterable[bytes | str] = ()):
        olds = list(old_keys)
        if key is None:
            env = [k for k in os.environ.get(ENV_VAR, "").split(",") if k.strip()]
            if not env:
                raise ValueError(f"no encryption key given and ${ENV_VAR} is not set")
            key, olds = env[0], [*env[1:], *olds]
        aesgcm = _aesgcm()
        current = _key_bytes(key)
        self.key_id = key_id(current)
        self._current = aesgcm(current)
        self._keys = {self.key_id: self._current}
        for old in olds:
            raw = _key_bytes(old)
            self._keys.setdefault(key_id(raw), aesgcm(raw))

    @classmethod
    def from_env(cls) -> Encryption | None:
        """The encryption `AGENTREWIND_ENCRYPTION_KEY` asks for, or None when it is unset."""
        return cls() if os.environ.get(ENV_VAR, "").strip() else None

    def encrypt(self, plaintext: bytes, aad: bytes | None = None) -> bytes:
        """`version | key id | nonce | ciphertext+tag` under the current key."""
        nonce = os.urandom(_NONCE)
        sealed: bytes = self._current.encrypt(nonce, plaintext, aad)
        return _VERSION + self.key_id + nonce + sealed

    def decrypt(self, data: bytes, aad: bytes | None = None) -> bytes:
        """Inverse of `encrypt` with whichever known key wrote it.

        Raises:
            DecryptionError: Unknown format, a key that is not given, or altered bytes.
        """
        if len(data) < 1 + 4 + _NONCE + 16 or data[:1] != _VERSION:
            raise DecryptionError("encrypted value has an unknown format or is truncated")
        kid, nonce, sealed = data[1:5], data[5 : 5 + _NONCE], data[5 + _NONCE :]
        cipher = self._keys.get(kid)
        if cipher is None:
            raise DecryptionError(
                f"value was encrypted with key id {kid.hex()}, which is not among the keys "
                f"given ({', '.join(k.hex() for k in self._keys)}): wrong key? After a "
                "rotation, pass the old key in old_keys= (or after a comma in "
                f"${ENV_VAR})"
            )
        try:
            plain: bytes = cipher.decrypt(nonce, sealed, aad)
        except Exception as exc:  # cryptography's InvalidTag
            raise DecryptionError(
                f"encrypted value failed authentication with key id {kid.hex()}: the stored "
                "bytes were altered"
            ) from exc
        return plain
