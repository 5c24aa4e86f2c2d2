"""Soak and back-pressure benchmark: ``siftstream serve`` under a steady load with an overload
burst, on a 3-broker cluster, for half an hour (docs/guide/faults.md, "The soak").

What it runs:

1. **The cluster.** A 3-node KRaft cluster (``infra.kafka.cluster_up``) on loopback ports
   ``--port`` .. ``--port + 2`` (controllers at ``--port + 10`` ..), its data under the run's
   own folder: every topic with replication factor 3 and ``min.insync.replicas`` 2, every
   producer idempotent with ``acks=all``. ``--bootstrap-servers`` uses a running cluster instead
   (its brokers' memory is then not measured).
2. **The subscriptions.** ``--subscriptions`` subscriptions of the Gryphon preset (Opyrchal et
   al. 2000; ``bench/matching_e2e.py``'s workload, decay ``--decay``) on the run's topics (a
   fresh topic prefix).
3. **serve.** ``python -m streaming.cli serve`` as a child process on that cluster: the jobs of
   ``--jobs`` (default every job serve runs), ``--trigger-interval``, and
   ``--max-offsets-per-trigger`` (default twice one trigger's volume at ``--rate``, so a steady
   load fits one batch and a backlog is worked off in bounded batches), any ``--serve-option``
   (e.g. one job's own trigger or cap), ``/metrics`` on ``--http-port``, no dashboard. Once
   every job has committed a batch and caught up with the subscriptions, ``--warmup-s`` seconds'
   worth of events at ``--rate`` (ids ``w<sequence>``, :func:`warm_up`) are published at once and
   the bench waits until every job has caught up with them too, so that the event path's first
   batches (the Python workers' start, the first QoS window) fall before the load; the reader
   counts no ``w`` event. Then the load starts.
4. **The load.** A publisher process sends Gryphon events at ``--rate`` events/s for
   ``--minutes``, ``--burst-factor`` times that for ``--burst-minutes`` from ``--burst-at``
   (default minute 10, or a third of a shorter run), each with ``event_id`` ``s<sequence>`` and
   ``published_at`` = the wall clock at send (:func:`offered_rate`, :func:`planned_events`).
5. **Every ``--interval-s``** one row (:func:`make_row`): the offered and the achieved rate; each
   job's consumer lag in records (serve's ``siftstream_job_consumer_lag_records``, sampled every
   ``--lag-poll-s``; the row has the last sample and the interval's largest); p50 and p99 of the
   latency from ``published_at`` to the Kafka timestamp of the event's ``Match`` record and of the
   channel record that delivers it (``ChannelEvents``), over the records read in that interval;
   the resident memory (``VmRSS`` of ``/proc/<pid>/status``) of serve's Python driver, its JVM,
   its Python workers summed, each broker, the publisher and this process (the reader).
6. **Drain.** After the load, rows go on until every job's lag is within one trigger's volume at
   ``--rate`` and every event has its ``Match`` record, or ``--drain-s``.

The verdict (:func:`verdict`): each process's memory slope in MB per minute over the second half
of the loaded rows (least squares, :func:`slope`), *flat* when its magnitude is below
``--flat-mb-per-min``; each job's largest lag and the time from the end of the burst until its lag
is back at its pre-burst level (:func:`recovery_s`: the largest lag sampled in the
``--baseline-minutes`` before the burst, at least one trigger's worth of records at ``--rate``),
*recovered* when that takes at most ``--recover-within-min``; and the records lost: every event
the publisher had acknowledged (ids ``s0`` .. ``s<n-1>``) against the ``Match`` records read, by
count over all of them, not a sample (a bitmap per sequence number), with the duplicates.

Run: ``.venv/bin/python bench/soak.py`` (30 minutes at 10,000 events/s, a 3x burst for 2 minutes
at minute 10), ``--minutes 4 --burst-minutes 1`` for a short run, ``--quick`` for a smoke run
(2 minutes, 2,000 events/s, rows every 20 s). ``--out FILE`` writes the rows and the verdict as
JSON. Readings: docs/results/soak.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from infra.connection import arrived

ROOT = Path(__file__).resolve().parent.parent
LAG_METRIC = "siftstream_job_consumer_lag_records"
UP_METRIC = "siftstream_job_up"
RESTARTS_METRIC = "siftstream_job_restarts_total"
_HEAD = 10  # single-object header: marker (2 bytes) + fingerprint (8)


# ---- the pure parts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """The offered load: ``rate`` events/s for ``seconds``, ``factor`` times that from
    ``burst_start_s`` to ``burst_end_s`` (seconds since the load started).

    >>> s = Schedule(rate=100, seconds=60, burst_start_s=20, burst_end_s=30, factor=3)
    >>> [offered_rate(s, t) for t in (0, 25, 30, 60)]
    [100.0, 300.0, 100.0, 0.0]
    >>> planned_events(s, 60)
    8000
    """

    rate: float
    seconds: float
    burst_start_s: float
    burst_end_s: float
    factor: float = 3.0


def offered_rate(s: Schedule, t: float) -> float:
    """Events per second offered at ``t`` seconds after the start (0 outside the run)."""
    if t < 0 or t >= s.seconds:
        return 0.0
    return float(s.rate * (s.factor if s.burst_start_s <= t < s.burst_end_s else 1.0))


def planned_events(s: Schedule, t: float) -> int:
    """Events due by ``t`` seconds after the start: the integral of :func:`offered_rate`.

    >>> planned_events(Schedule(10, 100, 10, 20, 2), 15)
    200
    """
    t = min(max(t, 0.0), s.seconds)
    burst = max(0.0, min(t, s.burst_end_s) - s.burst_start_s)
    return int(s.rate * t + (s.factor - 1.0) * s.rate * burst)


def burst_window(minutes: float, burst_minutes: float, burst_at: float | None) -> tuple[float, float]:
    """The burst's (start, end) in seconds: from minute ``burst_at``, default minute 10 or a third
    of a shorter run; ``burst_minutes`` long, cut at the run's end.

    >>> burst_window(30, 2, None)
    (600.0, 720.0)
    >>> burst_window(4, 1, None)
    (80.0, 140.0)
    """
    start = min(10.0, minutes / 3.0) if burst_at is None else burst_at
    return round(60.0 * start, 3), round(60.0 * min(minutes, start + burst_minutes), 3)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metric(text: str, name: str, label: str = "job") -> dict[str, float]:
    """The samples of metric ``name`` in a Prometheus text exposition, by the value of ``label``.

    >>> doc = '# TYPE siftstream_job_consumer_lag_records gauge\\n'
    >>> doc += 'siftstream_job_consumer_lag_records{job="matching"} 1200.0\\n'
    >>> doc += 'siftstream_job_consumer_lag_records{job="qos"} 0.0\\n'
    >>> parse_metric(doc, "siftstream_job_consumer_lag_records")
    {'matching': 1200.0, 'qos': 0.0}
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or m.group(1) != name:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            out[labels.get(label, "")] = float(m.group(4))
        except ValueError:
            continue
    return out


