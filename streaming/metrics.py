"""The jobs' Prometheus metrics, updated from their streaming queries' progress.

Every metric is named ``siftstream_...`` after the Prometheus naming conventions (the unit in the
name, ``_total`` on counters, which prometheus_client appends) and carries the label ``job``
(``validation``, ``matching``, ``channels``, ``qos``, ``routes``, ``composites``):

==========================================================  ==========  ==========================
name                                                        type        what
==========================================================  ==========  ==========================
``siftstream_job_input_records_per_second``                 gauge       input rate of the last batch
``siftstream_job_processed_records_total``                  counter     records read by batches
``siftstream_job_batches_total``                            counter     micro-batches run
``siftstream_job_batch_duration_seconds``                   histogram   wall time of each batch
``siftstream_job_last_batch_duration_seconds``              gauge       wall time of the last batch
``siftstream_job_last_batch_timestamp_seconds``             gauge       when the last batch started
``siftstream_job_consumer_lag_records``                     gauge       records in the input topics
                                                                        past the committed offsets
``siftstream_job_up``                                       gauge       1 while every query of the
                                                                        job runs, else 0
``siftstream_job_restarts_total``                           counter     restarts after a failure
``siftstream_matching_matches_total``                       counter     (event, subscription) pairs
``siftstream_matching_events_total``                        counter     events matched
``siftstream_matching_matches_per_event``                   gauge       matches / events, last batch
``siftstream_gateway_records_total``                        counter     inbox records the gateway
                                                                        handled, by ``outcome``
                                                                        (``forwarded``, ``dead_letter``)
``siftstream_gateway_channel_grants_total``                 counter     channel read grants added
``siftstream_gateway_channel_revocations_total``            counter     channel read grants taken away
``siftstream_gateway_errors_total``                         counter     gateway or grant loop errors
``siftstream_gateway_up``                                   gauge       1 while both threads run
                                                                        (0 without ``--gateway``)
==========================================================  ==========  ==========================

Source of the numbers: Spark's ``StreamingQueryProgress`` of each query (``batchId``,
``numInputRows``, ``inputRowsPerSecond``, ``batchDuration``, ``timestamp``, and each source's
``endOffset``), read as the JSON documents that :func:`progress_doc` returns, and the matching
job's own per-batch counts; the ``gateway`` ones (no ``job`` label) from the counts of
``serve --gateway``'s access service (``infra.security.AccessService``). Lag is
:func:`lag_records` of a query's committed end offsets against the topics' current end offsets.
A job with several queries (validation: one per input topic) sums them. A progress document is
counted once: :class:`JobMetrics` remembers the ``timestamp`` of each (job, query)'s newest report
and skips older ones; Spark's idle reports (no ``addBatch`` in ``durationMs``) move no counter.

Example (a registry of its own, so that nothing global changes):

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> m = JobMetrics(CollectorRegistry())
>>> doc = {"batchId": 3, "timestamp": "2026-01-02T03:04:05.000Z", "numInputRows": 500,
...        "inputRowsPerSecond": 250.0, "batchDuration": 1200, "durationMs": {"addBatch": 1100},
...        "sources": [{"endOffset": '{"t": {"0": 700}}'}]}
>>> m.observe("validation", "q1", doc)
True
>>> m.observe("validation", "q1", doc)  # seen already
False
>>> m.set_lag("validation", {"q1": committed_offsets(doc)}, {"t": {0: 900}})
200
>>> b"siftstream_job_processed_records_total{job=\\"validation\\"} 500.0" in generate_latest(m.registry)
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "BATCH_DURATION_BUCKETS_S",
    "JobMetrics",
    "committed_offsets",
    "lag_records",
    "progress_doc",
    "progress_time_s",
]

BATCH_DURATION_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Histogram buckets of the batch duration, in seconds: a sub-second idle batch to a two-minute
catch-up batch."""

Offsets = dict[str, dict[int, int]]


