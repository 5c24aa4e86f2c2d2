"""The client's records and bounded memory, without a broker (streaming.client; the protocol is
docs/reference/delivery.md, the broker tests are tests/integration/test_client.py)."""

from __future__ import annotations

import math

import pytest

from routing.matching.language import FilterError
from schemas.codec import codec_for, decode
from streaming.client import ClientCounters, RecentIds, event_record, subscription_record


def test_an_event_record_round_trips_through_the_codec() -> None:
    record = event_record(
        {"symbol": "IBM", "price": 101.5, "volume": 7, "urgent": True},
        "p1",
        event_id="e1",
        published_at=3,
        lifetime_ms=0,
    )
    assert decode(codec_for("Event").encode(record)) == ("Event", record)


@pytest.mark.parametrize(
    ("attributes", "kwargs", "reason"),
    [
        ({"bad name": 1}, {}, r"attributes keys must match"),
        ({"p": math.inf}, {}, r"attributes.doubles must hold only finite numbers"),
        ({"p": None}, {}, r"attribute 'p' has a NoneType"),
        ({"p": {"q": 1}}, {}, r"attribute 'p' has a dict"),
        ([("p", 1)], {}, r"attributes must be an object"),
        ({"p": 1}, {"lifetime_ms": -1}, r"lifetime_ms must be >= 0 \(got -1\)"),
        ({"p": 1}, {"published_at": 1.5}, r"published_at must be an integer"),
        ({"p": 1}, {"published_at": True}, r"published_at must be an integer"),
        ({"p": 1}, {"event_id": ""}, r"event_id must be a non-empty string"),
        ({"p": 1}, {"event_id": 7}, r"event_id must be a string"),
    ],
)
def test_a_bad_event_is_refused_with_its_reason(attributes: object, kwargs: dict[str, object], reason: str) -> None:
    args: dict[str, object] = {"event_id": "e1", "published_at": 1, "lifetime_ms": 10, **kwargs}
    with pytest.raises(ValueError, match=reason):
        event_record(attributes, "p1", **args)  # type: ignore[arg-type]


def test_a_subscription_record_is_checked_before_it_is_written() -> None:
    record = subscription_record("s1", "u1", "price < 3", broker="b1", deadline_ms=5, issued_at=9)
    assert decode(codec_for("Subscription").encode(record))[1] == record
    with pytest.raises(FilterError) as caught:
        subscription_record("s1", "u1", "price <")
    assert caught.value.position == 7
    with pytest.raises(ValueError, match=r"deadline_ms must be >= 0"):
        subscription_record("s1", "u1", "price < 3", deadline_ms=-1)
    with pytest.raises(ValueError, match=r"subscription_id must be a non-empty string"):
        subscription_record("", "u1", "price < 3")


def test_recent_ids_forget_the_oldest_first() -> None:
    ids = RecentIds(3)
    assert [ids.add(x) for x in "abcab"] == [True, True, True, False, False]
    assert ids.add("d") and len(ids) == 3  # forgets a
    assert ids.add("a") and not ids.add("d")
    with pytest.raises(ValueError):
        RecentIds(0)


def test_counters_report_the_waste_ratio() -> None:
    counters = ClientCounters(received=4, yielded=1, dropped_by_filter=3)
    assert counters.as_dict()["waste_ratio"] == 0.75
    assert ClientCounters().waste_ratio is None
