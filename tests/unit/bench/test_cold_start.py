"""The pure parts of ``bench/cold_start.py``: the records it publishes, the memory split of the
job's process tree and the sums of the job's per-batch phases (no Kafka, no Spark)."""

from __future__ import annotations

import pytest

from bench.cold_start import PHASES, job_memory, phase_sums, subscription_values, w1_event
from routing.matching.table import plan_changes
from schemas.codec import decode
from streaming.subscription_follower import subscription_record


def test_subscription_values_are_valid_subscribe_records_keyed_by_id() -> None:
    texts = ["a0 between 1 and 500001 and a3 between 7 and 500007", "a1 between 0 and 500000"]
    keys, values = subscription_values(texts, first=10)
    assert keys == ["c10", "c11"]
    records = [subscription_record(k.encode(), v) for k, v in zip(keys, values, strict=True)]
    outcomes = plan_changes(records)
    assert [o.rejection for o in outcomes] == [None, None]
    assert [o.change for o in outcomes] == [("c10", texts[0]), ("c11", texts[1])]


def test_w1_event_carries_twenty_long_attributes() -> None:
    _, record = decode(w1_event("run-3", list(range(20)), 1234), "Event")
    assert (record["event_id"], record["published_at"]) == ("run-3", 1234)
    assert record["attributes"] == {f"a{j}": j for j in range(20)}


def test_job_memory_splits_driver_jvm_and_workers_of_that_tree_only() -> None:
    tree = {
        100: (1, "python"),
        101: (100, "java"),
        102: (101, "python3"),  # Spark's daemon
        103: (102, "python3"),
        104: (102, "python3"),
        200: (1, "java"),  # another job's JVM
        201: (200, "python3"),
    }
    sizes = {100: 500.0, 101: 1500.0, 102: 40.0, 103: 900.0, 104: 950.0, 200: 7.0, 201: 7.0}
    assert job_memory(tree, 100, rss=sizes.get) == {"driver": 500.0, "jvm": 1500.0, "workers": [950.0, 900.0, 40.0]}


def test_job_memory_counts_a_vanished_process_as_zero() -> None:
    assert job_memory({5: (1, "python"), 6: (5, "java")}, 5, rss=lambda pid: None) == {
        "driver": 0.0,
        "jvm": 0.0,
        "workers": [],
    }


def test_phase_sums_take_the_batches_started_before_the_first_match() -> None:
    rows = [
        {
            "started_at_ms": 1000,
            "restore_ms": 0.0,
            "read_ms": 4000.0,
            "worker_ready_ms": 9000.0,
            "duration_ms": 15000.0,
        },
        {"started_at_ms": 16000, "read_ms": 2.0, "worker_ready_ms": 0.0, "duration_ms": 300.0},
        {"started_at_ms": 17000, "read_ms": 1.0, "duration_ms": 200.0},
    ]
    got = phase_sums(rows, 16500)
    assert got["batches"] == 2
    assert got["read_ms"] == pytest.approx(4002.0)
    assert got["duration_ms"] == pytest.approx(15300.0)
    assert got["worker_ready_ms"] == pytest.approx(9000.0)
    assert set(got) == {"batches", *PHASES}
    assert phase_sums(rows, None)["batches"] == 3
    assert phase_sums(rows, 500)["batches"] == 0
