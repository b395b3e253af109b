"""A small JSON Schema (draft 2020-12 subset) checker that reports every error with its field.

It interprets the schema file shipped in `agentrewind/documents/schemas/`, so the file is the single
source of truth. Supported keywords: type, enum, const, required, properties,
additionalProperties, items, anyOf, minimum, maximum, minLength and local `$ref`s.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from ..diff import join_path

__all__ = ["check", "load_schema"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


@functools.cache
def load_schema(name: str = "run-document.schema.json") -> dict[str, Any]:
    """Load a schema shipped in the package."""
    text = resources.files("agentrewind.documents").joinpath("schemas", name).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _is(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[type_name])


def check(
    value: Any, schema: dict[str, Any], root: dict[str, Any], path: str = ""
) -> list[tuple[str, str]]:
    """Return `(field, message)` for every violation of `schema` by `value`."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return check(value, target, root, path)
    where = path or "(document)"
    errors: list[tuple[str, str]] = []
    if "const" in schema and value != schema["const"]:
        return [(where, f"must be {schema['const']!r}, got {value!r}")]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return [(where, f"must be one of {allowed}, got {value!r}")]
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, t) for t in types):
            return [(where, f"must be of type {' or '.join(types)}, got {type(value).__name__}")]
    if "anyOf" in schema:
        options = [check(value, option, root, path) for option in schema["anyOf"]]
        if all(options):
            best = min(options, key=len)
            return [(where, "matches none of the allowed forms: " + "; ".join(m for _, m in best))]
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        errors.append((where, f"must have at least {schema['minLength']} character(s)"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((where, f"must be >= {schema['minimum']}, got {value}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((where, f"must be <= {schema['maximum']}, got {value}"))
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append((join_path(path, name), "is required"))
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += check(item, props[key], root, join_path(path, key))
            elif extra is False:
                errors.append((join_path(path, key), "is not an allowed field"))
            elif isinstance(extra, dict):
                errors += check(item, extra, root, join_path(path, key))
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += check(item, schema["items"], root, join_path(path, i))
    return errors
