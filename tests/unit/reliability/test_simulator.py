"""The reliability simulator (``routing.reliability.simulator``).

What is checked, all in seconds and with fixed seeds:

- single queues against closed forms: M/M/1, M/D/1 (Pollaczek-Khinchine), D/M/1 (the GI/M/1
  root), utilisation, and the queue length seen by arrivals (PASTA);
- the vectorised solver against the event-driven reference on random trees and DAGs: identical
  delivery sets and times, bit for bit, whatever the relaxation window;
- delivery against filter semantics (every matching event once, never a non-matching one), link
  loss against 1 - reliability, determinism per seed, the telemetry tables, the docs/reference/qos-predict.md output
  and the run parameters.

The matcher and the system builders are ``tests/unit/reliability/spec_systems.py``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.simulator import (
    TICKS_PER_MS,
    draw_inputs,
    fifo_departures,
    measure,
    simulate,
    solve,
    solve_reference,
    to_spec_output,
)
from routing.reliability.system import compile_system
from routing.stats.distributions import parse_distribution
from tests.unit.reliability.spec_systems import (
    det,
    expo,
    link,
    matcher,
    random_system,
    single_queue,
    valid_system,
)

PARITY = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------------------------
# Single queues against closed forms
# --------------------------------------------------------------------------------------------


def _single(interarrival: dict[str, Any], service: dict[str, Any], customers: int, seed: int) -> Any:
    mean_gap = parse_distribution(interarrival).mean
    seconds = customers * mean_gap / 1000.0
    return simulate(single_queue(interarrival, service), seconds, seed, matcher, warmup_s=0.05 * seconds).brokers["b1"]


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_mean_wait_and_utilisation(rho: float) -> None:
    """M/M/1: E[W] = rho tau / (1 - rho) (Kleinrock vol. 1 §3.2; the paper's eq. 5)."""
    tau = 1.0
    b1 = _single(expo(tau / rho), expo(tau), 1_000_000, seed=11)
    assert b1.mean_wait_ms == pytest.approx(rho * tau / (1 - rho), rel=0.04)
    assert b1.rho == pytest.approx(rho, rel=0.01)
    assert b1.arrival_rate_per_s == pytest.approx(1000.0 * rho / tau, rel=0.01)
    assert b1.mean_service_ms == pytest.approx(tau, rel=0.01)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_is_pollaczek_khinchine(rho: float) -> None:
    """M/G/1: E[W] = rho tau (1 + c_s^2) / (2 (1 - rho)), c_s^2 = 0 for deterministic service."""
    tau = 2.0
    b1 = _single(expo(tau / rho), det(tau), 600_000, seed=12)
    assert b1.mean_wait_ms == pytest.approx(rho * tau / (2 * (1 - rho)), rel=0.04)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_dm1_mean_wait_uses_the_gi_m_1_root(rho: float) -> None:
    """D/M/1: sigma = exp(-(1 - sigma)/rho) on (0, 1), E[W] = sigma tau / (1 - sigma)
    (GI/M/1, Kleinrock vol. 1 §6.4; docs/reference/reliability-model.md §2.2)."""
    tau = 1.0
    sigma = optimize.brentq(lambda s: s - math.exp(-(1 - s) / rho), 1e-12, 1 - 1e-12)
    b1 = _single(det(tau / rho), expo(tau), 600_000, seed=13)
    assert b1.mean_wait_ms == pytest.approx(sigma * tau / (1 - sigma), rel=0.04)


def test_mm1_arrivals_see_time_averages() -> None:
    """PASTA: the mean queue length an M/M/1 arrival sees is L_q = rho^2 / (1 - rho)."""
    rho, tau = 0.7, 1.0
    system = single_queue(expo(tau / rho), expo(tau))
    result = simulate(system, 300.0, 21, matcher, collect_telemetry=True, warmup_s=10.0)
    telemetry = result.telemetry
    assert telemetry is not None
    samples = telemetry.brokers
    counted = (samples.arrived_at_ms >= 0) & (samples.arrived_at_ms < 300_000.0)
    assert samples.queue_length[counted].mean() == pytest.approx(rho**2 / (1 - rho), rel=0.05)
    assert samples.wait_ms[counted].mean() == pytest.approx(result.brokers["b1"].mean_wait_ms)


def test_fifo_departures_is_the_lindley_recursion() -> None:
    rng = np.random.default_rng(3)
    arrivals = np.sort(rng.integers(0, 10_000, 500))
    services = rng.integers(0, 60, 500)
    expected, last = [], -(10**9)
    for a, s in zip(arrivals.tolist(), services.tolist(), strict=True):
        last = max(a, last) + s
        expected.append(last)
    assert fifo_departures(arrivals, services).tolist() == expected


# --------------------------------------------------------------------------------------------
# The vectorised solver against the event-driven reference
# --------------------------------------------------------------------------------------------


def _same_schedule(a: Any, b: Any) -> None:
    assert np.array_equal(a.sent, b.sent)
    assert np.array_equal(a.arrived, b.arrived)
    assert np.array_equal(a.sent_at[a.sent], b.sent_at[b.sent])
    assert np.array_equal(a.arrived_at[a.arrived], b.arrived_at[b.arrived])
    visits = a.arrived & a.at_broker
    assert np.array_equal(a.departed_at[visits], b.departed_at[visits])


@PARITY
@given(
    seed=st.integers(0, 2**32 - 1), shape=st.sampled_from(["tree", "both", "dag"]), window=st.sampled_from([1, 5, 512])
)
def test_vectorised_solver_equals_event_driven_reference(seed: int, shape: str, window: int) -> None:
    network = compile_system(random_system(seed, shape=shape), matcher)
    draws = draw_inputs(network, seconds=0.3, seed=seed, warmup_s=0.02)
    reference = solve_reference(network, draws)
    fast = solve(network, draws, window_rows=window)
    _same_schedule(fast, reference)
    assert not fast.fallback


def test_parity_holds_on_cyclic_components_under_load() -> None:
    """Bidirectional trees make cyclic broker components: the relaxation path, loaded."""
    cyclic = 0
    for seed in range(200):
        network = compile_system(random_system(seed, shape="both"), matcher)
        if max(map(len, network.components)) < 3:
            continue
        cyclic += 1
        draws = draw_inputs(network, seconds=2.0, seed=seed)
        _same_schedule(solve(network, draws, window_rows=16), solve_reference(network, draws))
        if cyclic == 6:
            break
    assert cyclic == 6


def test_a_window_that_does_not_settle_falls_back_to_the_event_loop() -> None:
    network = compile_system(reliability_tree_system(4, brokers=6, subscribers=12, publishers=3), matcher)
    assert any(len(c) > 1 for c in network.components)
    draws = draw_inputs(network, seconds=60.0, seed=4)
    fallen = solve(network, draws, max_sweeps=1)
    assert fallen.fallback
    _same_schedule(fallen, solve_reference(network, draws))
    result = measure(network, draws, fallen)
    assert any("event-driven loop" in w for w in result.warnings)


def test_both_directions_of_a_broker_pair_are_no_cycle_but_a_cyclic_component() -> None:
    """Events never go back over the link they came in on (the paper's up(l), eq. 2), so b1 <-> b2
    is valid; with traffic both ways the two queues form one component for the relaxation."""
    system = valid_system()
    system["links"] += [link("b2", "b1"), link("p2", "b2"), link("b1", "s2")]
    system["publishers"].append({**system["publishers"][0], "id": "p2", "broker": "b2"})
    system["subscribers"].append({"id": "s2", "broker": "b1", "filter": "t = 1"})
    network = compile_system(system, matcher)
    assert network.components == ((0, 1),)
    draws = draw_inputs(network, 5.0, 1)
    _same_schedule(solve(network, draws), solve_reference(network, draws))


# --------------------------------------------------------------------------------------------
# Routing, loss, determinism
# --------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_perfect_links_deliver_each_matching_event_exactly_once(seed: int) -> None:
    """Reliability 1 on a tree: every event reaches every subscriber it matches once, and no other
    (docs/reference/qos-predict.md: forwarded once per link on which some subscription downstream matches)."""
    system = random_system(seed, shape="both", reliable=True)
    result = simulate(system, 0.5, seed, matcher, collect_telemetry=True, warmup_s=0.0)
    telemetry = result.telemetry
    assert telemetry is not None
    publishers = {p["id"]: p for p in system["publishers"]}
    subscribers = system["subscribers"]
    events = telemetry.events
    expected = np.array(
        [
            [
                matcher(s["filter"], publishers[telemetry.publisher_ids[p]]["content"][c]["attributes"])
                for s in subscribers
            ]
            for p, c in zip(events.publisher.tolist(), events.content.tolist(), strict=True)
        ],
        dtype=np.int64,
    ).reshape(len(events.publisher), len(subscribers))
    got = np.zeros_like(expected)
    np.add.at(got, (telemetry.receipts.event, telemetry.receipts.subscriber), 1)
    assert np.array_equal(got, expected)
    for stats in result.subscribers.values():
        assert stats.delivered == stats.matching
        assert stats.on_time <= stats.delivered
    # and no event crosses a link twice
    pairs = telemetry.links.link * (len(events.publisher) + 1) + telemetry.links.event
    assert len(np.unique(pairs)) == len(pairs)


def test_losses_match_link_reliability_and_compound_along_the_path() -> None:
    """Three links of reliability 0.9 after a perfect one: R_s = 0.9^3 with an endless lifetime,
    and each link loses about 10% of what it carries."""
    system = {
        "brokers": [{"id": b, "service_ms": det(0.1)} for b in ("b1", "b2")],
        "links": [link("p1", "b1"), link("b1", "b2", 0.9, expo(1.0)), link("b2", "s1", 0.9), link("b1", "s0", 0.9)],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": expo(1.0),
                "content": [{"p": 1.0, "lifetime_ms": 1e9, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [
            {"id": "s1", "broker": "b2", "filter": "t = 1"},
            {"id": "s0", "broker": "b1", "filter": "t = 1"},
        ],
    }
    result = simulate(system, 100.0, 5, matcher, collect_telemetry=True)
    s1, s0 = result.subscribers["s1"], result.subscribers["s0"]
    for stats, expected in ((s1, 0.81), (s0, 0.9)):
        se = math.sqrt(expected * (1 - expected) / stats.matching)
        assert abs(stats.reliability - expected) < 4 * se
    telemetry = result.telemetry
    assert telemetry is not None
    for k in range(1, 4):
        lost = telemetry.links.lost[telemetry.links.link == k]
        se = math.sqrt(0.09 / len(lost))
        assert abs(lost.mean() - 0.1) < 4 * se
    assert telemetry.links.lost[telemetry.links.link == 0].sum() == 0


def test_same_seed_same_result_and_another_seed_differs() -> None:
    system = reliability_tree_system(2, brokers=8, subscribers=20, publishers=4)
    one = simulate(system, 30.0, 99, matcher, collect_telemetry=True)
    two = simulate(system, 30.0, 99, matcher, collect_telemetry=True)
    other = simulate(system, 30.0, 100, matcher)
    assert json.dumps(to_spec_output(one)) == json.dumps(to_spec_output(two))
    assert one.telemetry is not None and two.telemetry is not None
    for table in ("links", "brokers", "receipts", "events"):
        a, b = getattr(one.telemetry, table), getattr(two.telemetry, table)
        for column in vars(a):
            assert np.array_equal(getattr(a, column), getattr(b, column), equal_nan=True), (table, column)
    assert json.dumps(to_spec_output(other)) != json.dumps(to_spec_output(one))


def test_telemetry_tables_are_consistent() -> None:
    system = random_system(17, shape="tree")
    result = simulate(system, 1.0, 17, matcher, collect_telemetry=True)
    t = result.telemetry
    assert t is not None
    links = t.links
    assert len(links.link) == result.event_hops
    for k in range(len(t.link_from)):  # per-link sequence numbers 0, 1, 2, ... in sending order
        mine = links.link == k
        assert np.array_equal(links.seq[mine], np.arange(mine.sum()))
        assert np.all(np.diff(links.sent_at_ms[mine]) >= 0)
    assert np.array_equal(np.isnan(links.delay_ms), links.lost)
    assert (t.brokers.wait_ms >= 0).all() and (t.brokers.queue_length >= 0).all()
    assert (t.brokers.service_ms >= 0).all()
    assert np.all(np.diff(t.receipts.received_at_ms) >= 0)
    published = t.events.published_at_ms[t.receipts.event]
    assert (t.receipts.received_at_ms >= published).all()
    assert np.all(np.diff(t.events.published_at_ms) >= 0)
    assert TICKS_PER_MS == 1_000_000


# --------------------------------------------------------------------------------------------
# Output and run parameters
# --------------------------------------------------------------------------------------------


def test_spec_output_has_exactly_the_spec_shape() -> None:
    system = random_system(3, shape="tree")
    system["subscribers"].append({"id": "nobody", "broker": "b0", "filter": "t = 9"})
    system["links"].append(link("b0", "nobody"))
    out = to_spec_output(simulate(system, 1.0, 3, matcher))
    json.dumps(out, allow_nan=False)
    assert set(out) == {"model", "subscribers", "brokers", "warnings"} and out["model"] == "simulation"
    subscribers = out["subscribers"]
    assert isinstance(subscribers, dict)
    for s in subscribers.values():
        assert set(s) == {"reliability", "reliability_low", "reliability_high", "mean_delay_ms", "p95_delay_ms"}
    assert subscribers["nobody"]["reliability"] is None
    assert any(w.startswith("nobody: no matching event") for w in out["warnings"])
    brokers = out["brokers"]
    assert isinstance(brokers, dict)
    for b in brokers.values():
        assert set(b) == {"arrival_rate_per_s", "rho", "mean_wait_ms"}


def test_bad_run_parameters_are_rejected() -> None:
    network = compile_system(valid_system(), matcher)
    with pytest.raises(ValueError, match="seconds must be a finite number > 0"):
        draw_inputs(network, 0.0, 1)
    with pytest.raises(ValueError, match="warmup_s must be"):
        draw_inputs(network, 1.0, 1, warmup_s=-1.0)
