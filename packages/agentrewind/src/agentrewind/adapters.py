"""The public interface for adapter authors: everything an adapter may use from the core.

An adapter (such as `agentrewind-langchain`) imports from here and from the top-level
`agentrewind` namespace only, never from a private module, so a core release can reorganise
its internals without breaking installed adapters. The names here follow the core's version
policy: they change only in a minor release, with a deprecation first.

What an adapter does, and where it finds it:

- **Open or resume a run**: `Middleware.run(run_id)` returns a `RunContext` (`with` or
  `async with`) that holds the run's lease; `current_run()` finds the run in progress.
- **Record a call, or replay it**: `call = run.begin(kind, name, key_input)`; when `call.hit`,
  return `call.value()`; else `call.start()`, run the real thing inside `call.executing()`,
  then `call.complete(output, usage)` or `call.fail(exc)` (`a`-prefixed async twins).
- **Inputs**: `run.begin(..., inputs=value)` records what the call was given beside its
  output (default: the key input; `record_inputs=False` per call site); a chat call passes
  `inputs=Chat(messages, digests, rest)` so each message is stored once per run, and
  `call.produced(digest, path)` names a message of its output a later prompt repeats.
  `resolve_inputs(records)` rebuilds a run's inputs for display.
- **Keys and ids**: `Run.digest(value)` hashes a normalised input; `new_id()` makes a
  time-ordered id.
- **Codecs**: `register_codec(Codec(...))` teaches the serializer a framework type;
  `Serializer.to_tree` / `from_tree` encode and decode values.
- **Encryption at rest**: `Encryption` (AES-GCM with key rotation) for an adapter that keeps
  its own payloads, raising `DecryptionError` for a wrong key.
- **Plugins** (entry points): `Adapter` for `agentrewind.adapters` (used by
  `Middleware.wrap`), `RunSource` for `agentrewind.run_sources` (framework-native runs the CLI
  lists), `CliRegistrar` for `agentrewind.cli_commands`, `Demo` for `agentrewind.demos`.
- **Leases**: `make_lease_owner()` names a writer for `Store.acquire_lease` /
  `renew_lease` / `release_lease` (and the `owner=` of fenced writes); `retire_lease_owner`
  marks it finished; `lease_owner_is_dead` tells whether an owner's process is gone (on
  this host; `lease_owner_is_local` whether it can tell). A writer that lost its lease gets
  `LeaseLostError`; a run that vanished from the store `DataLostError`.
- **Stores**: `Store` and `connect`; `SQLiteDatabase` and `apply_migrations`, the SQLite
  connection helper and migration runner an adapter shares with the core store when it keeps
  its own tables in the same file (as the LangGraph saver does).
- **The cross-run cache**: `Store.cache` (a backend with `get` / `put` / `clear` / `stats`
  and async twins) holds `CacheEntry`s (the JSON of a serializer tree) per call site;
  `cache_content_key(serializer, kind, name, key_input)` is the journal's key without run and
  occurrence. Framework-native caches (`agentrewind_langchain.RewindCache`) build on these.
  `wrap(obj, cache_ttl=, cache=[...], max_entries=)` hands the adapter its wrapper's rules
  as `cache=` (`CacheSites`; `CacheSites.take(kwargs)` reads them from either form); the
  adapter passes them with each of that wrapper's calls: `run.begin(..., cache=rules)`.
- **Redis I/O written once**: an operation on a `RedisStore` is a generator yielding
  `RedisScript` / `RedisCommand` / `RedisPipeline` and receiving each reply (a `RedisFlow`);
  `store.drive(flow)` runs it on the sync client, `await store.adrive(flow)` on the store's
  `redis.asyncio` client of the running loop (no thread), so sync and async share one code path.
- **PostgreSQL I/O written once**: likewise a `PostgresFlow` yields `PostgresTxn`s (statements
  run as one transaction in one pipeline, with the store's per-transaction settings) and
  receives their rows; `PostgresStore.drive` / `await adrive` run it on the sync pool or the
  running loop's `AsyncConnectionPool`, and `fenced_flow` puts its writes behind a lease.
  Array parameters wrapped in `PostgresTextArray` / `PostgresIntArray` / `PostgresBytesArray`
  are dumped in binary with their type known (psycopg's generic list dumper is slow).
"""

from __future__ import annotations

from .errors import (
    AdapterNotFoundError,
    AgentRewindError,
    CorruptRecordError,
    DataLostError,
    DecryptionError,
    DivergenceError,
    DivergenceWarning,
    IncompleteStepError,
    LeaseLostError,
    RecordedStepError,
    RunLockedError,
    SchemaVersionError,
    SerializationError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)
from .ids import new_id
from .journal import (
    Adapter,
    Call,
    CallEvent,
    IncompletePolicy,
    Middleware,
    Run,
    RunContext,
    current_run,
    idempotency_key,
)
from .journal.cache import content_key as cache_content_key
from .journal.cache_sites import CacheSites
from .journal.inputs import Chat, resolve_inputs
from .plugins import CliRegistrar, Demo, RunSource, load_group
from .records import RunInfo, RunMetrics, StepRecord
from .serde import Codec, Serializer, register_codec
from .serde.encryption import Encryption, Place, cache_place, place, step_place
from .stores import MemoryStore, SQLiteStore, Store, connect, default_url
from .stores.cache import CacheBackend, CacheEntry, CacheStats
from .stores.leases import (
    lease_owner_is_dead,
    lease_owner_is_local,
    make_lease_owner,
    retire_lease_owner,
)
from .stores.postgres import BytesArray as PostgresBytesArray
from .stores.postgres import IntArray as PostgresIntArray
from .stores.postgres import PgFlow as PostgresFlow
from .stores.postgres import TextArray as PostgresTextArray
from .stores.postgres import Txn as PostgresTxn
from .stores.redis import Command as RedisCommand
from .stores.redis import Pipeline as RedisPipeline
from .stores.redis import RedisFlow
from .stores.redis import Script as RedisScript
from .stores.sqlite import SQLiteDatabase, apply_migrations

__all__ = [
    "Adapter",
    "AdapterNotFoundError",
    "AgentRewindError",
    "CacheBackend",
    "CacheEntry",
    "CacheSites",
    "CacheStats",
    "Call",
    "CallEvent",
    "Chat",
    "CliRegistrar",
    "Codec",
    "CorruptRecordError",
    "DataLostError",
    "DecryptionError",
    "Demo",
    "DivergenceError",
    "DivergenceWarning",
    "Encryption",
    "IncompletePolicy",
    "IncompleteStepError",
    "LeaseLostError",
    "MemoryStore",
    "Middleware",
    "Place",
    "PostgresBytesArray",
    "PostgresFlow",
    "PostgresIntArray",
    "PostgresTextArray",
    "PostgresTxn",
    "RecordedStepError",
    "RedisCommand",
    "RedisFlow",
    "RedisPipeline",
    "RedisScript",
    "Run",
    "RunContext",
    "RunInfo",
    "RunLockedError",
    "RunMetrics",
    "RunSource",
    "SQLiteDatabase",
    "SQLiteStore",
    "SchemaVersionError",
    "SerializationError",
    "Serializer",
    "StepRecord",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "apply_migrations",
    "cache_content_key",
    "cache_place",
    "connect",
    "current_run",
    "default_url",
    "idempotency_key",
    "lease_owner_is_dead",
    "lease_owner_is_local",
    "load_group",
    "make_lease_owner",
    "new_id",
    "place",
    "register_codec",
    "resolve_inputs",
    "retire_lease_owner",
    "step_place",
]
