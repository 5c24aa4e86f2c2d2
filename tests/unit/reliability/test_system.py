"""The compiled network (``routing.reliability.system``): validation and filter propagation.

What is checked: the test matcher reads docs/reference/filters.md conjunctions; invalid systems are rejected with a
message that names the element, what is wrong and what would be valid; events cross only the links
with a matching subscriber downstream (the paper's §4.1), observed in the simulator's telemetry.
Both directions of one broker pair are no cycle (``test_simulator.py``, with the solver parity).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from routing.reliability.simulator import simulate
from routing.reliability.system import compile_system
from tests.unit.reliability.spec_systems import det, expo, link, matcher, valid_system


def test_the_test_matcher_reads_spec_filters() -> None:
    event = {"symbol": "IBM", "price": 100.5, "volume": 2000, "region": "eu"}
    assert matcher("symbol = 'IBM' and price < 120.5 and volume >= 1000", event)
    assert matcher("region in ('eu', 'us') and price between 10 and 200", event)
    assert not matcher("price < 'abc'", event)  # a kind mismatch is false
    assert not matcher("missing != 3", event)  # so is a missing attribute
    with pytest.raises(ValueError, match="expected"):
        matcher("price <", event)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _broken(change: Any) -> dict[str, Any]:
    system = valid_system()
    change(system)
    return system


@pytest.mark.parametrize(
    ("system", "message"),
    [
        (
            _broken(lambda s: s["links"].append(link("b1", "b7"))),
            r"links\[3\]: 'to' names no broker or subscriber \('b7'\)",
        ),
        (_broken(lambda s: s["links"].append(link("q", "b1"))), r"links\[3\]: 'from' names no publisher or broker"),
        (
            _broken(
                lambda s: (
                    s.update(brokers=[*s["brokers"], {"id": "b3", "service_ms": expo(1.0)}])
                    or s["links"].extend([link("b2", "b3"), link("b3", "b1")])
                )
            ),
            r"cycle b1 -> b2 -> b3 -> b1",
        ),
        (
            _broken(lambda s: s["publishers"][0]["content"].append({"p": 0.5, "lifetime_ms": 1, "attributes": {}})),
            r"publishers\[0\] \('p1'\): content p values must sum to 1 \(got 1.5\)",
        ),
        (
            _broken(lambda s: s["subscribers"][0].update(filter="t = = 1")),
            r"subscribers\[0\] \('s1'\): filter 't = = 1' rejected: ",
        ),
        (
            _broken(lambda s: s["links"].pop(0)),
            r"publishers\[0\] \('p1'\): needs exactly one link, to its home broker 'b1'",
        ),
        (
            _broken(lambda s: s["links"].pop(2)),
            r"subscribers\[0\] \('s1'\): needs exactly one link, from its home broker",
        ),
        (
            _broken(lambda s: s["links"].append(link("b1", "b2"))),
            r"links\[3\]: duplicate link b1 -> b2 \(first at links\[1\]\)",
        ),
        (
            _broken(lambda s: s["subscribers"].append({"id": "b1", "broker": "b1", "filter": "t = 1"})),
            "already used by a broker",
        ),
        (_broken(lambda s: s["links"][1].update(reliability=1.5)), r"links\[1\]: 'reliability' must be in \[0, 1\]"),
        (
            _broken(lambda s: s["links"][1].update(delay_ms={"kind": "normal"})),
            r"links\[1\] \(b1 -> b2\).delay_ms: unknown kind",
        ),
        (
            _broken(lambda s: s["publishers"][0].update(broker="b9")),
            r"'broker' names no broker \('b9'\); known: b1, b2",
        ),
        (_broken(lambda s: s.update(extra=[])), "unknown section"),
        (_broken(lambda s: s["publishers"][0].update(interarrival_ms=det(0))), "mean > 0"),
    ],
)
def test_invalid_systems_are_rejected_with_a_clear_message(system: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compile_system(system, matcher)


# --------------------------------------------------------------------------------------------
# Filter propagation
# --------------------------------------------------------------------------------------------


def test_events_cross_only_links_with_matching_subscribers_downstream() -> None:
    """b1 -> b2 -> b3; s2 at b2 wants t = 1, s3 at b3 wants t = 2; t = 3 interests nobody."""
    system = {
        "brokers": [{"id": b, "service_ms": expo(1.0)} for b in ("b1", "b2", "b3")],
        "links": [
            link("p1", "b1", 1.0, expo(1.0)),
            link("b1", "b2", 1.0, expo(1.0)),
            link("b2", "b3", 1.0, expo(1.0)),
            link("b2", "s2", 1.0, expo(1.0)),
            link("b3", "s3", 1.0, expo(1.0)),
        ],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": expo(10.0),
                "content": [{"p": 1 / 3, "lifetime_ms": 100.0, "attributes": {"t": t}} for t in (1, 2, 3)],
            }
        ],
        "subscribers": [
            {"id": "s2", "broker": "b2", "filter": "t = 1"},
            {"id": "s3", "broker": "b3", "filter": "t = 2"},
        ],
    }
    result = simulate(system, 60.0, 8, matcher, collect_telemetry=True)
    telemetry = result.telemetry
    assert telemetry is not None
    topic = np.array([1, 2, 3])[telemetry.events.content]
    crossing = {
        f"{telemetry.link_from[k]}->{telemetry.link_to[k]}": set(
            topic[telemetry.links.event[telemetry.links.link == k]].tolist()
        )
        for k in range(len(telemetry.link_from))
    }
    assert crossing == {"p1->b1": {1, 2, 3}, "b1->b2": {1, 2}, "b2->b3": {2}, "b2->s2": {1}, "b3->s3": {2}}
    rates = {b: s.arrival_rate_per_s for b, s in result.brokers.items()}
    assert rates["b1"] == pytest.approx(100.0, rel=0.03)
    assert rates["b2"] == pytest.approx(200.0 / 3, rel=0.03)
    assert rates["b3"] == pytest.approx(100.0 / 3, rel=0.04)
    assert result.subscribers["s2"].reliability == 1.0  # lifetime 100 ms: nothing is late here
    assert result.subscribers["s3"].matching == pytest.approx(60.0 * 100 / 3, rel=0.05)
