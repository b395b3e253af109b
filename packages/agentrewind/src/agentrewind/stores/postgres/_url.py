"""PostgreSQL store URLs: our query options split from libpq's, passwords redacted, schema names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from ...errors import StoreConfigError
from ..urls import redact_url

__all__ = ["TCP_DEFAULTS", "quote_schema", "redact", "split_url", "tcp_settings"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def redact(url: str) -> str:
    """Return `url` with every secret-bearing part replaced by `***` (see `stores.urls`)."""
    return redact_url(url)


def split_url(url: str, ours: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The libpq URL without our query options (`ours`), and those options as keywords."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    found = {k: query.pop(k) for k in ours if k in query}
    scheme = "postgresql" if parts.scheme.lower() == "postgres" else parts.scheme
    clean = urlunsplit(parts._replace(scheme=scheme, query=urlencode(query)))
    kwargs: dict[str, Any] = {
        k: found[k] for k in ("namespace", "schema", "durability") if k in found
    }
    if "pipeline" in found:
        kwargs["pipeline"] = found["pipeline"].lower() not in ("0", "false", "off", "no")
    if "rls" in found:
        kwargs["rls"] = found["rls"]  # 1 or role: `_rls.parse`
    if "connect_timeout" in query:  # libpq's, also bounds the wait for the pool
        kwargs["connect_timeout"] = float(query["connect_timeout"])
    numbers = (("max_size", int), ("prepare_threshold", int), ("lock_timeout", float))
    for name, kind in (*numbers, ("deadline", float)):
        value = found.get(name)
        if value is None:
            continue
        if name == "prepare_threshold" and value.lower() in ("none", "off", ""):
            kwargs[name] = None
            continue
        try:
            kwargs[name] = kind(value)
        except ValueError:
            raise ValueError(f"{name} in the store URL must be a number, not {value!r}") from None
    return clean, kwargs


def quote_schema(schema: str) -> str:
    """The schema name as a quoted SQL identifier; refuses anything but a plain name.

    Raises:
        StoreConfigError: Not a plain name, or one of PostgreSQL's own schemas
            (`information_schema`, `pg_catalog`, any `pg_*`): our tables never go there.
    """
    if not isinstance(schema, str) or not _IDENT.match(schema):
        raise StoreConfigError(
            f"schema must be a plain SQL name (letters, digits, _), not {schema!r}"
        )
    if schema.lower() == "information_schema" or schema.lower().startswith("pg_"):
        raise StoreConfigError(
            f"schema {schema!r} is PostgreSQL's own (information_schema and pg_* are "
            "reserved): name a schema of your own, e.g. schema=agents"
        )
    return f'"{schema}"'


TCP_DEFAULTS = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                "keepalives_count": 3}  # fmt: skip
"""libpq keepalive settings of our connections (a dead peer seen within about a minute)."""


def tcp_settings(conninfo: str, deadline: float) -> dict[str, Any]:
    """Keepalives and `tcp_user_timeout` (ms) for connections, minus what `conninfo` sets."""
    try:
        given = psycopg.conninfo.conninfo_to_dict(conninfo) if conninfo else {}
    except psycopg.Error:
        given = {}
    wanted: dict[str, Any] = TCP_DEFAULTS | {"tcp_user_timeout": round(deadline * 1000)}
    return {k: v for k, v in wanted.items() if k not in given}
