"""`RewindSaver`'s default serde: LangGraph's, reviving only its safe types, refusing the rest.

LangGraph's `JsonPlusSerializer` by default revives any `module.name` a msgpack ext value
names: a checkpoint blob naming `os.system` calls it on load. In its strict mode it does not,
but it silently returns the constructor's arguments instead, so a graph would carry on with a
wrong value. This subclass runs LangGraph's strict mode and turns each blocked type into an
`UnsafeCheckpointError` naming it and the option that allows it. Blocked types are never
imported or called: LangGraph checks the allowlist before `import_module`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.base import CipherProtocol, SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentrewind.adapters import DecryptionError, Encryption, SerializationError, place

__all__ = [
    "AesGcmCipher",
    "BoundEncryptedSerializer",
    "SafeSerializer",
    "UnsafeCheckpointError",
    "at",
    "checkpoint_record",
    "encrypted",
    "value_record",
    "write_record",
]

_BLOCKED: contextvars.ContextVar[list[SerdeEvent] | None] = contextvars.ContextVar(
    "agentrewind_lg_blocked", default=None
)


class UnsafeCheckpointError(SerializationError):
    """A stored checkpoint names a type outside the saver's allowlist; nothing was run.

    Attributes:
        type_name: `module.name` of the refused type (or `module.name.method`).
    """

    def __init__(self, message: str, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name


def _on_event(event: SerdeEvent) -> None:
    blocked = _BLOCKED.get()
    if blocked is not None and event["kind"] in ("msgpack_blocked", "msgpack_method_blocked"):
        blocked.append(event)


_unregister = register_serde_event_listener(_on_event)


class SafeSerializer(JsonPlusSerializer):
    """LangGraph's serializer in strict mode, with refusals raised instead of swallowed.

    Args:
        allowed_msgpack_modules: Extra `(module, name)` pairs or classes that may be revived
            (LangGraph's own safe types always are: messages, `Send`, datetimes...).
        **kwargs: Passed to `JsonPlusSerializer`.
    """

    def __init__(
        self, *, allowed_msgpack_modules: Iterable[tuple[str, ...] | type] = (), **kwargs: Any
    ) -> None:
        allowed = tuple(allowed_msgpack_modules)
        super().__init__(allowed_msgpack_modules=allowed or None, **kwargs)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Revive a stored value; raises `UnsafeCheckpointError` for a type not allowed."""
        if "+" in data[0]:
            raise DecryptionError(
                f"stored checkpoint value is encrypted ({data[0]}) and no key is configured: "
                "pass RewindSaver(..., encryption=Encryption(key)) or set "
                "$AGENTREWIND_ENCRYPTION_KEY"
            )
        if data[0] == "pickle" and not self.pickle_fallback:
            raise UnsafeCheckpointError(
                "refusing a pickled checkpoint value: loading pickle can run any code; pass "
                "serde=JsonPlusSerializer(pickle_fallback=True) only if you trust this store",
                "pickle",
            )
        token = _BLOCKED.set([])
        try:
            value = super().loads_typed(data)
            blocked = _BLOCKED.get()
        finally:
            _BLOCKED.reset(token)
        if blocked:
            ev = blocked[0]
            name = f"{ev['module']}.{ev['name']}" + (f".{ev['method']}" if "method" in ev else "")
            raise UnsafeCheckpointError(
                f"refusing to revive {name} from a stored checkpoint: it is not one of "
                "LangGraph's safe types, and reviving it would import and call it. If your "
                "graph state holds this type and you trust the store, allow it: RewindSaver(..., "
                f"allowed_msgpack_modules=[({ev['module']!r}, {ev['name']!r})])",
                name,
            )
        return value


_PLACE: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "agentrewind_lg_place", default=None
)
"""The place of the value being (de)serialized: `(thread, record, field)` (see `at`)."""


class at:
    """The place of the values serialized inside: a thread's record and field.

    `RewindSaver` wraps each (de)serialization of a checkpoint, its metadata, a channel value
    and a pending write in one, so its ciphertext is bound to where it is stored.
    """

    __slots__ = ("_place", "_token")

    def __init__(self, thread: str, record: str, field: str) -> None:
        self._place = (thread, record, field)
        self._token: contextvars.Token[tuple[str, str, str] | None] | None = None

    def __enter__(self) -> None:
        self._token = _PLACE.set(self._place)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _PLACE.reset(self._token)


def checkpoint_record(cns: str, checkpoint_id: str) -> str:
    """The record of a checkpoint (and of its metadata) in a thread."""
    return f"checkpoint {cns!r} {checkpoint_id!r}"


def value_record(cns: str, version: str) -> str:
    """The record of a channel value (field: the channel): values are keyed by version."""
    return f"channel value {cns!r} version {version!r}"


def write_record(cns: str, checkpoint_id: str, task_id: str) -> str:
    """The record of a task's pending write at a checkpoint (field: the channel)."""
    return f"pending write {cns!r} {checkpoint_id!r} task {task_id!r}"


