"""The HTTP server (streaming/web.py) on loopback, with a stand-in dashboard: every route, the
event stream's first message, static files confined to their folder, and a clean stop."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from streaming.web import WebServer


class FakeDashboard:
    """What WebServer asks of a dashboard, with a version that the test moves."""

    def __init__(self) -> None:
        self.running = False
        self.version = 1
        self.cond = threading.Condition()

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def health(self) -> str:
        return "ok" if self.version > 1 else "starting: 5 records to read"

    def snapshot(self) -> dict[str, Any]:
        return {"version": self.version, "subscribers": [{"id": "s1"}]}

    def search(self, text: str) -> list[str]:
        return ["s1"] if text in "s1" else []

    def subscriber(self, sid: str) -> dict[str, Any] | None:
        return {"id": sid, "history": []} if sid == "s1" else None

    def wait_for_change(self, since: int, timeout_s: float) -> int:
        with self.cond:
            self.cond.wait_for(lambda: self.version != since or not self.running, timeout=timeout_s)
            return self.version


@pytest.fixture
def served() -> Iterator[tuple[str, FakeDashboard]]:
    dashboard = FakeDashboard()
    server = WebServer("127.0.0.1", 0, dashboard, push_interval_s=0.05, keepalive_s=0.2)  # type: ignore[arg-type]
    url = server.start()
    assert dashboard.running  # start started the feed
    try:
        yield url, dashboard
    finally:
        server.stop()
        assert not dashboard.running  # stop stopped what start started


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_routes(served: tuple[str, FakeDashboard]) -> None:
    url, dashboard = served
    status, kind, body = get(url)
    assert status == 200 and kind.startswith("text/html") and b"/static/dashboard.js" in body
    assert get(url + "static/vendor/uPlot.iife.min.js")[0] == 200
    assert json.loads(get(url + "api/state")[2])["subscribers"] == [{"id": "s1"}]
    assert json.loads(get(url + "api/subscriber?id=s1")[2])["id"] == "s1"
    assert get(url + "api/subscriber?id=nobody")[0] == 404
    assert json.loads(get(url + "api/search?q=1")[2]) == {"subscribers": ["s1"]}
    assert json.loads(get(url + "api/search?q=x")[2]) == {"subscribers": []}
    assert get(url + "healthz")[:1] == (503,)
    dashboard.version = 2
    assert get(url + "healthz")[0::2] == (200, b"ok\n")
    status, kind, body = get(url + "metrics")
    assert status == 200 and kind.startswith("text/plain") and b"# HELP" in body
    assert get(url + "nothing-here")[0] == 404


def test_static_files_never_leave_their_folder(served: tuple[str, FakeDashboard]) -> None:
    url, _ = served
    for path in ("static/../web.py", "static/..%2F..%2Fweb.py", "static/%2e%2e/__init__.py", "static/vendor"):
        assert get(url + path)[0] == 404, path


def test_event_stream_sends_the_snapshot_and_each_change(served: tuple[str, FakeDashboard]) -> None:
    url, dashboard = served
    with urllib.request.urlopen(url + "api/events", timeout=10) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"

        def message() -> dict[str, Any]:
            lines = []
            while True:
                line = stream.readline().decode().rstrip("\n")
                if line.startswith(":"):  # a keep-alive
                    continue
                if not line and lines:
                    fields = dict(x.split(": ", 1) for x in lines)
                    assert fields["event"] == "state"
                    return json.loads(fields["data"])  # type: ignore[no-any-return]
                if line:
                    lines.append(line)

        assert message()["version"] == 1
        with dashboard.cond:
            dashboard.version = 3
            dashboard.cond.notify_all()
        assert message()["version"] == 3


def test_without_a_dashboard_only_metrics_and_health() -> None:
    server = WebServer("127.0.0.1", 0)
    url = server.start()
    try:
        assert get(url + "healthz")[0::2] == (200, b"ok\n")
        assert b"/metrics" in get(url)[2]
        assert get(url + "api/state")[0] == 404
    finally:
        server.stop()
        server.stop()  # twice is fine
