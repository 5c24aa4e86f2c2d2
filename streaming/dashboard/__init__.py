"""The live dashboard: a feed of SiftStream's output topics into bounded state, and the page
that ``streaming.web.WebServer`` serves from it (docs/guide/dashboard.md).

- :mod:`streaming.dashboard.state`: the pure reducers and the snapshot the page draws;
- :mod:`streaming.dashboard.feed`: the Kafka reader thread that feeds them;
- :mod:`streaming.dashboard.metrics`: the topic-derived Prometheus metrics, and the jobs'
  metrics read back for the page;
- ``static/``: the page (``index.html``, ``dashboard.js``, ``dashboard.css``) and the vendored
  chart library (``vendor/``, with its licence).

>>> from infra.connection import KafkaConnection
>>> d = Dashboard(KafkaConnection("127.0.0.1:9"), topic_prefix="t.")
>>> d.running, d.snapshot()["subscribers"]
(False, [])
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from infra.connection import KafkaConnection
from streaming.dashboard import metrics
from streaming.dashboard.feed import FEED_TOPICS, Feed
from streaming.dashboard.state import DashboardState, Limits

__all__ = ["FEED_TOPICS", "Dashboard", "DashboardState", "Limits"]


class Dashboard:
    """The dashboard's data: a feed reading the topics in the background, and what the web
    server asks of it (a snapshot, one subscriber's history, changes, health).

    Parameters
    ----------
    conn : KafkaConnection
        The cluster to read.
    topic_prefix : str
        The deployment's topic prefix.
    limits : Limits, optional
        How much state is kept (docs/guide/dashboard.md says what the defaults keep).
    job_poll_s : float
        How often the jobs' metrics are read back from the registry for the page.

    Invariants: ``version`` only grows; it changes when a record was applied or the jobs'
    metrics changed; ``snapshot`` is computed at most once per version.
    """

    def __init__(
        self, conn: KafkaConnection, topic_prefix: str = "", limits: Limits | None = None, job_poll_s: float = 2.0
    ) -> None:
        self.conn, self.topic_prefix = conn, topic_prefix
        self.state = DashboardState(limits)
        self.lock = threading.Condition()
        self.feed = Feed(conn, topic_prefix, self.state, self.lock, on_tick=self._tick)
        self.job_poll_s = job_poll_s
        self.started_at: float | None = None
        self._jobs: dict[str, dict[str, float]] = {}
        self._jobs_read_at = 0.0
        self._ticks = 0
        self._cached: tuple[int, dict[str, Any]] | None = None

    # ---- life --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """The feed is reading."""
        return self.feed.running

    def start(self) -> None:
        """Start reading the topics and report the topic-derived metrics."""
        self.started_at = time.time()
        metrics.attach(self)
        self.feed.start()

    def stop(self) -> None:
        """Stop reading; the metrics are no longer reported from this dashboard."""
        self.feed.stop()
        metrics.detach(self)
        self.wake()

    def wake(self) -> None:
        """Wake every thread waiting in :meth:`wait_for_change` (used when stopping)."""
        with self.lock:
            self.lock.notify_all()

    def health(self) -> str:
        """``ok`` once the feed has read what was there at start; else why not."""
        if self.feed.error is not None:
            return f"feed stopped: {self.feed.error}"
        if not self.running:
            return "feed not running"
        if not self.feed.caught_up:
            return f"starting: {self.feed.backlog()} records to read"
        return "ok"

    # ---- what the server asks ----------------------------------------------------------------

    @property
    def version(self) -> int:
        """Grows with every applied record and every change of the jobs' metrics."""
        return self.state.version + self._ticks

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._jobs_read_at < self.job_poll_s:
            return
        self._jobs_read_at = now
        jobs = metrics.job_metrics()
        with self.lock:
            if jobs != self._jobs:
                self._jobs = jobs
                self._ticks += 1
                self.lock.notify_all()

    def wait_for_change(self, since: int, timeout_s: float) -> int:
        """Block until ``version`` differs from ``since`` (or ``timeout_s`` passes, or the
        dashboard stops); return the version then."""
        with self.lock:
            self.lock.wait_for(lambda: self.version != since or not self.running, timeout=timeout_s)
            return self.version

    def metric_values(self) -> dict[str, Any]:
        """What the topic-derived Prometheus metrics report (``streaming.dashboard.metrics``)."""
        with self.lock:
            return {
                "dead_letters": self.state.dead_letters(),
                "alerts": dict(self.state.open_alerts()),
                "channels": self.state.channel_ratios(),
                "records": {topic.removeprefix(self.topic_prefix): n for topic, n in self._records_by_topic().items()},
            }

    def _records_by_topic(self) -> dict[str, int]:
        by_schema = self.state.records
        return {self.topic_prefix + t: by_schema.get(s, 0) for t, s in FEED_TOPICS.items() if by_schema.get(s)}

    def snapshot(self) -> dict[str, Any]:
        """The state for the page, plus the feed's progress and each job's metrics."""
        with self.lock:
            version = self.version
            if self._cached is not None and self._cached[0] == version:
                doc = self._cached[1]
            else:
                doc = self.state.snapshot()
                doc["version"] = version
                doc["jobs"] = self._jobs_view()
                self._cached = (version, doc)
            feed = {
                "caught_up": self.feed.caught_up,
                "backlog": self.feed.backlog(),
                "missing_topics": [t.removeprefix(self.topic_prefix) for t in self.feed.missing],
                "error": self.feed.error,
                "warnings": list(self.feed.warnings),
                "topic_prefix": self.topic_prefix,
                "bootstrap_servers": self.conn.bootstrap_servers,
            }
        return {**doc, "feed": feed, "now": int(time.time() * 1000)}

    def _jobs_view(self) -> list[dict[str, Any]]:
        names = [*metrics.JOB_NAMES, *sorted(set(self._jobs) - set(metrics.JOB_NAMES))]
        return [{"job": name, **self._jobs.get(name, {})} for name in names]

    def search(self, text: str, limit: int = 5000) -> list[str]:
        """Subscribers whose id, or one of whose subscriptions' ids, contains ``text``."""
        with self.lock:
            return list(itertools.islice(self.state.subscribers_matching(text), limit))

    def subscriber(self, subscriber: str) -> dict[str, Any] | None:
        """One subscriber's history, wish and alerts; None when no report named it."""
        with self.lock:
            return self.state.subscriber(subscriber)
