"""The channels job's step object: join placements, exact waste ratios, re-clustering with
hysteresis, the sample ring, versions and state."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from routing.channels import BOUNDED_METHODS, Assignment, ChannelUnions, plan_metrics
from routing.matching.table import SubscriptionRecord
from routing.monitors.channels import ChannelMonitor, ChannelMonitorConfig


def sub(sid: str, subscriber: str | None = None, filt: str = "x > 0") -> SubscriptionRecord:
    return SubscriptionRecord(op="subscribe", subscription_id=sid, filter=filt, subscriber_id=subscriber or f"u-{sid}")


def unsub(sid: str) -> SubscriptionRecord:
    return SubscriptionRecord(op="unsubscribe", subscription_id=sid)


def feed(mon: ChannelMonitor, groups: Sequence[Sequence[str]], n: int, start: int, tag: str) -> int:
    """``n`` events, round robin over ``groups``: event i is matched by exactly ``groups[i % len]``."""
    ids = [f"{tag}{start + i}" for i in range(n)]
    mon.add_matches(ids, [list(groups[i % len(groups)]) for i in range(n)], [start + i for i in range(n)])
    return start + n


def labels_of(version: dict[str, Any], ids: Sequence[str]) -> np.ndarray:
    channel_of = Assignment.from_record(version).channel_of
    return np.array([channel_of[s] for s in ids], dtype=np.int64)


A = ["a1", "a2", "a3", "a4"]
B = ["b1", "b2", "b3", "b4"]


def two_groups(**overrides: Any) -> tuple[ChannelMonitor, int]:
    """Eight subscriptions, A and B matching disjoint events, clustered into two clean channels."""
    cfg = {"k": 2, "sample_events": 200, "min_interval_ms": 1000, "drift": 0.05, "margin": 0.1}
    mon = ChannelMonitor(ChannelMonitorConfig(**{**cfg, **overrides}))
    mon.apply_subscriptions([sub(s) for s in A + B])
    t = feed(mon, [A, B], 200, 0, "e")
    [initial] = mon.step(t)
    # the method that made the plan: the configured one, or the candidate auto kept
    made_by = mon.config.method if mon.config.method != "auto" else initial["method"]
    assert initial["reason"] == "initial" and initial["method"] == made_by in BOUNDED_METHODS
    if mon.config.k == 2:
        assert initial["waste_ratio"] == 0.0
        assert sorted(sorted(c["subscription_ids"]) for c in initial["channels"]) == [A, B]
    return mon, t


def test_versions_are_numbered_and_have_the_schemas_fields() -> None:
    from schemas.codec import codec_for, decode

    codec = codec_for("ChannelAssignment")
    mon, t = two_groups()
    assert mon.step(t + 1) == []  # nothing changed
    mon.apply_subscriptions([sub("c1")])
    [joined] = mon.step(t + 2)
    mon.apply_subscriptions([unsub("a1")])
    [left] = mon.step(t + 3)
    assert [joined["version"], left["version"]] == [2, 3]
    assert (joined["reason"], left["reason"]) == ("joined", "left")
    assert "c1 on" in joined["detail"] and "a1" in left["detail"]
    for v in (joined, left):
        assert v["stage"] == "planned" and v["handover"] == [] and v["k"] == 2
        assert [c["channel"] for c in v["channels"]] == [0, 1]
        assert decode(codec.encode(v), "ChannelAssignment")[1] == v  # exactly the schema's fields
    assert "a1" not in Assignment.from_record(left).channel_of
    mon.apply_subscriptions([sub("b1", "new-owner")])  # same subscription, another subscriber
    [moved] = mon.step(t + 4)
    assert (moved["version"], moved["reason"], moved["detail"].split(";")[0]) == (4, "joined", "subscriber ids changed")
    assert next(c["subscriber_ids"] for c in moved["channels"] if "b1" in c["subscription_ids"])[:2] == [
        "new-owner",
        "u-b2",
    ]
    assert mon.counters["versions"] == 4


def test_new_subscriptions_are_placed_by_the_join_rule_on_the_sample() -> None:
    rng = random.Random(3)
    mon = ChannelMonitor(ChannelMonitorConfig(k=4, sample_events=50, method="approx"))
    first = [f"s{i:02d}" for i in range(12)]
    mon.apply_subscriptions([sub(s) for s in first])
    mon.add_matches(
        [f"e{j}" for j in range(80)], [rng.sample(first, rng.randint(0, 4)) for _ in range(80)], list(range(80))
    )
    mon.step(100)
    # the expected placement: ChannelUnions over the same sample, new ids in id order
    ids, hits = mon.sample()
    before = mon.channel_of
    unions = ChannelUnions(4, hits.shape[1])
    for i, s in enumerate(ids):
        unions.add(before[s], hits[i])
    new = ["t2", "t0", "t1"]
    expected = {s: unions.place(np.zeros(hits.shape[1], dtype=bool)) for s in sorted(new)}
    mon.apply_subscriptions([sub(s) for s in new] + [sub("s03", "someone-else")])
    after = mon.channel_of
    assert {s: after[s] for s in new} == expected
    assert {s: after[s] for s in first} == before  # placements never move the others
    assert mon.subscribers["s03"] == "someone-else"
    [v] = mon.step(101)
    assert v["reason"] == "joined" and v["method"] == "approx"
    assert "someone-else" in next(c["subscriber_ids"] for c in v["channels"] if "s03" in c["subscription_ids"])


def test_waste_ratios_are_plan_metrics_of_the_sample() -> None:
    rng = random.Random(7)
    mon = ChannelMonitor(ChannelMonitorConfig(k=3, sample_events=60, method="approx", min_interval_ms=0))
    live = [f"s{i}" for i in range(9)]
    mon.apply_subscriptions([sub(s) for s in live])
    versions = []
    for step in range(6):
        n = rng.randint(10, 40)
        mon.add_matches(
            [f"e{step}-{j}" for j in range(n)],
            [rng.sample(live, rng.randint(0, 5)) for _ in range(n)],
            [step * 100 + j for j in range(n)],
        )
        if step % 2:
            mon.apply_subscriptions([unsub(live.pop(0)), sub(f"n{step}")])
            live.append(f"n{step}")
        ids, hits = mon.sample()
        out = mon.step(step * 100 + 99)
        for v in out:
            labels = labels_of(v, ids)
            m = plan_metrics(hits, labels)
            assert v["waste_ratio"] == m.waste_ratio
            assert v["flooding_waste_ratio"] == plan_metrics(hits, np.zeros(len(ids), dtype=np.int64)).waste_ratio
            assert sum(c["deliveries"] for c in v["channels"]) == m.deliveries
            assert v["sample_events"] == hits.shape[1] == min(60, v["sample_events"])
            if versions:
                prev = Assignment.from_record(versions[-1])
                lobby = np.array([prev.channel(s) for s in ids], dtype=np.int64)
                assert v["previous_waste_ratio"] == plan_metrics(hits, lobby).waste_ratio
            else:
                assert v["previous_waste_ratio"] is None
            for c in v["channels"]:
                members = np.isin(ids, c["subscription_ids"])
                if members.any():
                    one = plan_metrics(hits[members], np.zeros(int(members.sum()), dtype=np.int64))
                    assert (c["deliveries"], c["waste_ratio"]) == (one.deliveries, one.waste_ratio)
            versions.append(v)
    assert [v["version"] for v in versions] == list(range(1, len(versions) + 1))


def test_no_events_no_ratios_and_one_subscription_is_not_clustered() -> None:
    mon = ChannelMonitor(ChannelMonitorConfig(k=3))
    assert mon.step(0) == []
    mon.apply_subscriptions([sub("only")])
    [v] = mon.step(5)
    assert (v["waste_ratio"], v["flooding_waste_ratio"], v["previous_waste_ratio"]) == (None, None, None)
    assert v["method"] == "join" and v["sample_events"] == 0
    assert all(c["waste_ratio"] is None for c in v["channels"])
    mon.apply_subscriptions([unsub("only")])
    [gone] = mon.step(6)
    assert gone["reason"] == "left" and all(c["subscription_ids"] == [] for c in gone["channels"])


def test_drift_reclusters_and_moves_few() -> None:
    mon, t = two_groups(min_interval_ms=100, method="spectral-ncut")
    # the load changes: now the first half of A and of B match the same events, and so on
    x, y = ["a1", "a2", "b1", "b2"], ["a3", "a4", "b3", "b4"]
    t = feed(mon, [x, y], 200, t, "f")
    w = mon.waste_ratio()
    assert w is not None and w > 0.3
    [v] = mon.step(t)
    assert v["reason"] == "reclustered" and v["method"] == "spectral-ncut"
    assert v["previous_waste_ratio"] == pytest.approx(w) and v["waste_ratio"] == 0.0
    assert sorted(sorted(c["subscription_ids"]) for c in v["channels"]) == [x, y]
    # renumbered to keep subscriptions where they were: two of four move per channel, not six
    assert "4 of 8 subscriptions move" in v["detail"]
    assert mon.counters["reclusters"] == 1


def test_hysteresis_threshold_interval_and_margin() -> None:
    # below the threshold: one stray shared event in 200 does not re-cluster
    mon, t = two_groups(drift=0.2)
    t = feed(mon, [A, B, A, B, ["a1", "b1"]], 20, t, "g")
    w = mon.waste_ratio()
    assert w is not None and 0 < w <= 0.2
    assert mon.step(t) == [] and mon.decision == "no drift"

    # drift, but the initial re-clustering was less than min_interval_ms ago (event time)
    mon, t = two_groups(min_interval_ms=10_000)
    t = feed(mon, [["a1", "a2", "b1", "b2"], ["a3", "a4", "b3", "b4"]], 200, t, "f")
    assert mon.step(t) == [] and "waiting" in mon.decision
    [v] = mon.step(10_200)
    assert v["reason"] == "reclustered"

    # drift, but no candidate cuts the waste by the margin (a subscription that matches nothing
    # wastes whatever channel it joins): kept, counted, and retried only after the interval; the
    # membership change is still planned
    mon, t = two_groups(min_interval_ms=100)
    t = feed(mon, [A, B], 200, t, "h")
    mon.apply_subscriptions([sub("late")])  # matches nothing, receives everything: the waste rises
    assert [v["reason"] for v in mon.step(t)] == ["joined"]
    assert mon.counters["rejected"] == 1 and mon.counters["reclusters"] == 0
    assert mon.step(t + 50) == [] and mon.counters["rejected"] == 1 and "waiting" in mon.decision
    assert mon.step(t + 100) == [] and mon.counters["rejected"] == 2 and "margin" in mon.decision


def test_sample_ring_keeps_the_last_events_once() -> None:
    rng = random.Random(11)
    size = 17
    mon = ChannelMonitor(ChannelMonitorConfig(k=2, sample_events=size))
    live: set[str] = set()
    model: list[tuple[str, frozenset[str]]] = []  # the last `size` distinct events, oldest first
    for step in range(200):
        op = rng.random()
        if op < 0.15:
            sid = f"s{rng.randint(0, 9)}"
            mon.apply_subscriptions([sub(sid)])
            live.add(sid)
        elif op < 0.25 and live:
            sid = rng.choice(sorted(live))
            mon.apply_subscriptions([unsub(sid)])
            live.discard(sid)
            model = [(e, m - {sid}) for e, m in model]
        else:
            batch = []
            for _ in range(rng.randint(0, 30)):
                eid = f"e{rng.randint(0, 150)}"
                batch.append((eid, [f"s{rng.randint(0, 9)}" for _ in range(rng.randint(0, 3))]))
            mon.add_matches([e for e, _ in batch], [m for _, m in batch], [0] * len(batch))
            known = {e for e, _ in model}
            for eid, matched in batch:
                if eid not in known:
                    known.add(eid)
                    model.append((eid, frozenset(matched) & live))
            model = model[-size:]
        ids, hits = mon.sample()
        assert ids == tuple(sorted(live))
        expected = np.array([[s in m for _, m in model] for s in ids], dtype=bool).reshape(len(ids), len(model))
        assert np.array_equal(hits, expected), step
        assert set(mon.channel_of) == live
        assert all(0 <= c < 2 for c in mon.channel_of.values())
        # the per-channel counts kept incrementally equal a rebuild, and give plan_metrics' numbers
        kept = mon._carried.copy()
        mon._rebuild_carried()
        assert np.array_equal(kept, mon._carried), step
        if ids and mon.sample_size:
            labels = np.array([mon.channel_of[s] for s in ids], dtype=np.int64)
            m = plan_metrics(hits, labels)
            assert mon.waste_ratio() == m.waste_ratio
            assert mon._ratios()[1] == (
                m.false_positives / m.flooding_false_positives if m.flooding_false_positives else 0
            )


def test_state_round_trip_continues_identically() -> None:
    mon, t = two_groups()
    mon.apply_subscriptions([sub("c1"), unsub("b4")])
    t = feed(mon, [["a1", "a2", "b1", "b2"], ["a3", "a4", "b3", "c1"]], 150, t, "f")
    copy = ChannelMonitor.from_bytes(mon.to_bytes())
    assert copy.to_bytes() == mon.to_bytes()
    assert copy.sample()[0] == mon.sample()[0] and np.array_equal(copy.sample()[1], mon.sample()[1])
    assert mon.step(t) == copy.step(t)
    t = feed(mon, [A], 10, t, "g")
    feed(copy, [A], 10, t - 10, "g")
    mon.apply_subscriptions([sub("d")])
    copy.apply_subscriptions([sub("d")])
    assert mon.step(t + 99_999) == copy.step(t + 99_999)
    assert copy.to_bytes() == mon.to_bytes()


def test_a_state_saved_with_id_keyed_tables_still_loads() -> None:
    from routing.stats.state import pack_documents, unpack_documents

    mon, t = two_groups()
    mon.apply_subscriptions([sub("c1"), unsub("b4")])
    feed(mon, [["a1", "b1", "c1"]], 30, t, "f")
    meta, blobs = unpack_documents(mon.to_bytes())
    ids = meta.pop("ids")
    subscribers = meta.pop("subscribers")
    meta["row"] = {sid: row for row, sid in enumerate(ids) if sid is not None}
    meta["subscribers"] = {sid: subscribers[row] for sid, row in meta["row"].items()}
    meta["channel"] = mon.channel_of
    versioned = meta.pop("versioned")
    meta["versioned"] = dict(zip(versioned, meta.pop("versioned_channels"), strict=True))
    meta["versioned_subscribers"] = dict(zip(versioned, meta.pop("versioned_subscribers"), strict=True))
    old = pack_documents(meta, sample=blobs["sample"])
    assert ChannelMonitor.from_bytes(old).to_bytes() == mon.to_bytes()


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        ChannelMonitorConfig(method="ideal")
    with pytest.raises(ValueError, match="method ck needs the attributes' domains"):
        ChannelMonitorConfig(method="ck")
    with pytest.raises(ValueError, match="'max' must be >= 'min'"):
        ChannelMonitorConfig(domains={"x": {"min": 3, "max": 1}})
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        ChannelMonitorConfig(k=0)
    with pytest.raises(ValueError, match="margin"):
        ChannelMonitorConfig(margin=1.0)


def test_domains_let_the_structural_baselines_recluster_and_survive_a_restart() -> None:
    cfg = ChannelMonitorConfig(k=2, sample_events=100, method="ck", domains={"x": {"min": 0, "max": 9}})
    mon = ChannelMonitor(cfg)
    low, high = ["a1", "a2", "a3"], ["b1", "b2", "b3"]
    mon.apply_subscriptions(
        [
            SubscriptionRecord(op="subscribe", subscription_id=s, filter="x between 0 and 4", subscriber_id="u")
            for s in low
        ]
        + [SubscriptionRecord(op="subscribe", subscription_id=s, filter="x > 5", subscriber_id="u") for s in high]
    )
    t = feed(mon, [low, high], 40, 0, "e")
    [v] = mon.step(t)
    assert v["method"] == "ck" and sorted(sorted(c["subscription_ids"]) for c in v["channels"]) == [low, high]
    copy = ChannelMonitor.from_bytes(mon.to_bytes())
    assert copy.to_bytes() == mon.to_bytes()
    # a removed subscription's filter goes with it; ck still runs on the restored monitor
    for m in (mon, copy):
        m.apply_subscriptions([unsub("b3")])
        assert m._filters_of(tuple(sorted(m.subscribers))) and "b3" not in m._filters
    assert mon.step(t + 1) == copy.step(t + 1)
