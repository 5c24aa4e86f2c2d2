"""SiftStream's HTTP server: the live dashboard, its JSON and event-stream endpoints, the
Prometheus metrics and a health check, on one port.

The server is the standard library's ``ThreadingHTTPServer`` (one thread per connection, so a
page's open event stream never blocks a scrape of ``/metrics``); it needs no extra process and no
framework. ``siftstream dashboard`` and ``siftstream serve`` both run it.

Routes
------
``/``
    The dashboard page (``streaming/dashboard/static/index.html``) when a dashboard is given,
    else a short page that links the other routes.
``/static/<file>``
    The page's scripts, styles and the vendored chart library, from
    ``streaming/dashboard/static`` only (no path outside it is ever served).
``/api/state``
    The dashboard's snapshot as JSON (``Dashboard.snapshot``).
``/api/subscriber?id=S``
    One subscriber's history: predicted and measured reliability with the 90% band, its wish
    and its alerts (``Dashboard.subscriber``); 404 when unknown.
``/api/search?q=TEXT``
    The subscribers whose id, or one of whose subscriptions' ids, contains the text
    (``Dashboard.search``).
``/api/events``
    Server-sent events: an ``event: state`` message with the snapshot each time the feed has
    changed it (at most one per ``push_interval_s``), a comment line as a keep-alive otherwise.
``/metrics``
    prometheus_client's text exposition of its default registry: the jobs' metrics that are
    registered in this process and the dashboard's topic-derived ones.
``/healthz``
    ``ok`` (200) while the server runs; with a dashboard, ``starting`` (503) until its feed has
    read every topic to the end it found at start, and the feed's error (503) if it stopped.

Invariants: ``start`` returns the URL once the socket listens (port 0 binds a free port);
``stop`` ends open event streams, closes the socket, stops the dashboard's feed that ``start``
started, and may be called twice.

>>> server = WebServer("127.0.0.1", 0)
>>> url = server.start()
>>> import urllib.request
>>> urllib.request.urlopen(url + "healthz").read()
b'ok\\n'
>>> server.stop()
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.dashboard import Dashboard

__all__ = ["STATIC_DIR", "WebServer"]

STATIC_DIR = Path(__file__).resolve().parent / "dashboard" / "static"
"""The page's files: ``index.html``, ``dashboard.js``, ``dashboard.css`` and ``vendor/``."""

