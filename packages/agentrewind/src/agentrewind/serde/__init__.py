"""Safe serialization: JSON with type tags; pickle only when the user opts in.

A tagged value is `{"__ar__": TAG, "v": PAYLOAD}`. Built-in tags cover what agents hold
(bytes, tuples, sets, datetimes, UUIDs, decimals, enums, dataclasses, pydantic models);
adapters register more with `register_codec` (LangChain messages, for example).

Loading never imports a module and never runs pickle unless `allow_pickle=True`:
dataclasses, pydantic models and enums are rebuilt only from an explicit allowlist, the
classes listed in `allowed_types` plus those this serializer itself encoded in this process,
never because stored data names a class that happens to be imported.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import pickle
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import DecryptionError, SerializationError
from .tags import TAG, decode_scalar, expect_dict, expect_list, locate

if TYPE_CHECKING:
    from .encryption import Encryption, Place

Redactor = Callable[[str, Any], Any]
"""`redact(field, value) -> value`: applied to what is stored (`output`, `state`, `metadata`)."""

__all__ = ["Codec", "Redactor", "Serializer", "register_codec"]


@dataclasses.dataclass(frozen=True)
class Codec:
    """A custom type tag: `encode` turns a value into JSON data, `decode` turns it back.

    Attributes:
        tag: The name stored in the record; must be unique.
        claims: Returns True for values this codec encodes.
        encode: Value to JSON-compatible data (may contain other tagged values).
        decode: The inverse of `encode`; must not execute stored code.
    """

    tag: str
    claims: Callable[[Any], bool]
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_CODECS: dict[str, Codec] = {}


def register_codec(codec: Codec) -> None:
    """Register a codec for every `Serializer` in this process (adapters call this on import)."""
    _CODECS[codec.tag] = codec


def _unserializable(value: Any, path: str, detail: str) -> SerializationError:
    cls = type(value)
    return SerializationError(
        f"cannot serialize value of type {cls.__module__}.{cls.__qualname__} at {path}{detail}: "
        "use JSON types, a dataclass, a pydantic model, register a codec with "
        "agentrewind.serde.register_codec, or opt in to pickle with allow_pickle=True",
        path=path,
    )


def _type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class Serializer:
    """Turns values into tagged JSON trees and back.

    Args:
        allow_pickle: Encode otherwise unserializable values with pickle and load them back.
            Off by default: a stored pickle then raises `SerializationError` and never runs.
        allowed_types: Dataclasses, pydantic models or enums that may be rebuilt on load.
            Classes this serializer encoded in this process are allowed too (so a run
            replays in the process that recorded it); a resumed process must list them.
        redact: Applied to every value before it is stored (never to the inputs that make
            replay keys): `redact(field, value)` returns what to keep. A replay returns the
            stored, redacted value.
        encryption: Encrypt stored values at rest (AES-GCM, `agentrewind.serde.encryption`). None
            uses `$AGENTREWIND_ENCRYPTION_KEY` when it is set; False never encrypts.
    """

    def __init__(
        self,
        *,
        allow_pickle: bool = False,
        allowed_types: Iterable[type] = (),
        redact: Redactor | None = None,
        encryption: Encryption | bool | None = None,
    ) -> None:
        self.allow_pickle = allow_pickle
        self._allowed = {_type_path(t): t for t in allowed_types}
        self.redact = redact
        if encryption is None or encryption is True:
            from .encryption import Encryption

            env = Encryption.from_env()
            if encryption is True and env is None:
                raise ValueError("encryption=True needs $AGENTREWIND_ENCRYPTION_KEY")
            encryption = env
        self.encryption: Encryption | None = encryption or None

    # -- what is stored -----------------------------------------------------------------------
    def prepare(self, value: Any, field: str) -> Any:
        """The tree to store for `value`: redacted, then tagged (not yet encrypted)."""
        return self.to_tree(value if self.redact is None else self.redact(field, value))

    def seal(self, tree: Any, place: Place | None = None) -> Any:
        """`tree` encrypted into one `enc` tag bound to `place` when encryption is on, else `tree`.

        Raises:
            ValueError: Encryption is on and no place is given (every ciphertext is bound).
        """
        if self.encryption is None:
            return tree
        if place is None:
            raise ValueError("an encrypted value is bound to its place: pass place=Place(...)")
        text = json.dumps(tree, separators=(",", ":"), sort_keys=True).encode()
        blob = self.encryption.encrypt(text, place.aad())
        return {TAG: "enc", "v": base64.b64encode(blob).decode()}

    def store_tree(self, value: Any, field: str, place: Place | None = None) -> Any:
        """`seal(prepare(value, field), place)`: what a store keeps for `value`."""
        return self.seal(self.prepare(value, field), place)

    def unseal(self, tree: Any, place: Place) -> Any:
        """The tree inside a stored sealed value at `place`, still tagged (not rebuilt).

        Without encryption the tree is returned as it is. With encryption it must be an
        `enc` tag bound to `place`; a plaintext value or a v1 ciphertext is read only in
        migration mode (`Encryption(migrate=True)`).

        Raises:
            DecryptionError: Plaintext where a ciphertext is expected, a ciphertext of
                another place, a wrong key, altered bytes; the message names `place`.
        """
        enc = self.encryption
        if enc is None:
            return tree
        if not (isinstance(tree, dict) and tree.get(TAG) == "enc"):
            if enc.migrate:
                return tree
            raise DecryptionError(
                f"{place}: stored in plaintext but this store is encrypted; refused (a value "
                "written without the key, or planted). If the store was encrypted after the "
                "fact, read it in migration mode: Encryption(key, migrate=True) or "
                "$AGENTREWIND_ENCRYPTION_MIGRATE=1"
            )
        try:
            raw = decode_scalar("bytes", tree)
        except Exception as exc:
            raise DecryptionError(f"{place}: encrypted value is not valid base64") from exc
        plain = enc.decrypt(raw, place.aad(), place)
        try:
            return json.loads(plain)
        except ValueError as exc:
            raise SerializationError(f"{place}: decrypted value is not valid JSON") from exc

    def open(self, tree: Any, place: Place) -> Any:
        """Rebuild a stored sealed value at `place`: every read of a sealed value goes here.

        Raises:
            DecryptionError: See `unseal`.
            SerializationError: See `from_tree`.
        """
        return self.from_tree(self.unseal(tree, place), str(place))

    def rebind(self, tree: Any, old: Place, new: Place) -> Any:
        """A sealed value of `old` sealed again for `new` (a fork or an import elsewhere).

        A plaintext value stays as it is (an unencrypted store, or migration mode).

        Raises:
            DecryptionError: No key for an encrypted value, or it does not open at `old`.
        """
        if not (isinstance(tree, dict) and tree.get(TAG) == "enc"):
            return tree
        if self.encryption is None:
            raise DecryptionError(
                f"{old}: encrypted, and moving it to {new} binds it to its new place, which "
                "needs the key: pass encryption=Encryption(key) or set "
                "$AGENTREWIND_ENCRYPTION_KEY; nothing was written"
            )
        return self.seal(self.unseal(tree, old), new)

    # -- encoding ---------------------------------------------------------------------------
    def dumps(self, value: Any) -> bytes:
        """Serialize `value` to JSON bytes; raises `SerializationError` naming the bad path."""
        return json.dumps(self.to_tree(value), separators=(",", ":"), sort_keys=True).encode()

    def loads(self, data: bytes | str) -> Any:
        """Inverse of `dumps`."""
        try:
            tree = json.loads(data)
        except ValueError as exc:
            raise SerializationError(f"stored value is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise SerializationError(
                "stored value is nested deeper than Python's recursion limit"
            ) from exc
        return self.from_tree(tree)

    def to_tree(self, value: Any, path: str = "$") -> Any:
        """Return a JSON-compatible tree for `value`, tagging non-JSON types.

        Raises:
            SerializationError: A value has no JSON form (the message names its path), or
                the value contains itself.
        """
        try:
            return self._tree(value, path)
        except RecursionError as exc:
            raise SerializationError(
                f"cannot serialize {type(value).__name__} at {path}: it contains itself (a "
                "cycle) or is nested deeper than Python's recursion limit",
                path=path,
            ) from exc

    def _tree(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, int) and not isinstance(value, enum.Enum):
            return value
        if isinstance(value, float):
            return value
        if isinstance(value, list):
            return [self._tree(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict) and type(value) is dict:
            if all(isinstance(k, str) for k in value) and TAG not in value:
                return {k: self._tree(v, f"{path}.{k}") for k, v in value.items()}
            return {
                TAG: "dict",
                "v": [
                    [self._tree(k, f"{path}<key>"), self._tree(v, f"{path}[{k!r}]")]
                    for k, v in value.items()
                ],
            }
        for codec in _CODECS.values():
            if codec.claims(value):
                try:
                    payload = codec.encode(value)
                except SerializationError:
                    raise
                except Exception as exc:
                    raise SerializationError(
                        f"cannot serialize {type(value).__name__} at {path} with codec "
                        f"{codec.tag!r}: {exc}",
                        path=path,
                    ) from exc
                return {TAG: codec.tag, "v": self._tree(payload, path)}
        return self._builtin_tree(value, path)

    def _builtin_tree(self, value: Any, path: str) -> Any:
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {
                TAG: "tuple",
                "v": [self._tree(v, f"{path}[{i}]") for i, v in enumerate(value)],
            }
        if isinstance(value, set | frozenset):
            items = [self._tree(v, f"{path}{{}}") for v in value]
            items.sort(key=lambda t: json.dumps(t, sort_keys=True))
            return {TAG: "frozenset" if isinstance(value, frozenset) else "set", "v": items}
        if isinstance(value, bytes | bytearray):
            return {TAG: "bytes", "v": base64.b64encode(bytes(value)).decode()}
        if isinstance(value, dt.datetime):
            if isinstance(value.tzinfo, zoneinfo.ZoneInfo) and value.tzinfo.key:
                wall = value.replace(tzinfo=None).isoformat()
                return {TAG: "datetime", "v": wall, "tz": value.tzinfo.key, "fold": value.fold}
            return {TAG: "datetime", "v": value.isoformat()}
        if isinstance(value, dt.date):
            return {TAG: "date", "v": value.isoformat()}
        if isinstance(value, dt.time):
            return {TAG: "time", "v": value.isoformat()}
        if isinstance(value, dt.timedelta):
            return {TAG: "timedelta", "v": value.total_seconds()}
        if isinstance(value, uuid.UUID):
            return {TAG: "uuid", "v": str(value)}
        if isinstance(value, decimal.Decimal):
            return {TAG: "decimal", "v": str(value)}
        if isinstance(value, enum.Enum):
            return {TAG: "enum", "t": self._note(type(value)), "v": self._tree(value.value, path)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {
                f.name: self._tree(getattr(value, f.name), f"{path}.{f.name}")
                for f in dataclasses.fields(value)
                if f.init
            }
            return {TAG: "dataclass", "t": self._note(type(value)), "v": fields}
        dump = getattr(value, "model_dump", None)
        if callable(dump) and hasattr(type(value), "model_validate"):
            try:
                data = dump(mode="json")
            except Exception as exc:  # a field pydantic cannot put in JSON (a client, a function)
                if self.allow_pickle:
                    return self._pickled(value, path)
                raise _unserializable(value, path, f" (pydantic: {exc})") from exc
            return {TAG: "pydantic", "t": self._note(type(value)), "v": self._tree(data, path)}
        if hasattr(value, "_fields") and isinstance(value, tuple):
            return {
                TAG: "tuple",
                "v": [self._tree(v, f"{path}[{i}]") for i, v in enumerate(value)],
            }
        if self.allow_pickle:
            return self._pickled(value, path)
        raise _unserializable(value, path, "")

    @staticmethod
    def _pickled(value: Any, path: str) -> dict[str, Any]:
        try:
            raw = pickle.dumps(value)
        except Exception as exc:
            raise SerializationError(
                f"cannot serialize {type(value).__name__} at {path}, even with pickle: {exc}",
                path=path,
            ) from exc
        return {TAG: "pickle", "v": base64.b64encode(raw).decode()}

    # -- decoding ---------------------------------------------------------------------------
    def from_tree(self, tree: Any, where: str = "") -> Any:
        """Rebuild a value from `to_tree` output. Never imports or unpickles by default.

        Args:
            tree: The stored tree.
            where: What holds it (record and field), for error messages.

        Raises:
            SerializationError: The tree is malformed (a bad tag payload, a refused type,
                nesting past the recursion limit); the message names `where` and the path.
        """
        try:
            return self._from(tree)
        except SerializationError as exc:
            if where:
                exc.args = (f"{where}: {exc}", *exc.args[1:])
            raise
        except RecursionError as exc:
            raise SerializationError(
                f"{where or 'stored value'}: nested deeper than Python's recursion limit "
                "(corrupt or hostile data)"
            ) from exc
        except Exception as exc:  # any failure of stored data to decode is a named error
            path = locate(self._from, tree)
            raise SerializationError(
                f"{where or 'stored value'}: malformed value at {path}: "
                f"{type(exc).__name__}: {exc}",
                path=path,
            ) from exc

    def _from(self, tree: Any) -> Any:
        if isinstance(tree, list):
            return [self._from(v) for v in tree]
        if not isinstance(tree, dict):
            return tree
        tag = tree.get(TAG)
        if tag is None:
            return {k: self._from(v) for k, v in tree.items()}
        payload: Any = tree.get("v")
        match tag:
            case "dict":
                return {self._hashable(self._from(k)): self._from(v) for k, v in payload}
            case "tuple":
                return tuple(self._from(expect_list(payload)))
            case "set":
                return {self._hashable(v) for v in self._from(expect_list(payload))}
            case "frozenset":
                return frozenset(self._hashable(v) for v in self._from(expect_list(payload)))
            case "bytes" | "datetime" | "date" | "time" | "timedelta" | "uuid" | "decimal":
                return decode_scalar(tag, tree)
            case "enum":
                return self._resolve(tree.get("t"), enum.Enum)(self._from(payload))
            case "dataclass":
                cls: Any = self._resolve(tree.get("t"), None)
                if not dataclasses.is_dataclass(cls):
                    raise SerializationError(f"{tree['t']} is not a dataclass")
                factory: Any = cls
                return factory(**{k: self._from(v) for k, v in expect_dict(payload).items()})
            case "pydantic":
                cls = self._resolve(tree.get("t"), None)
                validate = getattr(cls, "model_validate", None)
                if validate is None:
                    raise SerializationError(f"{tree['t']} is not a pydantic model")
                return validate(self._from(payload))
            case "enc":
                if self.encryption is None:
                    raise DecryptionError(
                        "stored value is encrypted and no key is configured: pass "
                        "encryption=Encryption(key) or set $AGENTREWIND_ENCRYPTION_KEY"
                    )
                # Read through `open` at its place; here only an unbound (v1) value, in
                # migration mode (a v2 value fails authentication without its place).
                raw = decode_scalar("bytes", tree)
                return self._from(json.loads(self.encryption.decrypt(raw, None)))
            case "pickle":
                if not self.allow_pickle:
                    raise SerializationError(
                        "refusing to load a pickled value: pickle is disabled by default because "
                        "loading it can run arbitrary code; pass allow_pickle=True if you trust "
                        "this store"
                    )
                return pickle.loads(decode_scalar("bytes", tree))
        codec = _CODECS.get(tag) if isinstance(tag, str) else None
        if codec is None:
            raise SerializationError(
                f"unknown type tag {tag!r}: install or import the adapter that registers it"
            )
        return codec.decode(self._from(payload))

    @staticmethod
    def _hashable(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    def _note(self, cls: type) -> str:
        """The stored name of `cls`, which this serializer may now rebuild (it wrote it)."""
        path = _type_path(cls)
        self._allowed.setdefault(path, cls)
        return path

    def _resolve(self, path: Any, base: type | None) -> Any:
        cls: Any = self._allowed.get(path) if isinstance(path, str) else None
        if cls is None:
            raise SerializationError(
                f"refusing to rebuild stored type {path!r}: it is not in allowed_types. If "
                "you trust it, pass allowed_types=[TheClass] (Middleware, Serializer), or "
                "register a codec; stored data never decides which classes are imported"
            )
        if base is not None and not issubclass(cls, base):
            raise SerializationError(f"stored type {path} does not resolve to an allowed class")
        return cls
