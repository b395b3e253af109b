"""The tests must leave a user's Redis alone: snapshot the key count of every db on a port.

    python3 .ci/keyspace.py snapshot PORT        # prints `db0 keys=3` lines (or `no server`)
    python3 .ci/keyspace.py canary PORT          # seeds keys in db 0 and db 5 of our canary
    python3 .ci/keyspace.py shutdown PORT        # stops the canary without saving
    python3 .ci/keyspace.py connections PORT     # connections the server ever accepted

Stdlib only (a RESP client of a few lines), so it runs before anything is installed.
"""

from __future__ import annotations

import contextlib
import socket
import sys


def _command(port: int, *args: str) -> bytes:
    wire = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(wire.encode())
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            if data.startswith((b"+", b"-", b":")) and data.endswith(b"\r\n"):
                break
            if data.startswith(b"$"):
                head, _, rest = data.partition(b"\r\n")
                if len(rest) >= int(head[1:]) + 2:
                    break
    return data


def snapshot(port: int) -> str:
    """`dbN keys=M` per db of the server on `port`, `empty`, or `no server`."""
    try:
        reply = _command(port, "INFO", "keyspace")
    except OSError:
        return "no server"
    lines = [ln for ln in reply.decode().splitlines() if ln.startswith("db")]
    # `db0:keys=3,expires=1,avg_ttl=...`: only the key count is stable across a run.
    return "\n".join(ln.split(",")[0].replace(":", " ") for ln in lines) or "empty"


def main(argv: list[str]) -> int:
    """Run one action (see the module docstring); return the exit status."""
    action, port = argv[0], int(argv[1])
    if action == "snapshot":
        print(snapshot(port))
    elif action == "canary":
        for db, key in (("0", "canary:a"), ("0", "canary:b"), ("5", "canary:c")):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(
                    f"*2\r\n$6\r\nSELECT\r\n${len(db)}\r\n{db}\r\n"
                    f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n$1\r\n1\r\n".encode()
                )
                got = b""
                while got.count(b"\r\n") < 2:
                    got += s.recv(1024)
    elif action == "connections":
        reply = _command(port, "INFO", "stats").decode()
        print(next(ln.split(":")[1] for ln in reply.splitlines() if ln.startswith("total_conn")))
    elif action == "shutdown":
        with contextlib.suppress(OSError):  # the server closes the connection as it stops
            _command(port, "SHUTDOWN", "NOSAVE")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
