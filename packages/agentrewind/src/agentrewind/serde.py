"""Safe serialization: JSON with type tags; pickle only when the user opts in.

A tagged value is `{"__ar__": TAG, "v": PAYLOAD}`. Built-in tags cover what agents hold
(bytes, tuples, sets, datetimes, UUIDs, decimals, enums, dataclasses, pydantic models);
adapters register more with `register_codec` (LangChain messages, for example).

Loading never imports a module and never runs pickle unless `allow_pickle=True`:
dataclasses, pydantic models and enums are rebuilt only when their class is already
imported in this process or listed in `allowed_types`.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import pickle
import sys
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Any

from .errors import SerializationError

__all__ = ["Codec", "Serializer", "register_codec"]

TAG = "__ar__"


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
        allowed_types: Extra dataclasses, pydantic models or enums that may be rebuilt on load
            even if their module is not imported yet (it is then imported by name).
    """

    def __init__(self, *, allow_pickle: bool = False, allowed_types: Iterable[type] = ()) -> None:
        self.allow_pickle = allow_pickle
        self._allowed = {_type_path(t): t for t in allowed_types}

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
            return {TAG: "enum", "t": _type_path(type(value)), "v": self._tree(value.value, path)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {
                f.name: self._tree(getattr(value, f.name), f"{path}.{f.name}")
                for f in dataclasses.fields(value)
                if f.init
            }
            return {TAG: "dataclass", "t": _type_path(type(value)), "v": fields}
        dump = getattr(value, "model_dump", None)
        if callable(dump) and hasattr(type(value), "model_validate"):
            try:
                data = dump(mode="json")
            except Exception as exc:  # a field pydantic cannot put in JSON (a client, a function)
                if self.allow_pickle:
                    return self._pickled(value, path)
                raise _unserializable(value, path, f" (pydantic: {exc})") from exc
            return {TAG: "pydantic", "t": _type_path(type(value)), "v": self._tree(data, path)}
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
    def from_tree(self, tree: Any) -> Any:
        """Rebuild a value from `to_tree` output. Never imports or unpickles by default."""
        if isinstance(tree, list):
            return [self.from_tree(v) for v in tree]
        if not isinstance(tree, dict):
            return tree
        tag = tree.get(TAG)
        if tag is None:
            return {k: self.from_tree(v) for k, v in tree.items()}
        payload: Any = tree.get("v")
        match tag:
            case "dict":
                return {self._hashable(self.from_tree(k)): self.from_tree(v) for k, v in payload}
            case "tuple":
                return tuple(self.from_tree(v) for v in payload)
            case "set":
                return {self._hashable(self.from_tree(v)) for v in payload}
            case "frozenset":
                return frozenset(self._hashable(self.from_tree(v)) for v in payload)
            case "bytes":
                return base64.b64decode(payload)
            case "datetime":
                when = dt.datetime.fromisoformat(payload)
                if "tz" in tree:
                    zone = zoneinfo.ZoneInfo(tree["tz"])
                    return when.replace(tzinfo=zone, fold=int(tree.get("fold", 0)))
                return when
            case "date":
                return dt.date.fromisoformat(payload)
            case "time":
                return dt.time.fromisoformat(payload)
            case "timedelta":
                return dt.timedelta(seconds=payload)
            case "uuid":
                return uuid.UUID(payload)
            case "decimal":
                return decimal.Decimal(payload)
            case "enum":
                return self._resolve(tree["t"], enum.Enum)(self.from_tree(payload))
            case "dataclass":
                cls: Any = self._resolve(tree["t"], None)
                if not dataclasses.is_dataclass(cls):
                    raise SerializationError(f"{tree['t']} is not a dataclass")
                factory: Any = cls
                return factory(**{k: self.from_tree(v) for k, v in payload.items()})
            case "pydantic":
                cls = self._resolve(tree["t"], None)
                validate = getattr(cls, "model_validate", None)
                if validate is None:
                    raise SerializationError(f"{tree['t']} is not a pydantic model")
                return validate(self.from_tree(payload))
            case "pickle":
                if not self.allow_pickle:
                    raise SerializationError(
                        "refusing to load a pickled value: pickle is disabled by default because "
                        "loading it can run arbitrary code; pass allow_pickle=True if you trust "
                        "this store"
                    )
                return pickle.loads(base64.b64decode(payload))
        codec = _CODECS.get(tag)
        if codec is None:
            raise SerializationError(
                f"unknown type tag {tag!r}: install or import the adapter that registers it"
            )
        return codec.decode(self.from_tree(payload))

    @staticmethod
    def _hashable(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    def _resolve(self, path: str, base: type | None) -> Any:
        cls: Any = self._allowed.get(path)
        if cls is None:
            module_name, _, qualname = path.partition(":")
            module = sys.modules.get(module_name)
            if module is None:
                raise SerializationError(
                    f"type {path} is not loaded in this process and not in allowed_types; "
                    "import it first or pass allowed_types=[...] (stored data never triggers "
                    "an import)"
                )
            cls = module
            for part in qualname.split("."):
                cls = getattr(cls, part, None)
        if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
            raise SerializationError(f"stored type {path} does not resolve to an allowed class")
        return cls
