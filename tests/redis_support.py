"""Real Redis servers for tests: free loopback ports, our own redis-server processes, cleanup.

A module with a unique name (not a conftest) so every test folder can import it.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path


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


def cleanup_redis(url: str, namespace: str) -> None:
    """Delete every key of `namespace` (prefix `ar`) from the Redis at `url`."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"ar:{namespace}:*", count=1000))
        pipe = client.pipeline(transaction=False)
        for key in keys:  # one by one: on a cluster node, keys of several slots (CROSSSLOT)
            pipe.delete(key)
        pipe.execute()
    finally:
        client.close()
