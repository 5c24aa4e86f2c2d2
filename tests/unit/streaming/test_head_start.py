"""``streaming.head_start``: which checkpoints are fresh, and a head start whose child fails or
dies leaves the first batch to read the topic itself (``take`` gives None; nothing raises). The
head start taken, and one past the first batch, are tested against a real broker in
tests/integration/test_matching_job.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from infra.connection import KafkaConnection
from streaming.head_start import HeadStart, fresh, share


def test_a_checkpoint_is_fresh_until_spark_logs_a_batch(tmp_path: Path) -> None:
    query = tmp_path / "query"
    assert fresh(query)  # no folder at all
    (query / "offsets").mkdir(parents=True)
    (query / "offsets" / ".0.crc.tmp").write_text("")
    assert fresh(query)  # a folder without a batch's entry
    (query / "offsets" / "0").write_text("v1\n")
    assert not fresh(query)


def test_a_head_start_whose_child_dies_gives_nothing_to_take(caplog: pytest.LogCaptureFixture) -> None:
    # a cluster that is not there, and a child ended before it could answer
    head = HeadStart(KafkaConnection("127.0.0.1:9"), "t", {0: 5, 1: 5}, processes=2)
    head._processes[0].kill()  # a child that dies without an answer: the receiver sees the pipe close
    assert head.take({0: 10, 1: 10}, timeout_s=60) is None
    assert not any(p.is_alive() for p in head._processes)  # the other one is stopped too
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the first batch reads it" in m and "without an answer" in m for m in said), said


def test_the_shares_are_the_partitions_in_order_each_once() -> None:
    for count in range(7):
        parts = [5 * p for p in range(count)][::-1]  # any order, any numbers
        for n in range(1, 5):
            groups = [share(parts, k, n) for k in range(n)]
            assert [p for g in groups for p in g] == sorted(parts)
            assert max(map(len, groups)) - min(map(len, groups)) <= 1
