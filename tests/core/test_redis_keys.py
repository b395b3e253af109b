"""Redis keys: distinct (namespace, id) pairs never share a key; a run's keys share one slot.

Old main built `ar:NS:run:{ID}:part` raw: namespace `acme` with run `x}:run:{y` was namespace
`acme:run:{x}` with run `y`, and an id starting with `}` (or empty) gave an empty hash tag, so a
run's keys spread over several Cluster slots (CROSSSLOT on every write).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("redis")

import redis
from redis.crc import key_slot

import agentrewind
from agentrewind.errors import SchemaVersionError
from agentrewind.records import StepRecord
from agentrewind.stores.redis._keys import RunKeys, id_base, namespace_key
from redis_support import cleanup_redis

# Text that stresses the encoding: the hash-tag and separator characters, `%` (the escape),
# empty strings and any unicode (lone surrogates included: the key builder must not crash).
_tricky = st.text(alphabet=st.sampled_from("{}:%a_-\x00é中\U0001f600 "), max_size=8)
ids = st.one_of(_tricky, st.text(max_size=8))
families = st.sampled_from(["run", "lg"])


def _all_keys(prefix: str, ns: str, family: str, ident: str) -> list[str]:
    if family == "run":
        return RunKeys.of(prefix, ns, ident).all()
    base = id_base(prefix, ns, family, ident)
    return [f"{base}:{p}" for p in ("cp", "ix", "bl", "wr", "wx", "th", "tomb")]


@settings(max_examples=400, deadline=None)
@given(a=st.tuples(ids, ids, families), b=st.tuples(ids, ids, families))
def test_distinct_pairs_never_share_a_key(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    keys_a, keys_b = set(_all_keys("ar", *a)), set(_all_keys("ar", *b))
    indexes = {namespace_key("ar", a[0], "runs"), namespace_key("ar", b[0], "runs")}
    if a == b:
        assert keys_a == keys_b
    else:
        assert not keys_a & keys_b
    assert not (keys_a | keys_b) & indexes  # no run key is ever an index key


@settings(max_examples=400, deadline=None)
@given(ns=ids, ident=ids, family=families)
def test_every_key_of_a_run_has_one_slot(ns: str, ident: str, family: str) -> None:
    keys = _all_keys("ar", ns, family, ident)
    assert len({key_slot(k.encode("utf-8", "surrogatepass")) for k in keys}) == 1
    # A non-empty tag: the first `{` of each key opens it and the next `}` closes it.
    for k in keys:
        start = k.index("{")
        assert k.index("}", start) > start + 1


def test_namespaces_are_isolated_on_redis(redis_url: str) -> None:
    """Tenant `acme:run:{x}` cannot read or delete tenant `acme`'s run `x}:run:{y`."""
    prefix = f"iso{uuid.uuid4().hex[:8]}"
    a = agentrewind.connect(f"{redis_url}?prefix={prefix}&namespace=acme")
    b = agentrewind.connect(f"{redis_url}?prefix={prefix}&namespace=acme:run:{{x}}")
    try:
        a.begin_run("x}:run:{y")
        a.put_steps([_record("x}:run:{y", "secret")])
        assert b.load_steps("y") == []
        assert b.get_run("y") is None
        b.begin_run("y")
        b.delete_run("y")
        assert [r.output for r in a.load_steps("x}:run:{y")] == ["secret"]
    finally:
        a.close()
        b.close()
        _drop_prefix(redis_url, prefix)


@pytest.mark.parametrize("run_id", ["}", "}x{", "", "{}", "a:b{c}", "é中\U0001f600"])
def test_any_id_works_on_redis_cluster(redis_cluster: str, run_id: str) -> None:
    store = agentrewind.connect(f"{redis_cluster}?namespace=c-{uuid.uuid4().hex[:8]}")
    try:
        store.begin_run(run_id)
        store.put_steps([_record(run_id, "v")], heads={"main": "s1"})
        assert store.acquire_lease(run_id, "me", 5.0)[0]
        assert [r.output for r in store.load_steps(run_id)] == ["v"]
        assert store.get_heads(run_id) == {"main": "s1"}
        assert [r.run_id for r in store.list_runs()] == [run_id]
        assert store.delete_run(run_id, force=True)  # the lease above is still live
    finally:
        store.close()


def test_old_key_layout_is_refused_then_migrated(redis_url: str) -> None:
    prefix, ns = f"mig{uuid.uuid4().hex[:8]}", "team:a"
    url = f"{redis_url}?prefix={prefix}&namespace={ns}"
    store = agentrewind.connect(url)
    store.begin_run("r}1")
    store.put_steps([_record("r}1", "kept")], heads={"main": "s1"})
    store.acquire_lease("r}1", "owner", 60.0)
    store.close()
    _downgrade_to_v1(redis_url, prefix, ns, "r}1")
    client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(SchemaVersionError, match="migrate=True"):
            agentrewind.connect(url)
        # Another namespace of the same server is not held back by it.
        other = agentrewind.connect(f"{redis_url}?prefix={prefix}&namespace=fresh")
        other.begin_run("x")
        other.close()
        assert client.get(f"{prefix}:schema_version") == b"1"  # old processes still run
        migrated = agentrewind.connect(url + "&migrate=1")
        assert [r.output for r in migrated.load_steps("r}1")] == ["kept"]
        assert migrated.get_heads("r}1") == {"main": "s1"}
        assert [r.run_id for r in migrated.list_runs()] == ["r}1"]
        assert not migrated.acquire_lease("r}1", "intruder", 1.0).acquired  # lease moved too
        migrated.close()
        assert client.get(f"{prefix}:schema_version") == b"3"  # old processes now refuse
        again = agentrewind.connect(url)  # marked: no flag needed now
        assert [r.output for r in again.load_steps("r}1")] == ["kept"]
        again.close()
        assert not list(client.scan_iter(match=f"{prefix}:{ns}:run:*"))  # old keys gone
    finally:
        client.close()
        _drop_prefix(redis_url, prefix)


def _downgrade_to_v1(url: str, prefix: str, ns: str, run_id: str) -> None:
    """Rewrite a run's keys to the layout of agentrewind 0.1 (raw ids, no layout key)."""
    client = redis.Redis.from_url(url)
    new, old = RunKeys.of(prefix, ns, run_id), f"{prefix}:{ns}:run:{{{run_id}}}"
    parts = ("steps", "order", "ids", "run", "heads", "lease", "sites")
    for part, key in zip(parts, new.all(), strict=True):
        if client.exists(key):
            client.rename(key, f"{old}:{part}")
    client.rename(namespace_key(prefix, ns, "runs"), f"{prefix}:{ns}:runs")
    client.delete(namespace_key(prefix, ns, "layout"))
    client.set(f"{prefix}:schema_version", 1)
    client.close()


def _drop_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()
    cleanup_redis(url, "unused")


def _record(run_id: str, output: str) -> StepRecord:
    return StepRecord(
        run_id=run_id,
        step_id="s1",
        parent_id=None,
        key="custom:k:0#0",
        kind="custom",
        name="k",
        status="completed",
        seq=0,
        output=output,
    )
