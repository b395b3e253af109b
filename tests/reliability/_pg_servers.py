"""Servers the Postgres operability tests start themselves: a private cluster and PgBouncer.

`PrivateCluster` is `initdb` + `pg_ctl` of a throwaway cluster in a temporary directory on a
free loopback port, so a restart test never touches the machine's shared server. `PgBouncer`
runs Debian's `pgbouncer` in transaction pooling mode in front of one database. Both refuse
to run as root, so under root they run as the `postgres` user.

Binaries: `$AGENTREWIND_PG_BINDIR`, else the newest `/usr/lib/postgresql/*/bin`, else PATH;
`pgbouncer` from PATH or /usr/sbin. A missing binary skips the test with the reason, unless
AGENTREWIND_REQUIRE_POSTGRES=1 (set by .ci/run), which fails it instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

__all__ = ["PgBouncer", "PrivateCluster", "need", "postgres_bindir"]


def need(what: str, found: object) -> None:
    """Skip (or fail under AGENTREWIND_REQUIRE_POSTGRES=1) when `found` is falsy."""
    if found:
        return
    reason = f"{what} not found (Debian: apt install postgresql pgbouncer)"
    if os.environ.get("AGENTREWIND_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} (AGENTREWIND_REQUIRE_POSTGRES=1: Postgres tests may not skip)")
    pytest.skip(reason)


def postgres_bindir() -> Path | None:
    """The directory holding `initdb`, `pg_ctl` and `postgres`, or None."""
    env = os.environ.get("AGENTREWIND_PG_BINDIR")
    candidates = [Path(env)] if env else []
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True
    )
    candidates += versions
    which = shutil.which("pg_ctl")
    if which:
        candidates.append(Path(which).parent)
    for d in candidates:
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    return None


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user(home: Path) -> dict[str, Any]:
    """`subprocess` options to run a server as `postgres` when we are root (servers refuse
    root); `home` is handed to that user."""
    if os.geteuid() != 0:
        return {}
    for p in [home, *home.rglob("*")]:
        shutil.chown(p, "postgres", "postgres")
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


def _wait_port(port: int, up: bool, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if (s.connect_ex(("127.0.0.1", port)) == 0) == up:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not go {'up' if up else 'down'} within {seconds}s")


class PrivateCluster:
    """A PostgreSQL cluster of this test alone: trust auth, loopback, a free port."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.home = Path(tempfile.mkdtemp(prefix="agentrewind-pg-"))
        os.chmod(self.home, 0o755)
        self.data = self.home / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ]
        )
        self.start()

    def _run(self, cmd: list[str]) -> None:
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=False, **_server_user(self.home)
        )
        if done.returncode != 0:
            log = self.home / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{cmd[0]} failed: {done.stdout}{done.stderr}{tail}")

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off "
            "-c full_page_writes=off -c shared_buffers=16MB -c max_connections=40"
        )
        self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.home / "log"),
                "-o",
                opts,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        _wait_port(self.port, up=True)

    def stop(self, mode: str = "fast") -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])
        _wait_port(self.port, up=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.home, ignore_errors=True)


class PgBouncer:
    """PgBouncer in transaction pooling mode in front of database `dbname` at `upstream`."""

    def __init__(self, binary: str, upstream_port: int, dbname: str, pool_size: int = 3) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="agentrewind-pgb-"))
        os.chmod(self.home, 0o755)
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"
        (self.home / "users.txt").write_text('"postgres" ""\n')
        (self.home / "pgbouncer.ini").write_text(
            f"[databases]\n{dbname} = host=127.0.0.1 port={upstream_port} dbname={dbname}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.home / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
            "max_client_conn = 200\nignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.home / 'log'}\npidfile = {self.home / 'pid'}\n"
        )
        self.proc = subprocess.Popen(
            [binary, str(self.home / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_server_user(self.home),
        )
        try:
            _wait_port(self.port, up=True, seconds=15)
        except RuntimeError:
            self.close()
            raise

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)
