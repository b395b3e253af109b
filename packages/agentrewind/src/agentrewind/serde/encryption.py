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

Binding: every ciphertext (format v2) is bound to its place with AES-GCM associated data:
the namespace, the run (or LangGraph thread), the record (a journal step's key, a checkpoint's
id, a cache entry's site and key) and the field (`place()` builds it). A ciphertext copied to
another run, step, namespace or field fails authentication there (`DecryptionError` naming
the place) instead of replaying as that place's value. An encrypted store also refuses a
plaintext value where it expects a ciphertext.

Migration: a store encrypted after the fact holds plaintext values, and stores written before
the binding hold v1 ciphertexts (no associated data). `Encryption(key, migrate=True)` or
`$AGENTREWIND_ENCRYPTION_MIGRATE=1` reads both while the old data is rewritten (writes are
always v2); turn it off again once nothing old is left, as plaintext or v1 values are then
refused.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from collections.abc import Iterable
from typing import Any

from ..errors import DecryptionError

__all__ = [
    "ENV_VAR",
    "MIGRATE_ENV_VAR",
    "Encryption",
    "Place",
    "cache_place",
    "checkpoint_place",
    "generate_key",
    "place",
    "step_place",
]

ENV_VAR = "AGENTREWIND_ENCRYPTION_KEY"
MIGRATE_ENV_VAR = "AGENTREWIND_ENCRYPTION_MIGRATE"
_V1 = b"\x01"  # no associated data: read only in migration mode
_V2 = b"\x02"  # bound to its place (associated data)
_NONCE = 12
_PLACE = b"agentrewind-place-v2"


def place(namespace: str, run: str, where: str, field: str) -> bytes:
    """The associated data binding a ciphertext to its place.

    Each part is length-prefixed, so no two different places give the same bytes.

    Args:
        namespace: The store's namespace.
        run: The run id (a LangGraph thread id for the saver).
        where: The record: `step '<key>'`, `checkpoint '<id>'`, a cache site and key...
        field: The field of the record (`output`, `state`, `metadata`, a channel...).
    """
    out = [_PLACE]
    for part in (namespace, run, where, field):
        raw = part.encode("utf-8", "surrogatepass")
        out.append(len(raw).to_bytes(4, "big") + raw)
    return b"".join(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Place:
    """Where a sealed value is stored: what its ciphertext is bound to, and how errors name it.

    Attributes:
        namespace: The store's namespace.
        run: The run id (or LangGraph thread id).
        where: The record inside the run (`step 'k'`, `checkpoint 'id'`...).
        field: The field of the record.
        kind: `run` or `thread` (wording of messages only, not bound).
    """

    namespace: str
    run: str
    where: str
    field: str
    kind: str = "run"

    def aad(self) -> bytes:
        """The associated data of this place (`place(...)`)."""
        return place(self.namespace, self.run, self.where, self.field)

    def __str__(self) -> str:
        run = f"{self.kind} {self.run!r} " if self.run else ""
        return f"{run}{self.where} field {self.field} (namespace {self.namespace!r})"

    def moved(self, namespace: str, run: str) -> Place:
        """The same record and field in another namespace and run (a fork, an import)."""
        return dataclasses.replace(self, namespace=namespace, run=run)


def step_place(namespace: str, run: str, key: str, field: str = "output") -> Place:
    """The place of a journal step's field (bound to the step's key, not its attempt id)."""
    return Place(namespace, run, f"step {key!r}", field)


def checkpoint_place(namespace: str, run: str, checkpoint_id: str, field: str) -> Place:
    """The place of a timeline checkpoint's `state` or `metadata`."""
    return Place(namespace, run, f"checkpoint {checkpoint_id!r}", field)


def cache_place(namespace: str, site: str, key: str, field: str = "output") -> Place:
    """The place of a cross-run cache entry (site and content key; no run)."""
    return Place(namespace, "", f"cache site {site!r} entry {key!r}", field, kind="cache")


def migrating_from_env() -> bool:
    """Whether `$AGENTREWIND_ENCRYPTION_MIGRATE` turns migration mode on."""
    return os.environ.get(MIGRATE_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


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
        migrate: Migration mode: also read plaintext values and v1 ciphertexts (written
            before ciphertexts were bound to their place). None reads
            `$AGENTREWIND_ENCRYPTION_MIGRATE` (`1` turns it on). Writes are always bound.

    Raises:
        ValueError: No key given and the variable is unset, or a key of the wrong size.
        ImportError: `cryptography` is not installed (the `encryption` extra).
    """

    def __init__(
        self,
        key: bytes | str | None = None,
        *,
        old_keys: Iterable[bytes | str] = (),
        migrate: bool | None = None,
    ):
        self.migrate = migrating_from_env() if migrate is None else bool(migrate)
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

    def encrypt(self, plaintext: bytes, aad: bytes) -> bytes:
        """`version 2 | key id | nonce | ciphertext+tag` under the current key, bound to `aad`."""
        nonce = os.urandom(_NONCE)
        sealed: bytes = self._current.encrypt(nonce, plaintext, aad)
        return _V2 + self.key_id + nonce + sealed

    def decrypt(self, data: bytes, aad: bytes | None, where: object = "") -> bytes:
        """Inverse of `encrypt` with whichever known key wrote it, at the place `aad` names.

        Args:
            data: The stored bytes.
            aad: The associated data of the place the value is read from (`place()`).
            where: The place, for messages.

        Raises:
            DecryptionError: Unknown format, a key that is not given, altered bytes, a
                ciphertext of another place, or a v1 ciphertext outside migration mode.
        """
        at = f"{where}: " if str(where) else ""
        version = data[:1]
        if len(data) < 1 + 4 + _NONCE + 16 or version not in (_V1, _V2):
            raise DecryptionError(f"{at}encrypted value has an unknown format or is truncated")
        if version == _V1 and not self.migrate:
            raise DecryptionError(
                f"{at}encrypted without its place (format v1, written before agentrewind bound "
                "ciphertexts to their run, record and field), so it cannot be told apart from a "
                "value copied here from elsewhere; refused. To read old data while it is "
                f"rewritten, turn on migration mode: Encryption(key, migrate=True) or "
                f"${MIGRATE_ENV_VAR}=1"
            )
        kid, nonce, sealed = data[1:5], data[5 : 5 + _NONCE], data[5 + _NONCE :]
        cipher = self._keys.get(kid)
        if cipher is None:
            raise DecryptionError(
                f"{at}value was encrypted with key id {kid.hex()}, which is not among the keys "
                f"given ({', '.join(k.hex() for k in self._keys)}): wrong key? After a "
                "rotation, pass the old key in old_keys= (or after a comma in "
                f"${ENV_VAR})"
            )
        try:
            plain: bytes = cipher.decrypt(nonce, sealed, aad if version == _V2 else None)
        except Exception as exc:  # cryptography's InvalidTag
            raise DecryptionError(
                f"{at}encrypted value failed authentication with key id {kid.hex()}: the stored "
                "bytes were altered, or the ciphertext was copied here from another place (run, "
                "record, field or namespace); refused"
            ) from exc
        return plain
