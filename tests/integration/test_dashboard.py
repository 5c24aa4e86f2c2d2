"""The live dashboard in a real browser: records on the test broker, the page in headless Chromium.

Real records go to a fresh topic prefix through the project's encoders (QoS reports with an
alert, subscriptions with their wishes, broker and link telemetry, the topology, a channel
assignment, a distribution plan, a placement, a detection, dead letters, matches); the dashboard
(``WebServer`` + ``Dashboard``) is started on loopback port 0 and the page is loaded in Debian's
``chromium`` driven by Debian's ``chromium-driver`` through selenium. The test checks that the DOM
shows the subscribers and the alert's explanation, writes a new QoS report and waits (bounded)
until the page shows it without a reload, scrapes ``/metrics`` for the topic-derived metrics, and
saves a screenshot under the test's tmp folder (its path is printed).

Chromium is installed here when missing (``apt-get``, quietly, once per machine); the test skips,
saying why, only where there is no ``apt-get`` at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.connection import KafkaConnection
from producers.kafka_writer import KafkaWriter
from schemas.codec import codec_for
from schemas.topics import (
    BROKER_TELEMETRY_TOPIC,
    CHANNELS_TOPIC,
    COMPOSITES_TOPIC,
    DEADLETTER_TOPIC,
    LINK_TELEMETRY_TOPIC,
    MATCHES_TOPIC,
    PLACEMENTS_TOPIC,
    QOS_TOPIC,
    ROUTES_TOPIC,
    SUBSCRIPTIONS_TOPIC,
    TOPICS,
    TOPOLOGY_TOPIC,
)
from streaming.dashboard import Dashboard
from streaming.web import WebServer

pytestmark = pytest.mark.kafka

T0 = 1_760_000_000_000
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ALERT_TEXT = "measured reliability 0.810 is below the wish 0.950: broker b2 is saturated"


# ---- the browser ---------------------------------------------------------------------------------


def ensure_chromium() -> None:
    """Install Debian's chromium and chromium-driver when missing; skip only without apt-get."""
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return
    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get on this machine: install chromium and chromium-driver to run the dashboard test")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "siftstream-chromium-install.log"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium", "chromium-driver"]
    with log.open("w") as out:
        done = subprocess.run(install, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
        if done.returncode != 0:  # a fresh machine has no package lists yet
            subprocess.run(["apt-get", "update", "-qq"], stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
            done = subprocess.run(install, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0 or not Path(CHROMEDRIVER).exists():
        pytest.fail(f"installing chromium with apt-get failed; see {log}:\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,2600",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# ---- the records ---------------------------------------------------------------------------------


def send(conn: KafkaConnection, prefix: str, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Encode each record with its topic's codec, the fields left out taking their schema defaults."""
    writer = KafkaWriter(conn)
    for topic, key, record in rows:
        codec = codec_for(TOPICS[topic].schema)
        defaults = {f["name"]: f["default"] for f in codec.schema["fields"] if "default" in f}
        writer.send(prefix + topic, key, codec.encode({**defaults, **record}))
    report = writer.flush()
    assert not report.failed, report.errors


def qos(subscriber: str, minute: int, predicted: float, measured: float, alert: dict[str, Any] | None = None) -> Any:
    record = {
        "kind": "subscriber",
        "id": subscriber,
        "window_end": T0 + 60_000 * minute,
        "model": "gg1",
        "reliability": predicted,
        "reliability_low": predicted - 0.03,
        "reliability_high": min(1.0, predicted + 0.02),
        "measured_reliability": measured,
        "mean_delay_ms": 40.0,
        "p95_delay_ms": 120.0,
        "measured_p50_delay_ms": 35.0,
        "measured_p95_delay_ms": 130.0,
        "arrival_rate_per_s": None,
        "rho": None,
        "mean_wait_ms": None,
        "alert": alert,
        "warnings": [],
    }
    return (QOS_TOPIC, f"subscriber:{subscriber}", record)


def broker_report(broker: str, rho: float) -> Any:
    record = {
        "kind": "broker",
        "id": broker,
        "window_end": T0 + 180_000,
        "arrival_rate_per_s": 40.0,
        "rho": rho,
        "mean_wait_ms": 25.0 * rho / (1 - rho),
        "warnings": [],
    }
    return (QOS_TOPIC, f"broker:{broker}", record)


def records() -> list[tuple[str, str, dict[str, Any]]]:
    alert = {
        "severity": "critical",
        "message": ALERT_TEXT,
        "contributors": [
            {"element": "b2", "utilisation": 0.97, "delay_ms": 310.0, "share": 0.8},
            {"element": "b1->b2", "utilisation": None, "delay_ms": 12.0, "share": 0.2},
        ],
    }
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for sub, subscriber, wish in (("sub-a1", "alice", 0.95), ("sub-b1", "bob", 0.9)):
        rec = {"type": "subscribe", "subscription_id": sub, "subscriber_id": subscriber, "filter": "price < 10"}
        rows.append((SUBSCRIPTIONS_TOPIC, sub, {**rec, "min_reliability": wish, "deadline_ms": 200}))
    for element in ("b1", "b2", "b3"):
        rows.append((TOPOLOGY_TOPIC, element, {"element_id": element, "kind": "broker"}))
    for src, dst in (("b1", "b2"), ("b2", "b3")):
        link = {"element_id": f"{src}->{dst}", "kind": "link", "from": src, "to": dst, "cost": 1.0}
        rows.append((TOPOLOGY_TOPIC, link["element_id"], link))
    rows += [qos("alice", m, 0.97 - 0.05 * m, 0.96 - 0.05 * m, alert if m == 3 else None) for m in range(4)]
    rows += [qos("bob", m, 0.99, 0.985) for m in range(4)]
    rows += [broker_report("b1", 0.4), broker_report("b2", 0.97)]
    for seq in range(20):
        lost = seq % 10 == 0
        sample = {"from": "b1", "to": "b2", "seq": seq, "sent_at": T0 + seq, "delay_ms": None if lost else 5.0}
        rows.append((LINK_TELEMETRY_TOPIC, "b1->b2", {**sample, "lost": lost}))
        rows.append((BROKER_TELEMETRY_TOPIC, "b2", {"broker_id": "b2", "arrived_at": T0 + seq, "service_ms": 24.0}))
    channels = [
        {
            "channel": 0,
            "subscription_ids": ["sub-a1"],
            "subscriber_ids": ["alice"],
            "deliveries": 50,
            "waste_ratio": 0.1,
        },
        {"channel": 1, "subscription_ids": ["sub-b1"], "subscriber_ids": ["bob"], "deliveries": 30, "waste_ratio": 0.2},
    ]
    assignment = {
        "version": 1,
        "stage": "planned",
        "created_at": T0,
        "k": 2,
        "reason": "initial",
        "detail": "initial placement of 2 subscriptions",
        "method": "join",
        "sample_events": 100,
        "waste_ratio": 0.14,
        "flooding_waste_ratio": 0.5,
        "channels": channels,
        "handover": [],
    }
    rows.append((CHANNELS_TOPIC, "1", assignment))
    plan = {
        "plan_id": "overlay",
        "version": 2,
        "planned_at": T0,
        "method": "enhanced",
        "feasible": True,
        "cost": 12.5,
        "transmissions": [{"from": "b1", "to": "b2", "event": "e"}],
        "generated": [],
        "previous_cost": 14.0,
        "reasons": ["link b1->b2 cost drifted"],
    }
    rows.append((ROUTES_TOPIC, "overlay", plan))
    placement = {
        "subscription_id": "comp-1",
        "decided_at": T0,
        "method": "optimal",
        "placement": {"0": "b2"},
        "cost": 3.0,
        "baseline_placement": {"0": "b1"},
        "baseline_cost": 5.0,
    }
    rows.append((PLACEMENTS_TOPIC, "comp-1", placement))
    component = {"leaf": "0", "event_id": "e1", "published_at": T0}
    detection = {"detection_id": "comp-1/e1", "subscription_id": "comp-1", "subscriber_id": "carol"}
    rows.append((COMPOSITES_TOPIC, "comp-1/e1", {**detection, "detected_at": T0, "components": [component]}))
    for offset in range(3):
        dead = {
            "dead_letter_id": f"siftstream.receipts.v1/0/{offset}",
            "source_topic": "siftstream.receipts.v1",
            "source_partition": 0,
            "source_offset": offset,
            "error_code": "invalid_value",
            "reason": "received_at must be >= 0 (got -1)",
        }
        rows.append((DEADLETTER_TOPIC, dead["dead_letter_id"], dead))
    match = {"event_id": "e1", "publisher_id": "p", "published_at": T0, "subscription_ids": ["sub-a1", "sub-b1"]}
    rows.append((MATCHES_TOPIC, "e1", match))
    return rows


# ---- the test ------------------------------------------------------------------------------------


def wait_for(what: str, check: Any, timeout_s: float = 30.0) -> float:
    """Poll ``check`` until it is true; return the seconds it took, fail after ``timeout_s``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - start


def test_dashboard_shows_live_topics_in_chromium(
    kafka_conn: KafkaConnection, topic_prefix: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    # the page redraws as snapshots arrive: read the DOM in one script call, never through
    # element handles that a redraw would leave stale
    def rows() -> dict[str, str]:
        script = (
            "return Array.from(document.querySelectorAll('#subscribers tbody tr[data-subscriber]'))"
            ".map(r => [r.dataset.subscriber, r.innerText]);"
        )
        return dict(browser.execute_script(script))

    def text(css: str) -> str:
        script = "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText;"
        found = browser.execute_script(script, css)
        assert found is not None, f"nothing on the page matches {css}"
        return str(found)

    def drawn_version() -> str | None:
        return browser.execute_script("return document.body.dataset.version ?? null;")  # type: ignore[no-any-return]

    send(kafka_conn, topic_prefix, records())
    dashboard = Dashboard(kafka_conn, topic_prefix)
    server = WebServer("127.0.0.1", 0, dashboard)
    started = time.monotonic()
    url = server.start()
    try:
        browser.get(url)  # at once: the page fills in as the feed reads
        wait_for("the page shows both subscribers", lambda: {"alice", "bob"} <= set(rows()))
        print(f"the page showed the topics' data {time.monotonic() - started:.1f} s after the dashboard started")
        wait_for("the feed reads every topic to its end", lambda: dashboard.health() == "ok")
        wait_for("the page draws everything read", lambda: drawn_version() == str(dashboard.version))
        shown = rows()
        assert ALERT_TEXT in shown["alice"] and "critical" in shown["alice"].lower()
        assert "none" in shown["bob"]
        alerts = text("#alerts")
        assert ALERT_TEXT in alerts and "b2: 80% of the miss" in alerts
        assert "received_at must be >= 0" in text("#deadletters tr[data-error-class='invalid_value']")
        assert "bob" in text("#channels tr[data-channel='1']")
        assert "cost 12.50" in text("#plan")
        assert text("#links tr[data-link='b1->b2']").split()[1] == "10.0%"
        assert browser.find_elements(By.CSS_SELECTOR, "#overlay-map g[data-node='b2']")
        wait_for(
            "the selected subscriber's chart", lambda: browser.find_elements(By.CSS_SELECTOR, "#detail-chart canvas")
        )

        # a new report, written while the page is open, shows without a reload
        before = drawn_version()
        send(kafka_conn, topic_prefix, [qos("dave", 4, 0.91, 0.5, None)])
        written = time.monotonic()
        wait_for("the page shows the new subscriber", lambda: "dave" in rows(), timeout_s=30)
        print(f"a report written with the page open showed on it {time.monotonic() - written:.1f} s later, no reload")
        assert drawn_version() != before

        # sorting: a click on a column sorts by it, largest first; a second click reverses
        browser.find_element(By.CSS_SELECTOR, "#subscribers th[data-sort='predicted']").click()
        wait_for("sorted by predicted reliability", lambda: list(rows()) == ["bob", "dave", "alice"], timeout_s=5)
        browser.find_element(By.CSS_SELECTOR, "#subscribers th[data-sort='predicted']").click()
        wait_for("sorted the other way", lambda: list(rows()) == ["alice", "dave", "bob"], timeout_s=5)

        # searching by subscription id keeps its subscriber only
        search = browser.find_element(By.ID, "search")
        search.send_keys("sub-b1")
        wait_for("search by subscription", lambda: set(rows()) == {"bob"}, timeout_s=5)
        search.clear()
        search.send_keys(" ")  # an input event with an empty query shows every row again
        wait_for("search cleared", lambda: {"alice", "bob", "dave"} <= set(rows()), timeout_s=5)

        metrics = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
        assert 'siftstream_dead_letters_total{error_class="invalid_value"} 3.0' in metrics
        assert 'siftstream_qos_alerts{severity="critical"} 1.0' in metrics
        assert 'siftstream_qos_alerts{severity="warning"} 0.0' in metrics
        assert 'siftstream_channel_waste_ratio{channel="0"} 0.1' in metrics
        assert "siftstream_channel_flooding_waste_ratio 0.5" in metrics
        assert urllib.request.urlopen(url + "healthz", timeout=10).read() == b"ok\n"

        screenshot = tmp_path / "dashboard.png"
        browser.get_screenshot_as_file(str(screenshot))
        assert screenshot.stat().st_size > 10_000
        print(f"screenshot: {screenshot}")
    finally:
        server.stop()
    assert not dashboard.running