class AesGcmCipher(CipherProtocol):
    """LangGraph's cipher protocol over agentrewind's `Encryption` (AES-GCM, key rotation).

    Each ciphertext the saver stores is bound (AES-GCM associated data) to its place: the
    store namespace, the thread, the record (a checkpoint's id, a channel value's version, a
    pending write's checkpoint and task) and the field (the channel), under the cipher name
    `ar-aesgcm-p`. A value copied to another thread, checkpoint or channel fails
    authentication there (`DecryptionError`). Values serialized outside a place (LangGraph's
    node cache) are bound to the namespace only (`ar-aesgcm`), and a place never accepts
    those, except in migration mode (`Encryption(migrate=True)`: values written before the
    binding).
    """

    name = "ar-aesgcm"
    placed = "ar-aesgcm-p"

    def __init__(self, encryption: Encryption, namespace: str = "") -> None:
        self.encryption = encryption
        self.namespace = namespace

    @property
    def place(self) -> str:
        """How errors name where values are read."""
        where = _PLACE.get()
        if where is None:
            return f"LangGraph saver (namespace {self.namespace!r})"
        thread, record, field = where
        return (
            f"LangGraph saver thread {thread!r} {record} field {field!r} "
            f"(namespace {self.namespace!r})"
        )

    def _aad(self) -> bytes:
        return place(self.namespace, "", "langgraph saver", "value")

    def _placed_aad(self, where: tuple[str, str, str]) -> bytes:
        return place(self.namespace, where[0], f"langgraph {where[1]}", where[2])

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        """Encrypt with the current key, bound to the current place (see `at`)."""
        where = _PLACE.get()
        if where is None:
            return self.name, self.encryption.encrypt(plaintext, self._aad())
        return self.placed, self.encryption.encrypt(plaintext, self._placed_aad(where))

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        """Decrypt with whichever configured key wrote it, at the current place.

        Raises:
            DecryptionError: No configured key wrote it, its bytes were altered, it was
                written at another place (thread, checkpoint, channel) or namespace, or it is
                bound to the namespace only where a place is expected (outside migration mode).
        """
        where = _PLACE.get()
        if where is not None and ciphername == self.placed:
            return self.encryption.decrypt(ciphertext, self._placed_aad(where), self.place)
        if ciphername == self.name and (where is None or self.encryption.migrate):
            return self.encryption.decrypt(ciphertext, self._aad(), self.place)
        if ciphername in (self.name, self.placed):
            raise DecryptionError(
                f"{self.place}: the stored value's ciphertext is not bound to this place "
                f"(cipher {ciphername!r}): copied here from another place, or written before "
                "agentrewind bound the saver's values to their place (then read it in "
                "migration mode: Encryption(key, migrate=True)); refused"
            )
        raise DecryptionError(f"stored value uses cipher {ciphername!r}, not {self.placed!r}")


def plaintext_refused(cipher: AesGcmCipher, what: str) -> DecryptionError:
    """The error for a plaintext value read by an encrypting saver (outside migration mode)."""
    return DecryptionError(
        f"{cipher.place}: a stored {what} is in plaintext but this saver is encrypted; refused "
        "(written by a saver without the key, or planted). If the store was encrypted after "
        "the fact, read it in migration mode: Encryption(key, migrate=True) or "
        "$AGENTREWIND_ENCRYPTION_MIGRATE=1"
    )


class BoundEncryptedSerializer(EncryptedSerializer):
    """LangGraph's `EncryptedSerializer` that refuses plaintext values.

    LangGraph's own reads a value stored without a cipher as plaintext; this one raises
    `DecryptionError` unless the encryption is in migration mode (`Encryption(migrate=True)`).
    """

    cipher: AesGcmCipher

    def __init__(self, cipher: AesGcmCipher, serde: SerializerProtocol) -> None:
        super().__init__(cipher, serde)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decrypt and revive a stored value; a plaintext one only in migration mode."""
        if "+" not in data[0] and not self.cipher.encryption.migrate:
            raise plaintext_refused(self.cipher, f"checkpoint value (type {data[0]!r})")
        return super().loads_typed(data)


def encrypted(
    serde: SerializerProtocol, encryption: Encryption | bool | None
) -> SerializerProtocol:
    """`serde` wrapped to encrypt what it writes, when `encryption` (or the env key) says so.

    Reading an encrypted value with no key configured is a `DecryptionError` (raised by
    `SafeSerializer`), never bytes handed to msgpack.
    """
    if encryption is None or encryption is True:
        env = Encryption.from_env()
        if encryption is True and env is None:
            raise ValueError("encryption=True needs $AGENTREWIND_ENCRYPTION_KEY")
        encryption = env
    if not encryption:
        return serde
    return BoundEncryptedSerializer(AesGcmCipher(encryption), serde)
