from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import agentrewind
from agentrewind import MemoryStore, SQLiteStore, StoreUnavailableError
from redis_support import RedisServer


def test_memory_urls() -> None:
    a = agentrewind.connect("memory://shared-x")
    b = agentrewind.connect("memory://shared-x")
    a.begin_run("r")
    assert isinstance(a, MemoryStore) and b.get_run("r") is not None
    assert agentrewind.connect("memory://").get_run("r") is None


def test_sqlite_relative_absolute_and_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rel = agentrewind.connect("sqlite:///sub/rel.db")
    assert isinstance(rel, SQLiteStore) and (tmp_path / "sub" / "rel.db").exists()
    rel.close()
    path = tmp_path / "abs.db"
    full = agentrewind.connect(f"sqlite:///{path}?durability=full&busy_timeout=2.5&namespace=n1")
    assert isinstance(full, SQLiteStore)
    assert full.namespace == "n1" and full.db.busy_timeout == 2.5
    conn = full.db.connection()
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    full.close()
    normal = agentrewind.connect(f"sqlite:///{path}")
    assert normal.db.connection().execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    normal.close()
    with pytest.raises(ValueError, match="durability"):
        agentrewind.connect(f"sqlite:///{path}?durability=sometimes")


def test_default_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTREWIND_STORE", raising=False)
    store = agentrewind.connect()
    assert store.url == "sqlite:///.agentrewind/agentrewind.db"
    assert (tmp_path / ".agentrewind" / "agentrewind.db").exists()
    store.close()
    monkeypatch.setenv("AGENTREWIND_STORE", "memory://from-env")
    assert agentrewind.connect().url == "memory://from-env"
    assert agentrewind.Middleware().store.url == "memory://from-env"


def test_unknown_scheme() -> None:
    with pytest.raises(ValueError, match="unknown store URL"):
        agentrewind.connect("mysql://localhost/db")


def test_schema_table_written(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    agentrewind.connect(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM ar_schema_version").fetchall() == [(1,)]


def test_redis_password_db_and_prefix(tmp_path: Path, redis_server_bin: str) -> None:
    server = RedisServer(tmp_path / "auth")
    server.args += ["--requirepass", "s3cret"]
    server.kill()
    server.start()
    try:
        url = f"redis://:s3cret@127.0.0.1:{server.port}/3?prefix=app&namespace=team"
        store = agentrewind.connect(url)
        assert "s3cret" not in store.url and "***" in store.url
        store.begin_run("r")
        import redis

        raw = redis.Redis(port=server.port, password="s3cret", db=3)
        assert raw.exists(store.key_base("run", "r") + ":run") == 1  # type: ignore[attr-defined]
        assert store.key_base("run", "r").startswith("app:team:run:{")  # type: ignore[attr-defined]
        other_db = redis.Redis(port=server.port, password="s3cret", db=0)
        assert other_db.dbsize() == 0
        other_db.close()
        raw.close()
        store.close()
        with pytest.raises(StoreUnavailableError) as info:
            agentrewind.connect(f"redis://:wrong@127.0.0.1:{server.port}/0")
        assert "wrong" not in str(info.value)
    finally:
        server.kill()


def test_redis_unreachable_is_clear() -> None:
    from redis_support import free_port

    port = free_port()
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{port}.*unreachable"):
        agentrewind.connect(f"redis://127.0.0.1:{port}/0", socket_timeout=0.5)


def test_cluster_is_detected(redis_cluster: str, namespace: str) -> None:
    store = agentrewind.connect(f"{redis_cluster}?namespace={namespace}")
    assert getattr(store, "cluster", False) is True
    forced = agentrewind.connect(f"redis+cluster://{redis_cluster.split('://', 1)[1]}")
    assert getattr(forced, "cluster", False) is True
    store.close()
    forced.close()


def test_tls_url_is_accepted_for_rediss() -> None:
    # No TLS server here: the URL must parse and fail as "unreachable", not as a bad scheme.
    from redis_support import free_port

    with pytest.raises(StoreUnavailableError):
        agentrewind.connect(f"rediss://user:pw@127.0.0.1:{free_port()}/0", socket_timeout=0.5)


def test_closing_a_cluster_store_closes_every_node_connection(
    redis_cluster: str, namespace: str
) -> None:
    import redis

    seed = redis.Redis.from_url(redis_cluster)
    ports = [int(addr.split(":")[1].split("@")[0]) for addr in seed.cluster("nodes")]
    seed.close()

    def connected() -> int:
        total = 0
        for port in ports:
            probe = redis.Redis(port=port)
            total += int(probe.info("clients")["connected_clients"]) - 1  # minus the probe
            probe.close()
        return total

    before = connected()
    store = agentrewind.connect(f"{redis_cluster}?namespace={namespace}")
    for i in range(12):  # runs hash to different slots, so every node gets a connection
        store.begin_run(f"r{i}")
    assert connected() > before
    store.close()
    time.sleep(0.1)
    assert connected() == before
