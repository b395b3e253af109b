"""Fixtures shared by every test session: real SQLite files, real Redis, a real Redis Cluster.

Redis tests skip with a clear reason when no server can be found, unless
AGENTREWIND_REQUIRE_REDIS=1 (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_URL = os.environ.get("AGENTREWIND_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _require_redis() -> bool:
    return os.environ.get("AGENTREWIND_REQUIRE_REDIS") == "1"


def skip_or_fail(reason: str) -> None:
    if _require_redis():
        pytest.fail(f"{reason} (AGENTREWIND_REQUIRE_REDIS=1: Redis tests may not be skipped)")
    pytest.skip(reason)


def _redis_up(host: str = "127.0.0.1", port: int = 6379) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port(*, cluster: bool = False) -> int:
    """A free loopback port; for cluster nodes, one whose bus port (+10000) is free too."""
    if not cluster:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(200):
        port = random.randint(20000, 45000)
        if not _redis_up(port=port) and not _redis_up(port=port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisServer:
    """A redis-server process of our own on a free loopback port."""

    def __init__(
        self,
        directory: Path,
        *,
        cluster: bool = False,
        port: int | None = None,
        appendonly: bool = False,
    ) -> None:
        self.port = port or free_port(cluster=cluster)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(directory),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--appendonly",
            "yes" if appendonly else "no",
        ]
        if appendonly:
            args += ["--appendfsync", "always"]
        if cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ]
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = self.directory / "redis.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not _redis_up(port=self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                tail = log.read_text(errors="replace")[-500:]
                raise RuntimeError(f"redis-server on port {self.port} did not start: {tail}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture(scope="session")
def redis_url() -> str:
    if not _redis_up():
        skip_or_fail("no Redis server on 127.0.0.1:6379")
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_server_bin() -> str:
    path = shutil.which("redis-server")
    if path is None or shutil.which("redis-cli") is None:
        skip_or_fail("redis-server/redis-cli not found on PATH")
    return str(path)


@pytest.fixture(scope="session")
def redis_cluster(redis_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-master Redis Cluster on free loopback ports, started for this test session."""
    base = tmp_path_factory.mktemp("cluster")
    nodes: list[RedisServer] = []
    try:
        for i in range(3):
            for attempt in range(5):  # a random port can be taken between probe and bind
                try:
                    nodes.append(RedisServer(base / f"n{i}-{attempt}", cluster=True))
                    break
                except RuntimeError:
                    if attempt == 4:
                        raise
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{n.port}" for n in nodes],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        # Every node must agree before tests start: a node that has not converged answers
        # MOVED/CLUSTERDOWN, and the client then rebuilds its node map mid-test.
        deadline = time.monotonic() + 30
        while True:
            infos = [
                subprocess.run(
                    ["redis-cli", "-p", str(n.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
                for n in nodes
            ]
            if all(
                "cluster_state:ok" in i
                and "cluster_slots_ok:16384" in i
                and "cluster_known_nodes:3" in i
                for i in infos
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not become ready: {infos}")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{nodes[0].port}/0"
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _cleanup_redis(url: str, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"ar:{namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> Iterator[str]:
    """A store URL for each backend, in a fresh namespace; cleaned up afterwards."""
    kind = request.param
    if kind == "memory":
        yield f"memory://{namespace}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}?namespace={namespace}"
    elif kind == "redis":
        url = request.getfixturevalue("redis_url")
        yield f"{url}?namespace={namespace}"
        _cleanup_redis(url, namespace)
    else:
        url = request.getfixturevalue("redis_cluster")
        yield f"{url}?namespace={namespace}"