def progress_doc(progress: Any) -> dict[str, Any]:
    """A ``StreamingQueryProgress`` (pyspark) as its JSON document; a dict passes through."""
    if isinstance(progress, Mapping):
        return dict(progress)
    return dict(json.loads(progress.json))


def progress_time_s(doc: Mapping[str, Any]) -> float:
    """The progress' ``timestamp`` (ISO 8601, UTC, ``Z``) as seconds since the epoch.

    >>> progress_time_s({"timestamp": "1970-01-01T00:01:00.500Z"})
    60.5
    """
    return datetime.fromisoformat(str(doc["timestamp"]).replace("Z", "+00:00")).timestamp()


def committed_offsets(doc: Mapping[str, Any]) -> Offsets:
    """Every source's ``endOffset`` of a progress document, merged: topic -> partition -> offset.

    >>> committed_offsets({"sources": [{"endOffset": '{"a": {"0": 5, "1": 7}}'}, {"endOffset": None}]})
    {'a': {0: 5, 1: 7}}
    """
    out: Offsets = {}
    for source in doc.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except json.JSONDecodeError:  # not a Kafka source
                continue
        if not isinstance(end, Mapping):
            continue
        for topic, parts in end.items():
            if isinstance(parts, Mapping):
                out.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return out


def lag_records(committed: Mapping[str, Mapping[int, int]], ends: Mapping[str, Mapping[int, int]]) -> int:
    """Records in the committed topics past the committed offsets: the sum over every partition of
    ``committed`` of ``max(0, end - committed)``; a partition that ``ends`` does not know counts 0,
    one that ``committed`` lacks (new partitions) counts from 0.

    >>> lag_records({"t": {0: 10, 1: 5}}, {"t": {0: 12, 1: 5, 2: 3}, "u": {0: 9}})
    5
    """
    total = 0
    for topic, parts in committed.items():
        end = ends.get(topic, {})
        for partition, high in end.items():
            total += max(0, int(high) - int(parts.get(partition, 0)))
    return total


