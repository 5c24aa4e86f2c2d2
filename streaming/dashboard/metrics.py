"""Prometheus metrics derived from the topics by the dashboard's feed, and the jobs' metrics read
back from the registry for the page.

Exposed (prometheus_client's default registry, so ``/metrics`` shows them):

``siftstream_dead_letters_total{error_class}`` (counter)
    Dead letters read from the dead-letter topic, by ``error_code``, since the beginning of its
    retained data.
``siftstream_qos_alerts{severity}`` (gauge)
    Subscribers whose latest QoS report carries an alert (``warning``: predicted, ``critical``:
    measured): the open alerts.
``siftstream_channel_waste_ratio{channel}`` (gauge)
    False positives / deliveries per channel of the latest planned channel assignment.
``siftstream_channel_assignment_waste_ratio``, ``siftstream_channel_flooding_waste_ratio`` (gauges)
    The same ratio for the whole assignment, and under flooding (one channel for all), on the
    same sample of events.
``siftstream_dashboard_records_total{topic}`` (counter)
    Records the feed has read, by topic (without the deployment's prefix).

The values are computed when scraped, from the dashboard that was attached last (one dashboard
per process reports; a stopped one is detached). When another module of the process already
registered one of these names, the dashboard's collector is not registered and says so once.

>>> TopicMetrics().describe_names()[:2]
['siftstream_dead_letters', 'siftstream_qos_alerts']
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from streaming.dashboard import Dashboard

__all__ = ["JOB_NAMES", "TopicMetrics", "attach", "detach", "job_metrics"]

JOB_NAMES = ("validation", "matching", "channels", "qos", "routes", "composites")
"""The streaming jobs whose rate, lag and batch duration the page shows (n/a when not measured)."""

_SEVERITIES = ("warning", "critical")


class TopicMetrics(Collector):
    """The dashboard's topic-derived metrics, read from the attached dashboard when scraped."""

    def __init__(self) -> None:
        self.source: Dashboard | None = None

    def describe_names(self) -> list[str]:
        """The metric family names this collector exposes (without ``_total``)."""
        return [
            "siftstream_dead_letters",
            "siftstream_qos_alerts",
            "siftstream_channel_waste_ratio",
            "siftstream_channel_assignment_waste_ratio",
            "siftstream_channel_flooding_waste_ratio",
            "siftstream_dashboard_records",
        ]

    def describe(self) -> Iterator[Metric]:
        """Families without samples: lets the registry check names without reading state."""
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        source = self.source
        return self._families(source.metric_values() if source is not None else {})

    def _families(self, values: dict[str, Any]) -> Iterator[Metric]:
        dead = CounterMetricFamily(
            "siftstream_dead_letters",
            "Dead letters read from the dead-letter topic, by error class",
            labels=["error_class"],
        )
        for code, n in sorted(values.get("dead_letters", {}).items()):
            dead.add_metric([code], n)
        yield dead
        alerts = GaugeMetricFamily(
            "siftstream_qos_alerts",
            "Subscribers whose latest QoS report carries an alert, by severity",
            labels=["severity"],
        )
        if values:
            open_alerts = values.get("alerts", {})
            for severity in sorted({*_SEVERITIES, *open_alerts}):
                alerts.add_metric([severity], open_alerts.get(severity, 0))
        yield alerts
        ratios = values.get("channels", {"channels": {}, "assignment": None, "flooding": None})
        per_channel = GaugeMetricFamily(
            "siftstream_channel_waste_ratio",
            "False positives / deliveries per channel of the latest planned channel assignment",
            labels=["channel"],
        )
        for channel, ratio in sorted(ratios["channels"].items(), key=lambda kv: int(kv[0])):
            if ratio is not None:
                per_channel.add_metric([channel], ratio)
        yield per_channel
        for name, key, text in (
            ("siftstream_channel_assignment_waste_ratio", "assignment", "of the latest planned channel assignment"),
            ("siftstream_channel_flooding_waste_ratio", "flooding", "under flooding, on the same sample of events"),
        ):
            family = GaugeMetricFamily(name, f"False positives / deliveries {text}")
            if ratios.get(key) is not None:
                family.add_metric([], ratios[key])
            yield family
        records = CounterMetricFamily(
            "siftstream_dashboard_records", "Records the dashboard's feed has read, by topic", labels=["topic"]
        )
        for topic, n in sorted(values.get("records", {}).items()):
            records.add_metric([topic], n)
        yield records


_COLLECTOR = TopicMetrics()
_REGISTERED: bool | None = None
_LOCK = threading.Lock()


def attach(dashboard: Dashboard) -> None:
    """Report ``dashboard``'s values from now on (registering the collector the first time)."""
    global _REGISTERED
    with _LOCK:
        if _REGISTERED is None:
            try:
                REGISTRY.register(_COLLECTOR)
                _REGISTERED = True
            except ValueError as exc:  # a name taken by another module of this process
                _REGISTERED = False
                print(f"siftstream dashboard: topic-derived metrics not registered: {exc}", file=sys.stderr)
        _COLLECTOR.source = dashboard


def detach(dashboard: Dashboard) -> None:
    """Stop reporting ``dashboard``'s values, if it is the one reported."""
    with _LOCK:
        if _COLLECTOR.source is dashboard:
            _COLLECTOR.source = None


# ---- the jobs' metrics, read back --------------------------------------------------------------

_JOB_SERIES: dict[str, str] = {
    "siftstream_job_input_records_per_second": "input_rate",
    "siftstream_job_processed_records": "processed",
    "siftstream_job_consumer_lag_records": "lag",
    "siftstream_job_last_batch_duration_seconds": "batch_duration_s",
    "siftstream_job_batch_duration_seconds": "mean_batch_duration_s",
    "siftstream_job_last_batch_timestamp_seconds": "last_batch_at_s",
    "siftstream_job_up": "up",
}
"""The jobs' series (streaming/metrics.py's names, family names without ``_total``) -> the
page's field; a histogram gives its mean, sum / count."""


def job_metrics(registry: Any = REGISTRY) -> dict[str, dict[str, float]]:
    """Each job's input rate, records processed, lag and batch duration, from the
    ``siftstream_job_*`` series with a ``job`` label that the process registered
    (streaming/metrics.py's, when the jobs run in it). A job with none of them is absent;
    several series of one job (one per query) are summed.

    >>> from prometheus_client import CollectorRegistry, Gauge
    >>> r = CollectorRegistry()
    >>> Gauge("siftstream_job_input_records_per_second", "x", ["job"], registry=r).labels("qos").set(12.5)
    >>> job_metrics(r)
    {'qos': {'input_rate': 12.5}}
    """
    found: dict[str, dict[str, float]] = {}
    sums: dict[tuple[str, str], list[float]] = {}
    for family in registry.collect():
        kind = _JOB_SERIES.get(family.name)
        if kind is None:
            continue
        for sample in family.samples:
            job = sample.labels.get("job")
            if job is None:
                continue
            if family.type in ("histogram", "summary"):
                if sample.name.endswith(("_sum", "_count")):
                    part = sums.setdefault((job, kind), [0.0, 0.0])
                    part[0 if sample.name.endswith("_sum") else 1] += sample.value
                continue
            if family.type == "counter" and not sample.name.endswith("_total"):
                continue
            entry = found.setdefault(job, {})
            entry[kind] = entry.get(kind, 0.0) + float(sample.value)
    for (job, kind), (total, count) in sums.items():
        if count > 0:
            found.setdefault(job, {})[kind] = total / count
    return found
