"""The pure parts of ``bench/soak.py``: the load schedule, reading serve's lag from its metrics
text, a minute's row, the memory slope, the burst's recovery, the verdict, the process tree read
from a ``/proc``-shaped folder, and the record heads it reads latencies from (no Kafka, no Spark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.soak import (
    Schedule,
    _stamped,
    baseline_lag,
    burst_window,
    channel_events,
    descendants,
    event_seq,
    make_row,
    memory_slopes,
    offered_rate,
    parent_map,
    parse_metric,
    planned_events,
    record_head,
    recovery_s,
    rss_mb,
    serve_memory,
    slope,
    verdict,
)
from schemas.codec import codec_for

METRICS = """# HELP siftstream_job_consumer_lag_records Records in the job's input topics past the offsets.
# TYPE siftstream_job_consumer_lag_records gauge
siftstream_job_consumer_lag_records{job="validation"} 0.0
siftstream_job_consumer_lag_records{job="matching"} 48213.0
siftstream_job_consumer_lag_records{job="qos"} 1.5e+06
siftstream_job_consumer_lag_records_extra{job="matching"} 7.0
siftstream_job_up{job="matching"} 1.0
siftstream_matching_events_total 1.2e+07
"""


def test_lag_is_read_per_job_from_the_metrics_text() -> None:
    assert parse_metric(METRICS, "siftstream_job_consumer_lag_records") == {
        "validation": 0.0,
        "matching": 48213.0,
        "qos": 1_500_000.0,
    }
    assert parse_metric(METRICS, "siftstream_job_up") == {"matching": 1.0}
    assert parse_metric(METRICS, "siftstream_matching_events_total") == {"": 12_000_000.0}
    assert parse_metric("", "siftstream_job_consumer_lag_records") == {}


def test_the_schedule_offers_the_burst_and_its_integral_counts_the_events() -> None:
    s = Schedule(rate=10_000, seconds=1800, burst_start_s=600, burst_end_s=720, factor=3)
    assert [offered_rate(s, t) for t in (-1, 0, 599.9, 600, 719.9, 720, 1799, 1800)] == [
        0.0,
        10_000.0,
        10_000.0,
        30_000.0,
        30_000.0,
        10_000.0,
        10_000.0,
        0.0,
    ]
    assert planned_events(s, 600) == 6_000_000
    assert planned_events(s, 720) == 6_000_000 + 3_600_000
    assert planned_events(s, 1800) == planned_events(s, 5000) == 18_000_000 + 2_400_000
    # the integral agrees with a sum of the rate over small steps
    steps = np.arange(0, 1800, 0.5)
    assert sum(offered_rate(s, t) * 0.5 for t in steps) == pytest.approx(planned_events(s, 1800))
    assert burst_window(30, 2, None) == (600.0, 720.0)
    assert burst_window(4, 1, None) == (80.0, 140.0)
    assert burst_window(4, 3, 2) == (120.0, 240.0)  # cut at the end of the run


def test_a_row_keeps_the_last_and_largest_lag_and_the_interval_percentiles() -> None:
    latencies = np.arange(1, 1001, dtype=float)
    row = make_row(
        120.0, 60.0, 10_000.0, 597_000, {"matching": [10, 90_000, 400], "qos": []}, latencies, np.array([]), {}, "load"
    )
    assert row["minute"] == 2.0 and row["achieved_rate"] == 9_950.0
    assert row["lag"] == {"matching": 400} and row["lag_max"] == {"matching": 90_000}
    assert row["match_p50_ms"] == pytest.approx(500.5) and row["match_p99_ms"] == pytest.approx(990.01)
    assert row["matches_read"] == 1000 and row["channel_p99_ms"] is None


def test_memory_slope_over_the_second_half_tells_growth_from_a_warm_up() -> None:
    assert slope([1, 2, 3, 4], [5, 5, 5, 5]) == 0.0
    assert slope([1], [7]) == 0.0
    assert slope([0, 10], [100, 150]) == pytest.approx(5.0)
    # a JVM that grows during its first minutes, then holds; a leak that grows all the time
    rows = [
        {"minute": m, "phase": "load", "rss_mb": {"jvm": min(800.0, 500 + 100 * m), "leak": 300.0 + 3 * m}}
        for m in range(1, 11)
    ]
    assert memory_slopes(rows) == {"jvm": 0.0, "leak": pytest.approx(3.0)}


def test_recovery_is_the_first_sample_after_the_burst_back_at_the_pre_burst_level() -> None:
    samples = [(0, 100), (60, 30_000), (120, 45_000), (130, 9_000), (140, 200), (150, 300), (160, 100)]
    base = baseline_lag(samples, 0, 60, floor=50)
    assert base == 100
    assert recovery_s(samples, 60, 120, base) == 40.0
    assert recovery_s(samples, 60, 120, 50) is None
    # a job downstream of another (routes after matching) peaks after the burst: recovery counts
    # from its peak, not from a low sample before it
    downstream = [(50, 100), (125, 50), (150, 20_000), (170, 90)]
    assert recovery_s(downstream, 60, 120, 100) == 50.0
    assert baseline_lag(samples, 0, 60, floor=5_000) == 5_000  # at least one trigger's volume


def test_the_verdict_flags_growing_memory_an_unrecovered_job_and_lost_records() -> None:
    s = Schedule(rate=100, seconds=600, burst_start_s=200, burst_end_s=260)
    rows = [
        {
            "minute": m,
            "phase": "load",
            "rss_mb": {"serve JVM": 900.0, "publisher": 100.0 + 5 * m, "broker": 900.0 - 9 * m},
        }
        for m in range(1, 11)
    ]
    rows.append({"minute": 11, "phase": "drain", "rss_mb": {"serve JVM": 5_000.0, "publisher": 0.0}})
    lags = {
        "matching": [(150.0, 300.0), (250.0, 20_000.0), (300.0, 200.0), (590.0, 0.0)],
        "qos": [(150.0, 300.0), (250.0, 20_000.0), (300.0, 19_000.0), (590.0, 30_000.0)],
    }
    v = verdict(rows, lags, s, 500, 60, 120, 2.0, published=60_000, seen=59_990, duplicates=3)
    assert v["memory"]["serve JVM"] == {"mb_per_min": 0.0, "flat": True, "growing": False}  # drain is not load
    assert v["memory"]["publisher"]["flat"] is False and v["memory"]["publisher"]["growing"] is True
    assert v["memory"]["broker"]["flat"] is False and v["memory"]["broker"]["growing"] is False  # gives back
    assert v["lag"]["matching"] == {"max": 20_000, "pre_burst": 500, "recovery_s": 40.0, "recovered": True}
    assert v["lag"]["qos"]["recovered"] is False and v["lag"]["qos"]["max"] == 30_000
    assert (v["missing"], v["lost"], v["duplicates"], v["ok"]) == (10, 10, 3, False)
    behind = {"matching": [(150.0, 300.0), (590.0, 8_000.0)]}
    v = verdict(rows, behind, s, 500, 60, 120, 2.0, published=60_000, seen=52_000, duplicates=0)
    assert (v["missing"], v["lost"], v["matching_lag_at_end"]) == (8_000, None, 8_000)  # not matched yet
    no_burst = Schedule(rate=100, seconds=600, burst_start_s=200, burst_end_s=200)
    flat = [{"minute": m, "phase": "load", "rss_mb": {"x": 1.0}} for m in range(1, 5)]
    v = verdict(flat, {"matching": [(10.0, 5.0)]}, no_burst, 500, 60, 120, 2.0, 10, 10, 0)
    assert v["lag"]["matching"]["recovered"] is None and v["ok"] is True


def _proc(root: Path, pid: int, ppid: int, comm: str, rss_kb: int | None) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560\n")
    if rss_kb is not None:
        (d / "status").write_text(f"Name:\t{comm}\nVmPeak:\t 9 kB\nVmRSS:\t  {rss_kb} kB\nThreads:\t3\n")


def test_serve_memory_sums_its_jvm_and_python_workers_from_proc(tmp_path: Path) -> None:
    _proc(tmp_path, 100, 1, "python", 204_800)  # serve
    _proc(tmp_path, 101, 100, "java", 1_048_576)  # its JVM
    _proc(tmp_path, 102, 101, "python3", 102_400)  # pyspark.daemon
    _proc(tmp_path, 103, 102, "python3", 51_200)  # a worker
    _proc(tmp_path, 104, 102, "python (x) y", None)  # a worker gone between the two reads
    _proc(tmp_path, 200, 1, "java", 512_000)  # a broker: not serve's
    parents = parent_map(tmp_path)
    assert parents[104] == (102, "python (x) y")
    assert descendants(parents, 100) == [101, 102, 103, 104]
    assert rss_mb(101, tmp_path) == 1024.0 and rss_mb(104, tmp_path) is None and rss_mb(999, tmp_path) is None
    got = serve_memory(parents, 100, rss=lambda pid: rss_mb(pid, tmp_path))
    assert got == {"serve driver": 200.0, "serve JVM": 1024.0, "serve workers": 150.0}


def test_record_heads_and_channel_records_read_as_the_codecs_wrote_them() -> None:
    events = [
        codec_for("Event").encode(
            {
                "event_id": f"s{i}",
                "publisher_id": "gp1",
                "published_at": 1_700_000_000_000 + i,
                "lifetime_ms": 0,
                "attributes": {"a0": i},
            }
        )
        for i in range(3)
    ]
    match = codec_for("Match").encode(
        {"event_id": "s12345", "publisher_id": "gp1", "published_at": 1_700_000_000_042, "subscription_ids": ["x"]}
    )
    assert record_head(match) == (b"s12345", 1_700_000_000_042)
    assert [record_head(e) for e in events] == [(f"s{i}".encode(), 1_700_000_000_000 + i) for i in range(3)]
    batch = codec_for("ChannelEvents").encode({"events": events})
    assert list(channel_events(batch)) == events
    assert list(channel_events(codec_for("ChannelEvents").encode({"events": []}))) == []
    assert (event_seq(b"s0"), event_seq(b"s18000000"), event_seq(b"warm-1"), event_seq(b"s"), event_seq(b"sx1")) == (
        0,
        18_000_000,
        None,
        None,
        None,
    )


def test_stamped_events_carry_the_ids_the_reader_counts_and_the_send_time() -> None:
    import time

    from bench.matching_e2e import workload
    from producers.workloads import GryphonWorkload

    w = GryphonWorkload(**dict(workload(200, 0.88).params))
    before = int(time.time() * 1000)
    load, warm = _stamped(w.columns(4), "s", 40), _stamped(w.columns(3), "w", 0)
    heads = [record_head(codec_for("Event").encode(r)) for r in load.records()]
    assert [event_seq(eid) for eid, _ in heads] == [40, 41, 42, 43]
    assert all(before <= at <= int(time.time() * 1000) for _, at in heads)
    warm_ids = [record_head(codec_for("Event").encode(r))[0] for r in warm.records()]
    assert warm_ids == [b"w0", b"w1", b"w2"]
    assert [event_seq(eid) for eid in warm_ids] == [None, None, None]