class JobMetrics:
    """The ``siftstream_job_*`` and ``siftstream_matching_*`` metrics (module docstring).

    Parameters
    ----------
    registry : CollectorRegistry
        Where the metrics are registered (default: prometheus_client's global registry, which
        ``/metrics`` serves). One instance per registry.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        label = ["job"]
        self.input_rate = Gauge(
            "siftstream_job_input_records_per_second",
            "Input rate of the job's last micro-batch (sum over its queries), records per second.",
            label,
            registry=registry,
        )
        self.processed = Counter(
            "siftstream_job_processed_records", "Records read by the job's micro-batches.", label, registry=registry
        )
        self.batches = Counter("siftstream_job_batches", "Micro-batches the job ran.", label, registry=registry)
        self.duration = Histogram(
            "siftstream_job_batch_duration_seconds",
            "Wall time of each micro-batch (Spark's batchDuration).",
            label,
            buckets=BATCH_DURATION_BUCKETS_S,
            registry=registry,
        )
        self.last_duration = Gauge(
            "siftstream_job_last_batch_duration_seconds",
            "Wall time of the job's last micro-batch.",
            label,
            registry=registry,
        )
        self.last_batch = Gauge(
            "siftstream_job_last_batch_timestamp_seconds",
            "When the job's last micro-batch started, seconds since the epoch.",
            label,
            registry=registry,
        )
        self.lag = Gauge(
            "siftstream_job_consumer_lag_records",
            "Records in the job's input topics past the offsets its queries committed.",
            label,
            registry=registry,
        )
        self.up = Gauge("siftstream_job_up", "1 while every query of the job runs, else 0.", label, registry=registry)
        self.restarts = Counter(
            "siftstream_job_restarts", "Restarts of the job after a failed query.", label, registry=registry
        )
        self.matches = Counter(
            "siftstream_matching_matches", "(event, subscription) matches found by the matching job.", registry=registry
        )
        self.events = Counter("siftstream_matching_events", "Events matched by the matching job.", registry=registry)
        self.matches_per_event = Gauge(
            "siftstream_matching_matches_per_event",
            "Matches per event in the matching job's last micro-batch that had events.",
            registry=registry,
        )
        self.gateway_records = Counter(
            "siftstream_gateway_records", "Inbox records the gateway handled.", ["outcome"], registry=registry
        )
        self.gateway_grants = Counter(
            "siftstream_gateway_channel_grants", "Channel read grants the gateway added.", registry=registry
        )
        self.gateway_revocations = Counter(
            "siftstream_gateway_channel_revocations",
            "Channel read grants the gateway took away (a subscriber moved off the channel).",
            registry=registry,
        )
        self.gateway_errors = Counter(
            "siftstream_gateway_errors", "Errors of the gateway's or the grants' loop.", registry=registry
        )
        self.gateway_up = Gauge("siftstream_gateway_up", "1 while the gateway's threads run.", registry=registry)
        self._seen: dict[tuple[str, str], float] = {}
        self._rates: dict[str, dict[str, float]] = {}

    def register(self, job: str) -> None:
        """Make the job's series exist (at 0) before its first batch, so that a scrape lists it."""
        for metric in (self.input_rate, self.processed, self.batches, self.lag, self.up, self.restarts):
            metric.labels(job=job)
        self.duration.labels(job=job)

    def observe(self, job: str, query: str, progress: Any) -> bool:
        """Count one progress report of ``query`` (a name unique within the job); False when it was
        seen before or is an idle report (no batch ran)."""
        doc = progress_doc(progress)
        stamp = progress_time_s(doc)
        if stamp <= self._seen.get((job, query), float("-inf")):
            return False
        self._seen[(job, query)] = stamp
        if "addBatch" not in (doc.get("durationMs") or {}):
            self._rates.setdefault(job, {})[query] = 0.0
            self.input_rate.labels(job=job).set(sum(self._rates[job].values()))
            return False
        rows = int(doc.get("numInputRows") or 0)
        seconds = float(doc.get("batchDuration") or 0) / 1000.0
        self.processed.labels(job=job).inc(rows)
        self.batches.labels(job=job).inc()
        self.duration.labels(job=job).observe(seconds)
        self.last_duration.labels(job=job).set(seconds)
        self.last_batch.labels(job=job).set(stamp)
        self._rates.setdefault(job, {})[query] = float(doc.get("inputRowsPerSecond") or 0.0)
        self.input_rate.labels(job=job).set(sum(self._rates[job].values()))
        return True

    def set_lag(self, job: str, committed: Mapping[str, Offsets], ends: Mapping[str, Mapping[int, int]]) -> int:
        """Set the job's lag from each query's committed offsets (query -> offsets); return it."""
        total = sum(lag_records(offsets, ends) for offsets in committed.values())
        self.lag.labels(job=job).set(total)
        return total

    def set_up(self, job: str, up: bool) -> None:
        self.up.labels(job=job).set(1 if up else 0)

    def restarted(self, job: str) -> None:
        self.restarts.labels(job=job).inc()

    def access(self, status: Mapping[str, Any], before: Mapping[str, Any]) -> None:
        """The gateway's counts (``infra.security.AccessService.status``) grown since ``before``."""
        self.gateway_records.labels(outcome="forwarded").inc(status["forwarded"] - before.get("forwarded", 0))
        self.gateway_records.labels(outcome="dead_letter").inc(status["rejected"] - before.get("rejected", 0))
        self.gateway_grants.inc(status["granted"] - before.get("granted", 0))
        self.gateway_revocations.inc(status["revoked"] - before.get("revoked", 0))
        self.gateway_errors.inc(status["errors"] - before.get("errors", 0))
        self.gateway_up.set(1 if status["up"] else 0)

    def matched(self, events: int, matches: int) -> None:
        """One matching batch's counts."""
        self.events.inc(events)
        self.matches.inc(matches)
        if events:
            self.matches_per_event.set(matches / events)
