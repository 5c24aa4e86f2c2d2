"""``streaming.subscription_follower``'s pure part: a raw subscriptions-topic record -> what
``plan_change`` does with it, the same decision the exact mode's driver makes from the JVM's
decoding (tests/integration/test_matching_direct.py runs the follower against a broker)."""

from __future__ import annotations

import pickle

from infra.connection import KafkaConnection
from routing.matching.table import plan_change
from schemas.codec import codec_for
from streaming.subscription_follower import FollowSpec, SubscriptionFollower, follower_for, subscription_record

SUB = codec_for("Subscription")


def _sub(sid: str, filt: str | None = None, **extra: object) -> bytes:
    return SUB.encode({"type": "subscribe", "subscription_id": sid, "subscriber_id": "u1", "filter": filt, **extra})


def test_each_kind_of_record_plans_as_documented() -> None:
    cases = [
        ((b"s1", _sub("s1", "price < 120")), ("s1", "price < 120"), None),
        ((b"s1", None), ("s1", None), None),  # a tombstone removes
        ((b"s1", SUB.encode({"type": "unsubscribe", "subscription_id": "s1"})), ("s1", None), None),
        ((b"c1", _sub("c1", composite='{"op": "or", "children": ["a = 1"]}')), ("c1", None), None),
        ((b"b1", _sub("b1", "price <")), None, "invalid_filter"),
        ((b"b2", _sub("b2", "price < 1", subscriber_id=None)), None, "invalid_value"),
        ((b"b3", b"\x7bnot avro"), None, "bad_framing"),
        ((b"\xff", None), None, None),  # a tombstone whose key is not UTF-8 names nothing
    ]
    for (key, value), change, code in cases:
        outcome = plan_change(subscription_record(key, value))
        assert outcome.change == change, key
        assert (outcome.rejection or (None,))[0] == code, key
    reason = plan_change(subscription_record(b"b1", _sub("b1", "price <"))).rejection
    assert reason is not None and reason[1].startswith("filter at position 7: expected a literal")


def test_a_spec_travels_to_the_workers_and_names_one_follower() -> None:
    spec = FollowSpec(KafkaConnection("127.0.0.1:1"), "t.siftstream.subscriptions.v1")
    assert pickle.loads(pickle.dumps(spec)) == spec
    follower = follower_for(spec)
    assert follower_for(FollowSpec(KafkaConnection("127.0.0.1:1"), "t.siftstream.subscriptions.v1")) is follower
    assert follower.offsets == {} and len(follower.index) == 0  # nothing read until catch_up


def test_only_a_workers_follower_freezes_the_heap_after_its_first_load() -> None:
    """A follower made outside a worker (a test, a tool) leaves the collector as it found it; the
    worker's own (``follower_for``) takes its first load out of later collections."""
    import gc

    spec = FollowSpec(KafkaConnection("127.0.0.1:1"), "t2.siftstream.subscriptions.v1")
    follower = SubscriptionFollower(spec)
    before = gc.get_freeze_count()
    follower._apply([subscription_record(b"s1", _sub("s1", "price < 120"))], first=True)
    assert gc.get_freeze_count() == before and len(follower.index) == 1
    assert follower_for(spec).freeze_first_build and not follower.freeze_first_build