_INDEX_WITHOUT_DASHBOARD = b"""<!doctype html><html><head><meta charset="utf-8"><title>SiftStream</title></head>
<body><h1>SiftStream</h1><p><a href="/metrics">/metrics</a> &middot; <a href="/healthz">/healthz</a></p></body></html>
"""


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a browser's open event stream never keeps the process alive
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: WebServer) -> None:
        super().__init__(address, _Handler)
        self.owner = owner


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request on stderr is noise for an operator's terminal

    # ---- plumbing ----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc: Any, status: int = HTTPStatus.OK) -> None:
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=str).encode()
        self._send(status, body, "application/json")

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        owner = self.server.owner
        dashboard = owner.dashboard
        try:
            if url.path == "/healthz":
                self._healthz(dashboard)
            elif url.path == "/metrics":
                self._metrics()
            elif url.path in ("/", "/index.html"):
                if dashboard is None:
                    self._send(HTTPStatus.OK, _INDEX_WITHOUT_DASHBOARD, "text/html; charset=utf-8")
                else:
                    self._static("index.html")
            elif url.path.startswith("/static/"):
                self._static(url.path.removeprefix("/static/"))
            elif dashboard is None:
                self._text(HTTPStatus.NOT_FOUND, f"no route {url.path}\n")
            elif url.path == "/api/state":
                self._json(dashboard.snapshot())
            elif url.path == "/api/subscriber":
                detail = dashboard.subscriber(query.get("id", [""])[0])
                if detail is None:
                    self._json({"error": "unknown subscriber"}, HTTPStatus.NOT_FOUND)
                else:
                    self._json(detail)
            elif url.path == "/api/search":
                self._json({"subscribers": dashboard.search(query.get("q", [""])[0])})
            elif url.path == "/api/events":
                self._events(dashboard)
            else:
                self._text(HTTPStatus.NOT_FOUND, f"no route {url.path}\n")
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away
        except Exception as exc:  # a bug must not look like a hung page: say what failed
            with contextlib.suppress(OSError):
                self._text(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}\n")

    # ---- routes ------------------------------------------------------------------------------

    def _healthz(self, dashboard: Dashboard | None) -> None:
        if dashboard is None:
            self._text(HTTPStatus.OK, "ok\n")
            return
        health = dashboard.health()
        self._text(HTTPStatus.OK if health == "ok" else HTTPStatus.SERVICE_UNAVAILABLE, health + "\n")

    def _metrics(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        self._send(HTTPStatus.OK, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)

    def _static(self, name: str) -> None:
        root = STATIC_DIR
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            self._text(HTTPStatus.NOT_FOUND, f"no file {name}\n")
            return
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        self._send(HTTPStatus.OK, path.read_bytes(), content_type, cache=path.parent.name == "vendor")

    def _events(self, dashboard: Dashboard) -> None:
        owner = self.server.owner
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        seen = -1
        while not owner.stopping.is_set():
            version = dashboard.wait_for_change(seen, timeout_s=owner.keepalive_s)
            if owner.stopping.is_set():
                break
            if version == seen:
                self.wfile.write(b": keep-alive\n\n")
            else:
                seen = version
                data = json.dumps(dashboard.snapshot(), separators=(",", ":"), allow_nan=False, default=str)
                self.wfile.write(f"id: {version}\nevent: state\ndata: {data}\n\n".encode())
            self.wfile.flush()
            owner.stopping.wait(owner.push_interval_s)


class WebServer:
    """The HTTP server of the dashboard and the metrics, serving in background threads.

    Parameters
    ----------
    host : str
        Address to bind (``127.0.0.1`` keeps it on this machine).
    port : int
        Port to bind; 0 picks a free one (``url`` says which).
    dashboard : Dashboard, optional
        The live dashboard to serve at ``/`` and ``/api/*``; ``start`` starts its feed when it is
        not running yet and ``stop`` stops it. Without one, ``/metrics`` and ``/healthz`` only.
    push_interval_s : float
        Least time between two snapshots on one event stream.
    keepalive_s : float
        Longest quiet time on an event stream before a keep-alive comment.

    Examples
    --------
    >>> server = WebServer("127.0.0.1", 0)
    >>> server.start().startswith("http://127.0.0.1:")
    True
    >>> server.stop()
    """

    def __init__(
        self,
        host: str,
        port: int,
        dashboard: Dashboard | None = None,
        push_interval_s: float = 1.0,
        keepalive_s: float = 15.0,
    ) -> None:
        self.host, self.port, self.dashboard = host, port, dashboard
        self.push_interval_s, self.keepalive_s = push_interval_s, keepalive_s
        self.stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._started_dashboard = False

    @property
    def url(self) -> str:
        """``http://host:port/`` of the running server (the bound port when 0 was asked)."""
        if self._server is None:
            raise RuntimeError("the web server is not running")
        host, port = self._server.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"http://{shown}:{port}/"

    def start(self) -> str:
        """Bind, serve in a background thread, start the dashboard's feed; return the URL."""
        if self._server is not None:
            return self.url
        if self.dashboard is not None and not self.dashboard.running:
            self.dashboard.start()
            self._started_dashboard = True
        self.stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self._thread = threading.Thread(target=self._server.serve_forever, name="siftstream-web", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """End open event streams, stop serving, close the socket, stop the feed ``start`` started."""
        self.stopping.set()
        if self.dashboard is not None:
            self.dashboard.wake()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None
        if self._started_dashboard and self.dashboard is not None:
            self.dashboard.stop()
            self._started_dashboard = False