def percentile(values: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile, None for no values.

    >>> percentile(np.arange(101.0), 99)
    99.0
    >>> percentile(np.array([]), 50) is None
    True
    """
    return float(np.percentile(values, q)) if len(values) else None


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 for fewer than two distinct ``xs``).

    >>> slope([0, 1, 2, 3], [10, 12, 14, 16])
    2.0
    """
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0
    dx = x - x.mean()
    return round(float((dx * (y - y.mean())).sum() / (dx * dx).sum()), 9) + 0.0  # + 0.0: no -0.0


def recovery_s(
    samples: Sequence[tuple[float, float]], burst_start_s: float, burst_end_s: float, threshold: float
) -> float | None:
    """Seconds from ``burst_end_s`` until the job's lag is back at ``threshold``: the first sample
    ``(t, lag)`` with ``lag <= threshold`` at or after both the burst's end and the job's largest
    lag since ``burst_start_s`` (a job downstream of another peaks later); None when none is.

    >>> recovery_s([(100, 900), (110, 5000), (125, 800), (130, 100)], 90, 110, 1000)
    15.0
    >>> recovery_s([(100, 900), (115, 200), (125, 8000), (140, 100)], 90, 110, 1000)
    30.0
    >>> recovery_s([(100, 900), (110, 5000)], 90, 110, 1000) is None
    True
    """
    after = [(t, lag) for t, lag in samples if t >= burst_start_s]
    if not after:
        return None
    peak_t = max(after, key=lambda s: (s[1], -s[0]))[0]
    for t, lag in after:
        if t >= max(burst_end_s, peak_t) and lag <= threshold:
            return float(t - burst_end_s)
    return None


def baseline_lag(samples: Sequence[tuple[float, float]], start_s: float, end_s: float, floor: float) -> float:
    """The largest lag sampled in ``[start_s, end_s)``, at least ``floor``: the level a job is back
    at once it recovered.

    >>> baseline_lag([(0, 50), (10, 700), (20, 300), (30, 9000)], 5, 30, 100)
    700.0
    """
    inside = [lag for t, lag in samples if start_s <= t < end_s]
    return float(max([floor, *inside]))


def make_row(
    t_s: float,
    interval_s: float,
    offered: float,
    sent: int,
    lags: Mapping[str, Sequence[float]],
    match_ms: np.ndarray,
    channel_ms: np.ndarray,
    rss_mb: Mapping[str, float],
    phase: str,
) -> dict[str, Any]:
    """One interval's row: ``sent`` events were published in the ``interval_s`` seconds ending at
    ``t_s``; ``lags`` are each job's lag samples in it (the row keeps the last and the largest);
    ``match_ms`` and ``channel_ms`` the latencies read in it.

    >>> row = make_row(60, 60, 100.0, 5940, {"matching": [10, 400, 20]}, np.array([5.0, 7.0]),
    ...                np.array([]), {"serve JVM": 812.5}, "load")
    >>> (row["minute"], row["achieved_rate"], row["lag"], row["lag_max"], row["match_p50_ms"])
    (1.0, 99.0, {'matching': 20}, {'matching': 400}, 6.0)
    >>> row["channel_p99_ms"] is None
    True
    """
    return {
        "minute": round(t_s / 60.0, 2),
        "phase": phase,
        "offered_rate": offered,
        "achieved_rate": sent / interval_s if interval_s > 0 else 0.0,
        "lag": {job: int(v[-1]) for job, v in lags.items() if len(v)},
        "lag_max": {job: int(max(v)) for job, v in lags.items() if len(v)},
        "matches_read": len(match_ms),
        "match_p50_ms": percentile(match_ms, 50),
        "match_p99_ms": percentile(match_ms, 99),
        "channel_events_read": len(channel_ms),
        "channel_p50_ms": percentile(channel_ms, 50),
        "channel_p99_ms": percentile(channel_ms, 99),
        "rss_mb": dict(rss_mb),
    }


def memory_slopes(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each process's RSS slope, MB per minute, over the second half of ``rows`` (least squares).

    >>> rows = [{"minute": m, "rss_mb": {"a": 100 + 2 * m, "b": 50}} for m in range(1, 9)]
    >>> memory_slopes(rows)
    {'a': 2.0, 'b': 0.0}
    """
    half = list(rows[len(rows) // 2 :])
    names = sorted({n for r in half for n in r["rss_mb"]})
    out = {}
    for name in names:
        pts = [(r["minute"], r["rss_mb"][name]) for r in half if name in r["rss_mb"]]
        out[name] = round(slope([p[0] for p in pts], [p[1] for p in pts]), 3) + 0.0
    return out


def verdict(
    rows: Sequence[Mapping[str, Any]],
    lag_samples: Mapping[str, Sequence[tuple[float, float]]],
    schedule: Schedule,
    floor: float,
    baseline_s: float,
    recover_within_s: float,
    flat_mb_per_min: float,
    published: int,
    seen: int,
    duplicates: int,
) -> dict[str, Any]:
    """The run's verdict (module docstring): memory slopes over the loaded rows' second half and
    whether each is flat, each job's largest lag, pre-burst level and recovery time after the
    burst, and the events without a ``Match`` record (``missing``): ``lost`` when the matching
    job's last lag sample is 0, else None (the drain ended with it still behind).

    >>> s = Schedule(rate=10, seconds=300, burst_start_s=100, burst_end_s=160)
    >>> rows = [{"minute": m, "phase": "load", "rss_mb": {"x": 100.0}} for m in range(1, 6)]
    >>> lags = {"matching": [(50, 40), (90, 60), (130, 900), (170, 400), (180, 30)]}
    >>> v = verdict(rows, lags, s, 50, 60, 120, 1.0, 3000, 3000, 0)
    >>> (v["memory"]["x"]["flat"], v["lag"]["matching"]["recovery_s"], v["lost"], v["ok"])
    (True, 20.0, 0, True)
    """
    loaded = [r for r in rows if r.get("phase") == "load"]
    slopes = memory_slopes(loaded)
    memory = {  # a leak grows; a process that gives memory back (a JVM after a GC) is not one
        name: {"mb_per_min": s, "flat": abs(s) < flat_mb_per_min, "growing": s >= flat_mb_per_min}
        for name, s in slopes.items()
    }
    lag: dict[str, Any] = {}
    burst = schedule.burst_end_s > schedule.burst_start_s
    for job, samples in lag_samples.items():
        base = baseline_lag(samples, schedule.burst_start_s - baseline_s, schedule.burst_start_s, floor)
        rec = recovery_s(samples, schedule.burst_start_s, schedule.burst_end_s, base) if burst else None
        lag[job] = {
            "max": int(max((v for _, v in samples), default=0)),
            "pre_burst": int(base),
            "recovery_s": rec,
            "recovered": (rec is not None and rec <= recover_within_s) if burst else None,
        }
    missing = max(0, published - seen)
    behind = int(lag_samples["matching"][-1][1]) if lag_samples.get("matching") else 0
    lost = missing if missing == 0 or behind == 0 else None  # still behind: not matched yet, not known lost
    ok = (
        not any(m["growing"] for m in memory.values())
        and all(j["recovered"] is not False for j in lag.values())
        and missing == 0
    )
    return {
        "memory": memory,
        "flat_mb_per_min": flat_mb_per_min,
        "lag": lag,
        "recover_within_s": recover_within_s,
        "published": published,
        "with_match": seen,
        "missing": missing,
        "matching_lag_at_end": behind,
        "lost": lost,
        "duplicates": duplicates,
        "ok": ok,
    }


# ---- processes and their memory (/proc) ---------------------------------------------------------


def parent_map(proc: Path = Path("/proc")) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process, from ``/proc/<pid>/stat``."""
    out = {}
    for d in proc.glob("[0-9]*"):
        try:
            text = (d / "stat").read_text()
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        comm = head.partition("(")[2]
        fields = rest.split()
        if len(fields) > 1:
            out[int(d.name)] = (int(fields[1]), comm)
    return out


def descendants(parents: Mapping[int, tuple[int, str]], root: int) -> list[int]:
    """Every process below ``root`` in ``parents`` (pid -> (ppid, name)), breadth first.

    >>> descendants({2: (1, "java"), 3: (2, "python3"), 4: (3, "python3"), 9: (8, "x")}, 1)
    [2, 3, 4]
    """
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            out.append(child)
            todo.append(child)
    return out


def rss_mb(pid: int, proc: Path = Path("/proc")) -> float | None:
    """Resident memory of ``pid`` in MB (``VmRSS``), None when it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def serve_memory(parents: Mapping[int, tuple[int, str]], serve_pid: int, rss: Any = rss_mb) -> dict[str, float]:
    """serve's memory by part: its own Python process (the driver), its JVM(s) and its Python
    workers (every other process below it), in MB.

    >>> tree = {10: (1, "python"), 11: (10, "java"), 12: (11, "python3"), 13: (12, "python3")}
    >>> serve_memory(tree, 10, rss=lambda pid: float(pid))
    {'serve driver': 10.0, 'serve JVM': 11.0, 'serve workers': 25.0}
    """
    out = {"serve driver": rss(serve_pid) or 0.0, "serve JVM": 0.0, "serve workers": 0.0}
    for pid in descendants(parents, serve_pid):
        part = "serve JVM" if parents[pid][1] == "java" else "serve workers"
        out[part] += rss(pid) or 0.0
    return {k: round(v, 1) for k, v in out.items()}


# ---- the load ---------------------------------------------------------------------------------


def _stamped(cols: Any, letter: str, seq: int) -> Any:
    """``cols`` (event columns) with ids ``<letter><seq>`` .. in order and ``published_at`` = now."""
    from producers.columns import Text

    n = len(cols)
    return dataclasses.replace(
        cols,
        event_id=Text((letter, np.arange(seq, seq + n, dtype=np.int64))),
        published_at=np.full(n, int(time.time() * 1000), np.int64),
    )


def publisher(
    bootstrap: str, topic: str, params: dict[str, Any], schedule: Schedule, sent: Any, stop: Any, result: Any
) -> None:
    """Publish ``schedule`` (module docstring, step 4): a pool of pre-drawn Gryphon event columns is
    cycled, each chunk sent with fresh ids ``s<sequence>`` and ``published_at`` = now; ``sent``
    (a shared counter) follows the sequence; the final counts go to ``result`` (a queue)."""
    from infra.connection import KafkaConnection
    from producers.kafka_writer import KafkaWriter
    from producers.workloads import GryphonWorkload

    w = GryphonWorkload(**params)
    writer = KafkaWriter(KafkaConnection(bootstrap), **{"linger.ms": 5})
    chunk = max(1, int(schedule.rate / 20))
    pool = [w.columns(chunk) for _ in range(64)]  # 64 distinct chunks cycled: memory stays flat
    pool[0].avro()  # compiles the encoder
    start = time.monotonic()  # the pacing clock; a step of the wall clock makes no burst
    seq = 0
    i = 0
    while not stop.is_set():
        t = time.monotonic() - start
        if t >= schedule.seconds:
            break
        due = planned_events(schedule, t + 0.05)
        if seq >= due:
            time.sleep(0.01)
            continue
        cols = _stamped(pool[i % len(pool)], "s", seq)  # whole chunks: at most one chunk ahead of the schedule
        i += 1
        n = len(cols)
        writer.send_many(topic, cols.keys(), cols.avro())
        seq += n
        sent.value = seq
    report = writer.flush(120)
    result.put({"sent": seq, "failed": report.failed, "errors": report.errors, "seconds": time.monotonic() - start})


def warm_up(bootstrap: str, topic: str, params: dict[str, Any], n: int, chunk: int) -> tuple[int, int]:
    """Send ``n`` Gryphon events with ids ``w0`` .. ``w<n-1>`` and ``published_at`` = now, in
    chunks of ``chunk``, as fast as the producer takes them (module docstring, step 3); (sent,
    failed) once flushed. ``event_seq`` reads no ``w`` id, so they count in no verdict."""
    from infra.connection import KafkaConnection
    from producers.kafka_writer import KafkaWriter
    from producers.workloads import GryphonWorkload

    w = GryphonWorkload(**params)
    writer = KafkaWriter(KafkaConnection(bootstrap), **{"linger.ms": 5})
    seq = 0
    while seq < n:
        cols = _stamped(w.columns(min(chunk, n - seq)), "w", seq)
        writer.send_many(topic, cols.keys(), cols.avro())
        seq += len(cols)
    report = writer.flush(120)
    return seq, report.failed


# ---- reading the outputs ----------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def record_head(value: bytes) -> tuple[bytes, int]:
    """(event_id, published_at) of an encoded ``Match`` or ``Event`` (both start with event_id,
    publisher_id, published_at), without decoding the rest."""
    n, pos = _varint(value, _HEAD)
    eid = value[pos : pos + n]
    pos += n
    n, pos = _varint(value, pos)
    return eid, _varint(value, pos + n)[0]


def channel_events(value: bytes) -> Iterable[bytes]:
    """The events (as published) of an encoded ``ChannelEvents`` record: its array's blocks."""
    pos = _HEAD
    while True:
        count, pos = _varint(value, pos)
        if count == 0:
            return
        if count < 0:
            count = -count
            _, pos = _varint(value, pos)  # the block's byte size
        for _ in range(count):
            n, pos = _varint(value, pos)
            yield value[pos : pos + n]
            pos += n


def event_seq(eid: bytes) -> int | None:
    """The sequence number of a soak event id (``s<n>``), None for any other id.

    >>> event_seq(b"s42"), event_seq(b"gp1-7")
    (42, None)
    """
    if eid[:1] != b"s" or not eid[1:].isdigit():
        return None
    return int(eid[1:])


class Reader:
    """Reads the ``Match`` records and the channel topics from the start in a thread: latencies of
    the current interval, and one byte per event sequence number (1 = its ``Match`` was read)."""

    def __init__(self, bootstrap: str, prefix: str, capacity: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from schemas.codec import codec_for
        from schemas.topics import CHANNEL_TOPIC_PREFIX, MATCHES_TOPIC

        self._tp = TopicPartition
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"soak-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 64 << 20,
                "max.partition.fetch.bytes": 16 << 20,
            }
        )
        self.matches = prefix + MATCHES_TOPIC
        self.channel_prefix = prefix + CHANNEL_TOPIC_PREFIX
        self.channel_fp = codec_for("ChannelEvents").header
        self.seen = np.zeros(capacity, np.uint8)
        self.with_match = self.duplicates = self.foreign = 0
        self._lock = threading.Lock()
        self._match_ms: list[int] = []
        self._channel_ms: list[int] = []
        self._assigned: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-reader", daemon=True)

    def start(self) -> None:
        self.refresh()
        self._thread.start()

    def refresh(self) -> None:
        """Assign the matches topic and every channel topic that exists now (from offset 0)."""
        meta = self.consumer.list_topics(timeout=10).topics
        new = [
            self._tp(t, p, 0)
            for t, m in meta.items()
            if t not in self._assigned and (t == self.matches or t.startswith(self.channel_prefix))
            for p in m.partitions
        ]
        if new:
            self.consumer.incremental_assign(new)
            self._assigned.update(tp.topic for tp in new)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The latencies read since the last call (Match, channel), in ms."""
        with self._lock:
            m, c = self._match_ms, self._channel_ms
            self._match_ms, self._channel_ms = [], []
        return np.asarray(m, float), np.asarray(c, float)

    def _run(self) -> None:
        next_refresh = time.monotonic() + 10
        while not self._stop.is_set():
            if time.monotonic() >= next_refresh:  # channel topics appear once delivery starts
                next_refresh = time.monotonic() + 10
                try:
                    self.refresh()
                except Exception as exc:  # the cluster busy for a moment: try again later
                    print(f"reader: listing topics failed: {exc}", flush=True)
            msgs = arrived(self.consumer, 20_000, 0.2)
            match_ms, channel_ms = [], []
            for msg in msgs:
                if msg.error() is not None:
                    continue
                value, ts = msg.value(), msg.timestamp()[1]
                if msg.topic() == self.matches:
                    eid, published_at = record_head(value)
                    seq = event_seq(eid)
                    if seq is None or seq >= len(self.seen):
                        self.foreign += 1
                        continue
                    if self.seen[seq]:
                        self.duplicates += 1
                        continue
                    self.seen[seq] = 1
                    self.with_match += 1
                    match_ms.append(ts - published_at)
                elif value[:_HEAD] == self.channel_fp:
                    for raw in channel_events(value):
                        eid, published_at = record_head(raw)
                        if event_seq(eid) is not None:  # not a warm-up event
                            channel_ms.append(ts - published_at)
            if match_ms or channel_ms:
                with self._lock:
                    self._match_ms.extend(match_ms)
                    self._channel_ms.extend(channel_ms)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


# ---- the run ----------------------------------------------------------------------------------


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def _readiness(conn: Any, checkpoint_dir: Path, prefix: str, jobs: Sequence[str]) -> Any:
    """A function that says which of ``jobs`` have not committed a batch or are behind, read from
    their checkpoints as ``siftstream status`` reads them (empty: every job is ready)."""
    from confluent_kafka import Consumer

    from schemas.topics import TOPICS
    from streaming.serve import job_offsets
    from streaming.status import job_status, query_dirs

    consumer = Consumer(conn.confluent(**{"group.id": f"soak-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}))
    dirs = query_dirs(checkpoint_dir, prefix)
    topics = [prefix + t for t in TOPICS]

    def behind() -> dict[str, str]:
        ends = job_offsets(consumer, topics)
        out = {}
        for job in jobs:
            status = job_status(job, dirs[job], ends)
            if status.committed == 0 or status.lag_records > 0:
                out[job] = f"{status.committed} queries committed, lag {status.lag_records:,}"
        return out

    return behind


def _fmt(v: float | None, width: int) -> str:
    return f"{'-':>{width}}" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:>{width},.0f}"


def _header(jobs: Sequence[str], procs: Sequence[str]) -> str:
    cols = [f"{'min':>5}", f"{'phase':>6}", f"{'offered':>8}", f"{'achieved':>8}"]
    cols += [f"{'lag ' + j[:4]:>8}" for j in jobs]
    cols += [f"{'match p50':>9}", f"{'p99':>7}", f"{'chan p50':>8}", f"{'p99':>7}"]
    cols += [f"{p.replace('serve ', 's.')[:10]:>10}" for p in procs]
    return " ".join(cols)


def _line(row: Mapping[str, Any], jobs: Sequence[str], procs: Sequence[str]) -> str:
    cols = [f"{row['minute']:5.1f}", f"{row['phase']:>6}", _fmt(row["offered_rate"], 8), _fmt(row["achieved_rate"], 8)]
    cols += [_fmt(row["lag_max"].get(j), 8) for j in jobs]
    cols += [_fmt(row["match_p50_ms"], 9), _fmt(row["match_p99_ms"], 7)]
    cols += [_fmt(row["channel_p50_ms"], 8), _fmt(row["channel_p99_ms"], 7)]
    cols += [_fmt(row["rss_mb"].get(p), 10) for p in procs]
    return " ".join(cols)


def _stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: serve, its JVM and workers
            proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    from streaming.status import JOBS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10_000, help="offered load, events/s (default: %(default)s)")
    ap.add_argument("--minutes", type=float, default=30, help="length of the load (default: %(default)s)")
    ap.add_argument("--burst-factor", type=float, default=3.0, help="the burst's rate / --rate (default: 3)")
    ap.add_argument("--burst-minutes", type=float, default=2.0, help="length of the burst, 0 = none (default: 2)")
    ap.add_argument("--burst-at", type=float, help="minute the burst starts (default: 10, or a third of the run)")
    ap.add_argument("--interval-s", type=float, default=60, help="seconds per row (default: %(default)s)")
    ap.add_argument("--lag-poll-s", type=float, default=5, help="seconds between lag samples (default: %(default)s)")
    ap.add_argument("--subscriptions", type=int, default=10_000, help="Gryphon subscriptions (default: 10,000)")
    ap.add_argument("--decay", type=float, default=0.88, help="Gryphon decay (default: %(default)s)")
    ap.add_argument("--jobs", default=",".join(JOBS), help="serve's jobs (default: every one)")
    ap.add_argument("--trigger-interval", type=float, default=5.0, help="serve's trigger, seconds (default: 5)")
    ap.add_argument(
        "--max-offsets-per-trigger", type=int, help="serve's cap per micro-batch (default: 2 x rate x trigger)"
    )
    ap.add_argument(
        "--serve-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more serve option as one word, e.g. --serve-option=--job-trigger-interval=qos='10 seconds' "
        "(repeatable)",
    )
    ap.add_argument("--master", default="local[2]", help="serve's Spark master (default: %(default)s)")
    ap.add_argument("--bootstrap-servers", help="use this cluster instead of starting one")
    ap.add_argument("--port", type=int, default=39200, help="first broker port (default: %(default)s)")
    ap.add_argument("--http-port", type=int, default=39220, help="serve's /metrics port (default: %(default)s)")
    ap.add_argument("--broker-heap", default="512m", help="each broker's JVM heap (default: %(default)s)")
    ap.add_argument("--drain-s", type=float, default=300, help="longest wait for the backlog after the load")
    ap.add_argument("--startup-s", type=float, default=600, help="longest wait for serve to catch up before the load")
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=30,
        help="seconds of events at --rate sent and worked off before the load, 0 = none (default: %(default)s)",
    )
    ap.add_argument("--flat-mb-per-min", type=float, default=2.0, help="memory slope bound (default: %(default)s)")
    ap.add_argument("--baseline-minutes", type=float, default=3.0, help="pre-burst window for the lag level")
    ap.add_argument("--recover-within-min", type=float, default=5.0, help="recovery bound (default: %(default)s)")
    ap.add_argument("--work-dir", help="keep the run's data here (default: a temporary folder, removed)")
    ap.add_argument("--out", help="write the rows and the verdict as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 minutes at 2,000 events/s, rows every 20 s")
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints every thread's stack
    if args.quick:
        args.minutes, args.rate, args.interval_s, args.burst_minutes = 2.0, 2_000.0, 20.0, 0.5
        args.subscriptions, args.baseline_minutes, args.recover_within_min = 2_000, 0.5, 1.0
        args.warmup_s = min(args.warmup_s, 10.0)
    jobs = [j for j in args.jobs.split(",") if j]
    max_offsets = args.max_offsets_per_trigger or int(2 * args.rate * args.trigger_interval)
    b0, b1 = burst_window(args.minutes, args.burst_minutes, args.burst_at)
    schedule = Schedule(args.rate, 60 * args.minutes, b0, b1 if args.burst_minutes > 0 else b0, args.burst_factor)
    capacity = planned_events(schedule, schedule.seconds) + int(args.rate / 20) + 1  # publisher(): whole chunks
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="siftstream-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"workload: Gryphon (Opyrchal et al. 2000), {args.subscriptions:,} subscriptions, decay {args.decay}; "
        f"{args.rate:,.0f} events/s for {args.minutes:g} min, {args.burst_factor:g}x from minute {b0 / 60:g} to "
        f"{b1 / 60:g}; serve ({','.join(jobs)}; {args.master}; trigger {args.trigger_interval:g} s; "
        f"maxOffsetsPerTrigger {max_offsets:,}) on "
        + (args.bootstrap_servers or f"a 3-broker KRaft cluster on ports {args.port}-{args.port + 2}")
        + f" (RF 3, min.insync.replicas 2); rows every {args.interval_s:g} s; work folder {work}",
        flush=True,
    )
    cluster = None
    serve_proc: subprocess.Popen[bytes] | None = None
    pub_proc = None
    reader: Reader | None = None
    stop_pub = None
    results: dict[str, Any] = {"args": vars(args), "rows": []}
    try:
        from bench.matching_e2e import load_subscriptions, workload
        from infra import kafka
        from infra.connection import KafkaConnection
        from infra.jars import ensure_jars
        from infra.topics import ensure_topics
        from schemas.topics import EVENTS_TOPIC

        if args.bootstrap_servers:
            conn = KafkaConnection(args.bootstrap_servers)
        else:
            cluster = kafka.KafkaClusterConfig(
                home=work / "kafka-cluster",
                brokers=3,
                port=args.port,
                controller_port=args.port + 10,
                heap=args.broker_heap,
            )
            print(kafka.cluster_up(cluster, ensure_jars()), flush=True)
            conn = KafkaConnection(cluster.bootstrap)
        prefix = f"soak{uuid.uuid4().hex[:6]}."
        ensure_topics(conn, prefix)  # the cluster's defaults: replication factor 3, min.insync.replicas 2
        w = workload(args.subscriptions, args.decay)
        load_subscriptions(conn, prefix, w)
        log = (work / "serve.log").open("wb")
        cmd = [
            sys.executable, "-m", "streaming.cli", "serve",
            "--bootstrap-servers", conn.bootstrap_servers, "--home", str(work / "home"),
            "--topic-prefix", prefix, "--jobs", ",".join(jobs), "--master", args.master,
            "--trigger-interval", f"{args.trigger_interval:g} seconds",
            "--max-offsets-per-trigger", str(max_offsets),
            "--http-port", str(args.http_port), "--no-dashboard", *args.serve_option,
        ]  # fmt: skip
        serve_proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        print(f"serve started (pid {serve_proc.pid}), its log {work / 'serve.log'}", flush=True)
        url = f"http://127.0.0.1:{args.http_port}/metrics"
        started = time.monotonic()
        ready = _readiness(conn, work / "home" / "checkpoints", prefix, jobs)

        def wait_ready(what: str) -> None:  # every job committed and caught up (its checkpoint)
            since = time.monotonic()
            while True:
                assert serve_proc is not None
                if serve_proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {serve_proc.returncode}; see {work / 'serve.log'}")
                behind = ready()
                if not behind:
                    break
                if time.monotonic() - since > args.startup_s:
                    raise RuntimeError(f"serve did not catch up with {what} within {args.startup_s:g} s: {behind}")
                time.sleep(2)
            print(f"serve caught up with {what} in {time.monotonic() - since:.0f} s", flush=True)

        wait_ready("the subscriptions")
        n_warm = int(args.rate * args.warmup_s)
        if n_warm > 0:
            warm_sent, warm_failed = warm_up(
                conn.bootstrap_servers, prefix + EVENTS_TOPIC, dict(w.params), n_warm, max(1, int(args.rate / 20))
            )
            print(f"warm-up: {warm_sent:,} events w0.. sent ({warm_failed:,} failed)", flush=True)
            wait_ready(f"the {warm_sent:,} warm-up events")
        print(f"serve ready in {time.monotonic() - started:.0f} s", flush=True)

        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        sent, stop_pub, pub_result = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
        reader = Reader(conn.bootstrap_servers, prefix, capacity)
        reader.start()
        pub_proc = ctx.Process(
            target=publisher,
            args=(conn.bootstrap_servers, prefix + EVENTS_TOPIC, dict(w.params), schedule, sent, stop_pub, pub_result),
            daemon=True,
        )
        pub_proc.start()
        t0 = time.monotonic()
        brokers = {} if cluster is None else {f"broker {n['node_id']}": n["pid"] for n in kafka.cluster_status(cluster)}
        procs = ["serve driver", "serve JVM", "serve workers", *brokers, "publisher", "reader"]
        samples: dict[str, list[tuple[float, float]]] = {j: [] for j in jobs}
        print(_header(jobs, procs), flush=True)
        last_row, last_sent = 0.0, 0
        phase = "load"
        drain_started: float | None = None

        def sample_lags() -> None:  # its own thread: a slow step of the main loop leaves no gap
            while not sampling_done.is_set():
                at = time.monotonic() - t0
                text = _scrape(url)
                for job, lag in (parse_metric(text, LAG_METRIC) if text else {}).items():
                    if job in samples:
                        samples[job].append((round(at, 1), lag))
                sampling_done.wait(args.lag_poll_s)

        sampling_done = threading.Event()
        sampler = threading.Thread(target=sample_lags, name="soak-lag", daemon=True)
        sampler.start()
        while True:
            now = time.monotonic() - t0
            if serve_proc.poll() is not None:
                raise RuntimeError(f"serve exited with {serve_proc.returncode}; see {work / 'serve.log'}")
            if now - last_row >= args.interval_s:
                parents = parent_map()
                rss = serve_memory(parents, serve_proc.pid)
                for name, pid in brokers.items():
                    rss[name] = round(rss_mb(pid) or 0.0, 1) if pid else 0.0
                rss["publisher"] = round(rss_mb(pub_proc.pid or 0) or 0.0, 1)
                rss["reader"] = round(rss_mb(os.getpid()) or 0.0, 1)
                now = time.monotonic() - t0  # the counts, latencies and lags of the same moment
                s_now = int(sent.value)
                match_ms, channel_ms = reader.take()
                offered = (planned_events(schedule, now) - planned_events(schedule, last_row)) / (now - last_row)
                lags_in = {j: [v for t, v in samples[j] if last_row <= t <= now] for j in jobs}
                row = make_row(
                    now, now - last_row, offered, s_now - last_sent, lags_in, match_ms, channel_ms, rss, phase
                )
                results["rows"].append(row)
                left = max(0.0, schedule.seconds - now)
                eta = (
                    f"load ends in {left / 60:.1f} min"
                    if phase == "load"
                    else f"draining ({now - (drain_started or now):.0f} s)"
                )
                print(_line(row, jobs, procs) + f"   | {eta}; {reader.with_match:,} of {s_now:,} matched", flush=True)
                last_row, last_sent = now, s_now
            if phase == "load" and not pub_proc.is_alive() and now >= schedule.seconds:
                phase, drain_started = "drain", now
            if phase == "drain":
                floor = args.rate * args.trigger_interval  # each job back within one trigger's volume
                caught_up = all(samples[j] and samples[j][-1][1] <= floor for j in jobs)
                if (caught_up and reader.with_match >= int(sent.value)) or now - (drain_started or now) > args.drain_s:
                    break
            time.sleep(0.2)
        sampling_done.set()
        sampler.join(10)
        pub_proc.join(60)
        if pub_result.empty():
            raise RuntimeError(f"the publisher ended without its counts (exit code {pub_proc.exitcode})")
        pub = pub_result.get(timeout=10)
        time.sleep(2)
        match_ms, channel_ms = reader.take()
        v = verdict(
            results["rows"],
            samples,
            schedule,
            floor=args.rate * args.trigger_interval,
            baseline_s=60 * args.baseline_minutes,
            recover_within_s=60 * args.recover_within_min,
            flat_mb_per_min=args.flat_mb_per_min,
            published=pub["sent"] - pub["failed"],
            seen=int(reader.seen[: pub["sent"]].sum()),
            duplicates=reader.duplicates,
        )
        v["publisher"] = pub
        results.update(verdict=v, lag_samples=samples, schedule=dataclasses.asdict(schedule))
        _print_verdict(v, schedule)
        return 0 if v["ok"] else 1
    except KeyboardInterrupt:
        print("interrupted: stopping what was started", flush=True)
        return 130
    finally:
        if stop_pub is not None:
            stop_pub.set()
        if pub_proc is not None:
            pub_proc.join(30)
            if pub_proc.is_alive():
                pub_proc.kill()
        if reader is not None:
            reader.stop()
        if serve_proc is not None:
            _stop_process(serve_proc, 60)
            print(f"serve stopped ({serve_proc.returncode})", flush=True)
        if cluster is not None:
            from infra import kafka

            print(kafka.cluster_down(cluster), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=2, default=str))
            print(f"wrote {args.out}", flush=True)
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def _print_verdict(v: Mapping[str, Any], schedule: Schedule) -> None:
    print("\nverdict", flush=True)
    print(f"  memory, MB/min over the second half of the load (flat: below {v['flat_mb_per_min']:g}):")
    for name, m in v["memory"].items():
        state = "flat" if m["flat"] else "GROWING" if m["growing"] else "shrinking"
        print(f"    {name:<14} {m['mb_per_min']:+8.2f}  {state}")
    burst = f"{schedule.burst_start_s / 60:g}-{schedule.burst_end_s / 60:g} min"
    print(f"  lag, records (burst {burst}; recovered: back at the pre-burst level within {v['recover_within_s']:g} s):")
    for job, j in v["lag"].items():
        rec = "-" if j["recovery_s"] is None else f"{j['recovery_s']:.0f} s"
        state = {True: "recovered", False: "NOT RECOVERED", None: "no burst"}[j["recovered"]]
        print(f"    {job:<11} max {j['max']:>10,}  pre-burst {j['pre_burst']:>9,}  recovery {rec:>7}  {state}")
    pub = v["publisher"]
    if v["lost"] is None:
        end = (
            f"{v['missing']:,} not matched yet: the drain ended with the matching job "
            f"{v['matching_lag_at_end']:,} records behind"
        )
    else:
        end = f"{v['lost']:,} lost"
    print(
        f"  records: {v['published']:,} published and acknowledged ({pub['failed']:,} failed), {v['with_match']:,} "
        f"with their Match record, {end}; {v['duplicates']:,} duplicate Match records",
        flush=True,
    )
    print(f"  {'OK' if v['ok'] else 'NOT MET'}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
