"""The records every store holds: steps (the journal and the timeline) and runs."""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .errors import CorruptRecordError, SchemaVersionError

__all__ = [
    "INDEX_FROM",
    "INPUT_FIELDS",
    "RECORD_FORMAT",
    "RunInfo",
    "RunMetrics",
    "StepIndex",
    "StepRecord",
    "StepStatus",
    "base_key",
    "open_journal",
    "site_json",
]

StepStatus = Literal["started", "completed", "failed"]

RECORD_FORMAT = 1
"""Version of the encoded record layout; a newer one is refused, never misread."""

_MAGIC = b"AR"

INPUT_FIELDS = ("inputs", "prompt")
"""The meta entries holding a step's sealed inputs (`journal.inputs`): both absent in records
written before inputs were recorded, or with `record_inputs=False`."""


def base_key(key: str) -> str:
    """The call's key of a record's key: `<key>`, or the `<key>` of an attempt's `<key>@<n>`."""
    head, at, n = key.rpartition("@")
    return head if at and n.isdigit() and head.rpartition("#")[2].isdigit() else key


@dataclasses.dataclass(slots=True)
class StepRecord:
    """One step of a run: an LLM call, a tool call, a framework step or a checkpoint.

    `output` and `meta` hold serializer trees (JSON data with type tags), not live objects:
    the journal decodes `output` only when a replay needs it.
    """

    run_id: str
    step_id: str
    key: str
    kind: str
    name: str
    status: StepStatus
    seq: int
    parent_id: str | None = None
    output: Any = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def site(self) -> Site:
        """`(kind, name, replayable)`: replayable when completed, or recorded as it is."""
        return self.kind, self.name, self.status == "completed" or bool(self.meta.get("recorded"))

    def encode(self) -> bytes:
        """Encode as `AR<format>:<crc32>:<json>`; the checksum covers the JSON bytes."""
        body = json.dumps(
            {
                "run_id": self.run_id,
                "step_id": self.step_id,
                "key": self.key,
                "kind": self.kind,
                "name": self.name,
                "status": self.status,
                "seq": self.seq,
                "parent_id": self.parent_id,
                "output": self.output,
                "meta": self.meta,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            },
            separators=(",", ":"),
        ).encode()
        return b"%s%d:%08x:%s" % (_MAGIC, RECORD_FORMAT, zlib.crc32(body), body)

    @classmethod
    def decode(cls, data: bytes, *, where: str = "") -> StepRecord:
        """Parse and verify an encoded record.

        Raises:
            CorruptRecordError: the bytes were altered or truncated.
            SchemaVersionError: the record was written by a newer record format.
        """
        where = f" ({where})" if where else ""
        if not isinstance(data, bytes):
            # A column edited by hand (SQLite text affinity) or a foreign value in the key:
            # judge its bytes like any other record rather than fail with a TypeError.
            if isinstance(data, str):
                data = data.encode()
            elif isinstance(data, bytearray | memoryview):
                data = bytes(data)
            else:
                raise CorruptRecordError(
                    f"record{where} is a {type(data).__name__}, not agentrewind record bytes"
                )
        if not data.startswith(_MAGIC):
            raise CorruptRecordError(f"record{where} does not start with the agentrewind header")
        try:
            version_s, crc_s, body = data[2:].split(b":", 2)
            version, crc = int(version_s), int(crc_s, 16)
        except ValueError as exc:
            raise CorruptRecordError(f"record{where} has a malformed header") from exc
        if version > RECORD_FORMAT:
            raise SchemaVersionError(
                f"record{where} uses format {version}; this agentrewind reads up to "
                f"{RECORD_FORMAT}: upgrade agentrewind"
            )
        if zlib.crc32(body) != crc:
            raise CorruptRecordError(f"record{where} failed its checksum: the stored bytes changed")
        try:
            fields = json.loads(body)
            record = cls(**fields)
        except (ValueError, TypeError) as exc:
            raise CorruptRecordError(f"record{where} cannot be parsed: {exc}") from exc
        except RecursionError as exc:
            raise CorruptRecordError(
                f"record{where} is nested deeper than Python's recursion limit"
            ) from exc
        bad = _bad_field(record)
        if bad:
            raise CorruptRecordError(f"record{where} has a malformed field {bad}")
        return record


