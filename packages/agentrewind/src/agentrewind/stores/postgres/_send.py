"""Sending a transaction's statements: one cursor, and typed array parameters in binary.

`send` / `asend` queue a transaction's statements on one cursor (a cursor per statement
costs about 2 us of client time each, its result objects more), a second one only for the
statement whose rows are wanted when it is not the last.

The typed array parameters (`_flow.TextArray`, `IntArray`, `BigIntArray`, `BytesArray`):
psycopg's generic list dumper discovers, in Python, the element type of every list on every call
(`ListDumper.upgrade`, `_find_list_element`, a dumper per element); with a dozen arrays per
write statement (the `unnest(...)` parameters) that was most of a write's client time. These
dumpers know the element type and write PostgreSQL's binary array format directly (a header,
then each element's length and bytes; -1 for NULL). Importing this module registers them on
psycopg's global adapters, so every connection made afterwards uses them; one made before
dumps them as plain lists (the same values, slower), as does a client-side-binding cursor.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from ._flow import BigIntArray, BytesArray, IntArray, TextArray

__all__ = ["asend", "register", "send"]

_HEAD = struct.Struct("!iiiii")  # ndim, has_null, element oid, length, lower bound
_EMPTY = struct.Struct("!iii")  # ndim 0: an empty array
_LEN = struct.Struct("!i")
_NULL = _LEN.pack(-1)


class _Array(Dumper):
    """A one-dimensional array of one known element type, in binary."""

    format = Format.BINARY
    elem_oid = 0

    def _head(self, n: int, has_null: bool) -> bytes:
        return _HEAD.pack(1, has_null, self.elem_oid, n, 1)

    def _varlen(self, items: list[bytes | None]) -> bytes:
        if not items:
            return _EMPTY.pack(0, 0, self.elem_oid)
        out = [self._head(len(items), None in items)]
        pack = _LEN.pack
        for b in items:
            if b is None:
                out.append(_NULL)
            else:
                out.append(pack(len(b)))
                out.append(b)
        return b"".join(out)


class _TextArrayDumper(_Array):
    oid = 1009  # text[]
    elem_oid = 25

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        conn = self.connection
        self._encoding = conn.info.encoding if conn is not None else "utf-8"

    def dump(self, obj: Any) -> bytes:
        enc = self._encoding
        return self._varlen([None if s is None else s.encode(enc) for s in obj])


class _BytesArrayDumper(_Array):
    oid = 1001  # bytea[]
    elem_oid = 17

    def dump(self, obj: Any) -> bytes:
        return self._varlen([None if b is None else bytes(b) for b in obj])


class _IntArrayDumper(_Array):
    oid = 1007  # int4[]
    elem_oid = 23
    code, size = "i", 4  # each element: its length (int4), then the value

    def dump(self, obj: Any) -> bytes:
        n = len(obj)
        if not n:
            return _EMPTY.pack(0, 0, self.elem_oid)
        code, size = self.code, self.size
        if None in obj:
            one = struct.Struct("!" + code).pack
            return self._varlen([None if i is None else one(i) for i in obj])
        body = struct.pack("!" + ("i" + code) * n, *[x for i in obj for x in (size, i)])
        return self._head(n, False) + body


class _BigIntArrayDumper(_IntArrayDumper):
    oid = 1016  # int8[]
    elem_oid = 20
    code, size = "q", 8


def send(conn: Any, statements: Sequence[tuple[Any, Any]], at: int | None) -> Any:
    """Execute `statements` on `conn`; returns the cursor holding statement `at`'s rows."""
    cur = out = conn.cursor()
    last = len(statements) - 1
    for i, (query, params) in enumerate(statements):
        if i == at and i != last:
            out = conn.cursor()
            out.execute(query, params)
        else:
            cur.execute(query, params)
    return out


async def asend(conn: Any, statements: Sequence[tuple[Any, Any]], at: int | None) -> Any:
    """`send` on an async connection."""
    cur = out = conn.cursor()
    last = len(statements) - 1
    for i, (query, params) in enumerate(statements):
        if i == at and i != last:
            out = conn.cursor()
            await out.execute(query, params)
        else:
            await cur.execute(query, params)
    return out


def register(adapters: Any = None) -> None:
    """Register the typed array dumpers on `adapters` (default: psycopg's global map)."""
    target = psycopg.adapters if adapters is None else adapters
    target.register_dumper(TextArray, _TextArrayDumper)
    target.register_dumper(IntArray, _IntArrayDumper)
    target.register_dumper(BytesArray, _BytesArrayDumper)
    target.register_dumper(BigIntArray, _BigIntArrayDumper)


register()
