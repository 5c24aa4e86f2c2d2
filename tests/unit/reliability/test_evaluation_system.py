"""The paper's evaluation system (``routing.reliability.evaluation_system``): Table 3's shape, and a
performance print of the simulator on it (no timing assert: docs/conventions.md §10)."""

from __future__ import annotations

import math
import time

import pytest

from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.simulator import simulate
from routing.reliability.system import compile_system
from tests.unit.reliability.spec_systems import matcher, parse_conjunction


def test_reliability_tree_system_follows_table_3() -> None:
    system = reliability_tree_system(7)
    assert system == reliability_tree_system(7) and system != reliability_tree_system(8)
    brokers, links = system["brokers"], system["links"]
    publishers, subscribers = system["publishers"], system["subscribers"]
    assert isinstance(brokers, list) and isinstance(links, list)
    assert isinstance(publishers, list) and isinstance(subscribers, list)
    assert (len(brokers), len(publishers), len(subscribers)) == (20, 8, 100)
    assert len(links) == 2 * 19 + 8 + 100  # a tree, both directions, plus access links
    assert {b["service_ms"]["mean"] for b in brokers} == {100.0}  # 1 ms x 100 stored subscriptions
    assert {p["interarrival_ms"]["mean"] for p in publishers} == {1000.0}
    names = {name for p in publishers for c in p["content"] for name in c["attributes"]}
    assert names <= {"topic"} | {f"a{i}" for i in range(1, 21)}
    for p in publishers:
        assert math.fsum(c["p"] for c in p["content"]) == pytest.approx(1.0)
        assert {c["lifetime_ms"] for c in p["content"]} == {1000.0}
    for s in subscribers:
        assert s["filter"].startswith("topic = ")
        parse_conjunction(s["filter"])
    network = compile_system(system, matcher)
    assert max(len(c) for c in network.components) > 1  # events flow both ways: cyclic queues
    assert network.match.any(axis=0).mean() > 0.9  # nearly everybody can receive something
    uniform = reliability_tree_system(7, publishing="deterministic", matching="uniform")
    assert uniform["brokers"][0]["service_ms"] == {"kind": "uniform", "low": 0.0, "high": 200.0}


def test_tree_performance_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints event-hops/s for the 20-broker tree (no timing assert; bench/ owns timings)."""
    system = reliability_tree_system(1)
    start = time.perf_counter()
    result = simulate(system, 300.0, 1, matcher)
    elapsed = time.perf_counter() - start
    rhos = [b.rho for b in result.brokers.values()]
    assert min(rhos) > 0.1 and max(rhos) < 0.9  # docs/reference/reliability-model.md §8.4: rho spans about 0.1-0.8
    with capsys.disabled():
        print(
            f"\n20-broker tree, 300 s (+{result.warmup_s:g} s warm-up/cool-down): {result.event_hops} event-hops "
            f"in {elapsed:.2f} s = {result.event_hops / elapsed:,.0f} event-hops/s ({result.sweeps} sweeps)"
        )