_STATUSES = ("started", "completed", "failed")


def _bad_field(r: StepRecord) -> str:
    """The first field of a parsed record whose type is wrong, or ''."""
    for name in ("run_id", "step_id", "key", "kind", "name"):
        if not isinstance(getattr(r, name), str):
            return name
    if r.status not in _STATUSES:
        return "status"
    if not isinstance(r.seq, int) or isinstance(r.seq, bool):
        return "seq"
    if r.parent_id is not None and not isinstance(r.parent_id, str):
        return "parent_id"
    if not isinstance(r.meta, dict):
        return "meta"
    for name in ("created_at", "updated_at"):
        value = getattr(r, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return name
    return ""


INDEX_FROM = 2_000
"""Runs with this many steps open from a `StepIndex`; shorter ones are decoded at once."""

Site = tuple[str, str, bool]
"""`(kind, name, replayable)` of a recorded call; one shared tuple per distinct value."""


@dataclasses.dataclass(slots=True)
class StepIndex:
    """A run's journal as keys and what a replay decision needs, outputs left in the store.

    Opening a run reads this instead of every decoded record: each record's checksum is
    verified, but its JSON is not parsed (`scan`); a replay hit then loads its one record.
    """

    sites: dict[str, Site]
    """Key to `(kind, name, replayable)`; the tuples are shared between keys."""
    seq: int = 0
    """The highest sequence number recorded."""
    last_step_id: str | None = None
    """The step with that sequence number."""

    @classmethod
    def scan(cls, rows: list[tuple[str, bytes]], *, run_id: str) -> StepIndex:
        """Index `(key, encoded record)` rows; a record the fast path cannot read is decoded.

        Raises:
            CorruptRecordError: a record's bytes were altered or truncated.
            SchemaVersionError: a record was written by a newer record format.
        """
        parsed: dict[bytes, Site] = {}
        shared: dict[Site, Site] = {}
        sites: dict[str, Site] = {}
        crc32, prefix = zlib.crc32, b"%s%d:" % (_MAGIC, RECORD_FORMAT)
        for key, data in rows:
            site = None
            # `AR1:<8 hex>:{"run_id":..,"step_id":..,"key":..,"kind":..,"name":..,"status":..`
            # Field order is fixed and a raw quote cannot occur inside a JSON string, so the
            # first `"kind":` and `,"status":"` are the record's own fields.
            if type(data) is bytes and data[:4] == prefix:
                kind_at = data.find(b'"kind":', 13)
                status_at = data.find(b',"status":"', kind_at)
                if (
                    kind_at > 0
                    and status_at > 0
                    and data[4:12] == b"%08x" % crc32(memoryview(data)[13:])
                    and data.find(b'"recorded":', status_at) < 0  # meta.recorded: decode it
                ):
                    text = data[kind_at : status_at + 12]
                    site = parsed.get(text)
                    if site is None:
                        head = json.loads(b"{" + data[kind_at:status_at] + b"}")
                        site = (head["kind"], head["name"], text[-1:] == b"c")
                        site = parsed[text] = shared.setdefault(site, site)
            if site is None:  # anything unusual: the full decode, with its named errors
                record = StepRecord.decode(data, where=f"run {run_id!r} key {key!r}")
                site = shared.setdefault(record.site, record.site)
            sites[key] = site
        return cls(sites)

    @classmethod
    def of_sites(
        cls, keys: Sequence[str], texts: Sequence[str | bytes], *, run_id: str
    ) -> StepIndex:
        """Index keys by their entries (`site_json`), which a store wrote beside each record.

        No record is read: each is decoded, and its checksum verified, when a replay hit
        loads it. (A run calls few distinct sites: each is parsed once.)

        Raises:
            CorruptRecordError: an entry is not `site_json` output.
        """
        parsed: dict[str | bytes, Site] = {}
        for text in set(texts):
            try:
                kind, name, replayable = json.loads(text)
                ok = isinstance(kind, str) and isinstance(name, str)
            except (ValueError, TypeError):
                ok = False
            if not ok:
                key = keys[texts.index(text)]
                raise CorruptRecordError(
                    f"index entry of run {run_id!r} key {key!r} is malformed: {text!r}"
                )
            parsed[text] = (kind, name, bool(replayable))
        return cls(dict(zip(keys, map(parsed.__getitem__, texts), strict=True)))


@functools.lru_cache(maxsize=4096)
def site_json(site: Site) -> str:
    """A record's site as the index entry a store writes beside it: `[kind, name, replayable]`.

    (Cached: a run calls few distinct sites, and a write encodes one per record.)
    """
    return json.dumps(site, separators=(",", ":"))


def open_journal(
    rows: list[tuple[str, bytes]], *, run_id: str, last: Callable[[], tuple[int, str] | None]
) -> StepIndex | list[StepRecord]:
    """A run's journal from its `(key, encoded record)` rows, as a store's `_load_index`.

    Fewer than `INDEX_FROM` rows: every record decoded, in `seq` order (replay hits then need
    no more reads). More: a `StepIndex`, with the `(seq, step_id)` of the last record `last()`
    reads (called only then).
    """
    if len(rows) < INDEX_FROM:
        records = [StepRecord.decode(d, where=f"run {run_id!r} key {k!r}") for k, d in rows]
        records.sort(key=lambda r: r.seq)
        return records
    index = StepIndex.scan(rows, run_id=run_id)
    found = last()
    if found is not None:
        index.seq, index.last_step_id = found
    return index


@dataclasses.dataclass(slots=True)
class RunMetrics:
    """What a run did and what replay saved: the one set of numbers every surface shows.

    `agentrewind runs`, `agentrewind metrics`, the viewer, `Middleware.metrics()` and the
    OpenTelemetry run span all read them through `agentrewind.numbers.run_numbers`: `steps`
    is counted from the run's records, the rest are the run's totals, which each execution
    writes as it goes (before the first call it runs after replays, failures or a resume, and
    at its end), so a killed execution's replays and failures are counted too.

    Attributes:
        steps: Records in the journal, each attempt of a call its own (what `log` lists).
        replay_hits: Calls answered from the journal instead of running.
        seconds_saved: Wall time the replayed calls took when they first ran.
        tokens_saved: LLM tokens the replayed calls used when they first ran.
        failures: Calls that raised.
        reruns: Started-but-never-completed steps run again on resume.
        cache_hits: Calls answered from the cross-run cache instead of running (their
            seconds and tokens count in `seconds_saved` and `tokens_saved`).
        attempts: Calls run again after an earlier attempt failed or was killed (each
            earlier attempt stays in the journal as its own record).
        executions: Times the run was opened to execute: its first run and each resume.
    """

    steps: int = 0
    replay_hits: int = 0
    seconds_saved: float = 0.0
    tokens_saved: int = 0
    failures: int = 0
    reruns: int = 0
    cache_hits: int = 0
    attempts: int = 0
    executions: int = 0

    def add(self, other: RunMetrics) -> None:
        """Add `other` into this object in place."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, other: RunMetrics) -> RunMetrics:
        """A new object holding `self - other`, field by field."""
        return RunMetrics(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in _FIELDS}
        )

    def copy(self) -> RunMetrics:
        """A copy of this object."""
        return dataclasses.replace(self)

    def as_dict(self) -> dict[str, Any]:
        """Return the metrics as a plain dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RunMetrics:
        """Metrics as a store or a document holds them (unknown names ignored).

        Raises:
            TypeError: `data` is not a mapping of names to numbers.
        """
        if not isinstance(data, dict):
            raise TypeError(f"run metrics must be a JSON object, not {type(data).__name__}")
        out = cls()
        for f in _FIELDS:
            value = data.get(f.name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
                raise TypeError(f"run metric {f.name!r} is not a number: {value!r}")
            setattr(out, f.name, float(value) if f.name == "seconds_saved" else int(value))
        return out


_FIELDS = dataclasses.fields(RunMetrics)


@dataclasses.dataclass(slots=True)
class RunInfo:
    """A run as listed by a store."""

    run_id: str
    status: str
    created_at: float
    updated_at: float
    expires_at: float | None = None
    metrics: RunMetrics = dataclasses.field(default_factory=RunMetrics)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
