"""The simulator's telemetry as SiftStream records: valid for their schemas, consistent with the run."""

from __future__ import annotations

from collections import Counter

from producers import overlay
from routing.reliability.evaluation_system import reliability_tree_system
from schemas.codec import codec_for, decode_wire
from schemas.rules import validate


def test_every_emitted_record_is_valid_and_receipts_agree_with_the_ground_truth() -> None:
    system = reliability_tree_system(3)
    result = overlay.run(system, 30.0, seed=3, telemetry=True)
    assert result.telemetry is not None
    rows = list(overlay.records(system, result.telemetry, epoch_ms=1_700_000_000_000))
    times = [t for t, *_ in rows]
    assert times == sorted(times)
    counts = Counter(topic for _, topic, _, _ in rows)
    assert counts["siftstream.telemetry.links.v1"] == result.event_hops
    assert counts["siftstream.events.v1"] == result.events
    for _, topic, _, record in rows:
        name = overlay.SCHEMA_OF[topic]
        wire = decode_wire(codec_for(name).encode(record), name)[1]
        assert validate(name, wire) == [], (topic, record)
    # every on-time delivery the simulator counted has a receipt within the event's lifetime
    events = {r["event_id"]: r for _, topic, _, r in rows if topic == "siftstream.events.v1"}
    receipts = [r for _, topic, _, r in rows if topic == "siftstream.receipts.v1"]
    on_time = Counter(
        r["subscriber_id"]
        for r in receipts
        if r["received_at"] - events[r["event_id"]]["published_at"] <= events[r["event_id"]]["lifetime_ms"]
        and 0 <= events[r["event_id"]]["published_at"] - 1_700_000_000_000 < 30_000
    )
    for sub, stats in result.subscribers.items():
        # integer-ms rounding of the records may move a borderline delivery by one
        assert abs(on_time[sub] - stats.on_time) <= max(1, stats.on_time // 50), sub


def test_the_matcher_uses_the_filter_language() -> None:
    match = overlay.filter_matcher()
    assert match("topic = 2 and a3 <= 1", {"topic": 2, "a3": 1})
    assert not match("topic = 2 and a3 <= 1", {"topic": 2})
