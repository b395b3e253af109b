"""The viewer's HTTP server: GET-only JSON API, the single page and its static files.

Safe by default: it opens the store read-only, as the CLI's views do (nothing created, migrated
or written), binds to loopback, answers only GET and HEAD (any other method gets 405), refuses
a `Host` header that is not the address it serves (a web page on another origin cannot reach
it through DNS rebinding), and sends a strict Content-Security-Policy (`default-src 'self'`, no
inline script), so a stored string can only ever be text: the page renders every value with
`textContent`.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..cli.common import open_store
from ..documents import RunNotFoundError
from ..errors import AgentRewindError
from ..stores import Store
from . import api

__all__ = ["ViewerServer", "cmd_ui", "make_server"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'none'"
)
_STATIC = files("agentrewind.ui") / "static"
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
}


IDLE_TIMEOUT = 30.0
"""Seconds a connection may stay idle (or send a request slowly) before the viewer drops it,
so an idle keep-alive connection does not hold a thread forever."""

MAX_LIMIT = 1_000_000
"""The largest `?limit=` the API takes."""


class ViewerServer(ThreadingHTTPServer):
    """A `ThreadingHTTPServer` that holds the store the viewer reads."""

    daemon_threads = True

    def __init__(
        self, store: Store, address: tuple[str, int], *, idle_timeout: float = IDLE_TIMEOUT
    ) -> None:
        super().__init__(address, _Handler)
        self.store = store
        self.idle_timeout = idle_timeout
        self.lock = threading.Lock()  # one reader at a time: stores are cheap to read

    @property
    def url(self) -> str:
        """`http://host:port/` the viewer answers on."""
        host, port = self.server_address[:2]
        host = str(host)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def host_allowed(self, header: str) -> bool:
        """Loopback binds answer only to loopback names (no DNS rebinding); others to any."""
        host, port = str(self.server_address[0]), self.server_address[1]
        if host not in ("127.0.0.1", "::1") and not host.startswith("127."):
            return True
        names = {host, "localhost", "127.0.0.1", "[::1]", f"[{host}]"}
        return header in {f"{n}:{port}" for n in names}


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "agentrewind-ui"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        # A socket timeout: `handle` ends a connection idle (or slow) for that long.
        self.connection.settimeout(self.server.idle_timeout)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: a viewer, not a web server
        pass

    def _send(self, status: int, body: bytes, ctype: str, *, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        body = json.dumps(data, ensure_ascii=False, default=str).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _refuse(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        if not self.server.host_allowed(self.headers.get("Host", "")):
            self._json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return
        parts = urlsplit(self.path)
        path = parts.path
        if path.startswith("/api/"):
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            self._api([unquote(p) for p in path[5:].split("/")], query)
        elif path.startswith("/static/"):
            self._static(path[len("/static/") :])
        else:  # every page of the app has its own URL; the app routes on it
            self._static("index.html")

    def _static(self, name: str) -> None:
        if "/" in name or name.startswith(".") or not name:
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        resource = _STATIC / name
        if not resource.is_file():
            self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            return
        ext = "." + name.rsplit(".", 1)[-1]
        ctype = _TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/"):
            ctype += "; charset=utf-8"
        self._send(HTTPStatus.OK, resource.read_bytes(), ctype, cache=name != "index.html")

    def _api(self, parts: list[str], query: dict[str, str]) -> None:
        store = self.server.store
        try:
            with self.server.lock:
                data = _route(store, parts, query)
        except RunNotFoundError as exc:
            self._json(HTTPStatus.NOT_FOUND, {"error": str(exc)})
            return
        except (AgentRewindError, ValueError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"{type(exc).__name__}: {exc}"})
            return
        except Exception as exc:  # a broken store or plugin: say so, never a traceback page
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})
            return
        if data is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": "no such endpoint"})
        else:
            self._json(HTTPStatus.OK, data)


def _route(store: Store, parts: list[str], query: dict[str, str]) -> Any:
    """Dispatch `/api/...` (path split on `/`); None for an unknown endpoint."""
    limit = _limit(query.get("limit", "500"))
    match parts:
        case ["store"]:
            return api.store_info(store)
        case ["runs"]:
            return api.list_runs(store, limit)
        case ["metrics"]:
            return api.metrics(store, None, limit)
        case ["queues"]:
            return api.queues(store)
        case ["runs", run_id]:
            return api.run_detail(store, run_id)
        case ["runs", run_id, "graph"]:
            return api.graph(store, run_id)
        case ["runs", run_id, "metrics"]:
            return api.metrics(store, run_id, limit)
        case ["runs", run_id, "steps", step_id]:
            return api.step_detail(store, run_id, step_id)
        case ["runs", run_id, "diff"]:
            if "a" not in query or "b" not in query:
                raise ValueError("diff needs ?a=STEP&b=STEP")
            return api.diff(store, run_id, query["a"], query["b"])
    return None


def _limit(text: str) -> int:
    """`?limit=`: a whole number from 1 to `MAX_LIMIT` (else a `ValueError`: HTTP 400)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 7 or not 1 <= int(text) <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {text[:40]!r}")
    return int(text)


def make_server(
    store: Store, host: str = "127.0.0.1", port: int = 0, *, idle_timeout: float = IDLE_TIMEOUT
) -> ViewerServer:
    """A viewer over `store` bound to `host:port` (0: a free port); call `serve_forever()`.

    A connection idle for `idle_timeout` seconds is closed (its thread ends).
    """
    return ViewerServer(store, (host, port), idle_timeout=idle_timeout)


def cmd_ui(args: argparse.Namespace) -> int:
    """`agentrewind ui`: serve the viewer until Ctrl-C.

    The store is opened read-only, as by the CLI's views (`cli.readonly`): nothing is created
    (a missing SQLite file or PostgreSQL schema is an error), migrated or written.
    """
    store = open_store(args)
    try:
        server = make_server(store, args.host, args.port)
    except OSError as exc:
        store.close()
        raise OSError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    print(f"agentrewind ui: {api.safe_url(store.url)} (namespace {store.namespace})")
    print(f"serving on {server.url}  (read-only; Ctrl-C to stop)", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("warning: listening beyond loopback; anyone who can reach it reads the store",
              file=sys.stderr)  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0
