"""The scalable reliability predictor (``routing.reliability.prediction.predict``) against its oracles.

- ``predict`` against ``predict_reference`` (``routing.reliability.reference_predictor``, the
  readable hop-by-hop implementation on the dense ``Network``): the same R'_s, interval, mean
  delay, p95, broker loads and blame, to rounding, on generated trees, DAGs (several paths to
  one broker), lossy links, several lifetimes and overloaded brokers (docs/conventions.md §6);
- R'_s against a per-path evaluation written here: for every (subscriber, content entry) that
  matches, the route from the publisher's home broker found by breadth-first search, its link
  and broker delays convolved on a grid of the test's own;
- the bulk matching (``FilterMatcher.match_many``) against the matcher called pair by pair, and
  the route tree against the dense routes the simulator uses.

The p95 search's other paths are checked in ``test_delay_quantiles.py``, the wait pmfs in
``test_delay_distributions.py``, the cdf table in ``test_grid.py``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.reliability import prediction
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.grid import Grid
from routing.reliability.prediction import Prediction, compile_prediction, filter_matcher, predict
from routing.reliability.queueing import WaitModel, conditional_delay_scv
from routing.reliability.reference_predictor import predict_reference
from routing.reliability.system import (
    compile_routes,
    compile_system,
    match_content,
    validate_system,
)
from routing.stats.distributions import parse_distribution
from tests.unit.reliability.prediction_systems import assert_same_prediction, diamond

PARITY = settings(max_examples=25, deadline=None)


# ------------------------------------------------------------------ against the reference


@PARITY
@given(
    seed=st.integers(0, 10_000),
    brokers=st.integers(1, 7),
    subscribers=st.integers(1, 25),
    publishers=st.integers(1, 3),
    publishing=st.sampled_from(["exponential", "deterministic", "uniform"]),
    matching=st.sampled_from(["exponential", "uniform"]),
    lossy=st.booleans(),
)
def test_fast_path_equals_the_reference_on_random_trees(
    seed: int, brokers: int, subscribers: int, publishers: int, publishing: str, matching: str, lossy: bool
) -> None:
    system = reliability_tree_system(
        seed,
        brokers=brokers,
        subscribers=subscribers,
        publishers=publishers,
        content_entries=6,
        publishing=publishing,
        matching=matching,
        ms_per_subscription=60.0 / subscribers,  # E[S] = 60 ms: loaded, mostly stable
        link_reliability=(0.8, 1.0) if lossy else (1.0, 1.0),
    )
    for model in ("gg1", "mm1"):
        assert_same_prediction(predict(system, model=model), predict_reference(system, model=model))


@pytest.mark.parametrize("superposition", ["auto", "asymptotic", "hybrid"])
@pytest.mark.parametrize("model", ["gg1", "mm1"])
def test_fast_path_equals_the_reference_with_several_paths_and_lifetimes(model: str, superposition: str) -> None:
    if model == "mm1" and superposition != "auto":
        return
    system = diamond()
    fast = predict(system, model=model, superposition=superposition)
    assert_same_prediction(fast, predict_reference(system, model=model, superposition=superposition))
    assert fast.subscribers["s1"].reliability is not None


def test_fast_path_equals_the_reference_behind_an_overloaded_broker() -> None:
    system = diamond(service_b4=40.0)  # b4 gets ~0.04 events/ms: rho > 1
    fast = predict(system)
    assert fast.brokers["b4"].rho > 1.0
    assert fast.subscribers["s1"].reliability == 0.0 and fast.subscribers["s1"].p95_delay_ms is None
    assert_same_prediction(fast, predict_reference(system))


def test_compiled_and_dense_inputs_give_the_same_prediction() -> None:
    system = diamond()
    compiled = compile_prediction(system)
    network = compile_system(system, filter_matcher())
    by_system = predict(system)
    assert predict(system, compiled=compiled) == by_system
    assert_same_prediction(predict({}, network=network), by_system)


# ------------------------------------------------------------------ against a per-path evaluation


def routes(system: dict[str, Any]) -> dict[str, list[list[dict[str, Any]]]]:
    """Per publisher, its events' path (as link documents) to each broker, by breadth-first
    search over links that never go straight back (a tree overlay: one path per broker)."""
    out: dict[str, list[list[dict[str, Any]]]] = {}
    brokers = {b["id"] for b in system["brokers"]}
    for p in system["publishers"]:
        first = next(link for link in system["links"] if link["from"] == p["id"])
        queue = deque([[first]])
        found: list[list[dict[str, Any]]] = []
        while queue:
            path = queue.popleft()
            found.append(path)
            last = path[-1]
            for link in system["links"]:
                if link["from"] == last["to"] and link["to"] in brokers and link["to"] != last["from"]:
                    queue.append([*path, link])
        out[p["id"]] = found
    return out


def per_path_reliability(system: dict[str, Any], prediction: Prediction, grid: Grid) -> dict[str, float]:
    """R'_s the long way: every matching (content entry, subscriber) pair, its one route, the
    delay pmfs convolved along it (the broker waits as predicted), on-time mass times reach."""
    matcher = filter_matcher()
    service = {b["id"]: parse_distribution(b["service_ms"]) for b in system["brokers"]}

    def broker_delay(bid: str) -> np.ndarray:
        b = prediction.brokers[bid]
        dist = service[bid]
        cd2 = conditional_delay_scv(min(b.rho, 0.999), b.cs2, dist.third_moment / dist.mean**3)
        wait = WaitModel(b.mean_wait_ms, b.delay_probability, cd2)
        w_pmf = grid.pmf_of_cdf(lambda x: 1.0 - wait.survival(x))
        return grid.convolve(w_pmf, grid.pmf(dist))

    delay = {bid: broker_delay(bid) for bid in service}
    out: dict[str, float] = {}
    paths = routes(system)
    for s in system["subscribers"]:
        sub_link = next(link for link in system["links"] if link["to"] == s["id"])
        matching = on_time = 0.0
        for p in system["publishers"]:
            path = next((q for q in paths[p["id"]] if q[-1]["to"] == s["broker"]), None)
            rate = 1.0 / parse_distribution(p["interarrival_ms"]).mean
            for entry in p["content"]:
                if not matcher(s["filter"], entry["attributes"]):
                    continue
                matching += rate * entry["p"]
                if path is None:
                    continue
                pmf = np.zeros(grid.n)
                pmf[0] = 1.0
                reach = 1.0
                for link in [*path, sub_link]:
                    if link["from"] in delay:
                        pmf = grid.convolve(pmf, delay[link["from"]])
                    pmf = grid.convolve(pmf, grid.pmf(parse_distribution(link["delay_ms"])))
                    reach *= link["reliability"]
                on_time += rate * entry["p"] * reach * grid.cdf_at(pmf, entry["lifetime_ms"])
        out[s["id"]] = on_time / matching if matching > 0 else math.nan
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reliability_equals_a_per_path_evaluation(seed: int) -> None:
    system = reliability_tree_system(
        seed, brokers=5, subscribers=12, publishers=3, content_entries=12, ms_per_subscription=4.0, lifetime_ms=400.0
    )
    prediction = predict(system)
    brute = per_path_reliability(system, prediction, Grid(step=0.25, n=4096))
    for sid, expected in brute.items():
        got = prediction.subscribers[sid].reliability
        if math.isnan(expected):
            assert got is None
        else:
            assert got == pytest.approx(expected, abs=1e-4), sid  # two grids: discretisation only


# ------------------------------------------------------------------ matching and routes


def test_bulk_matching_equals_the_matcher_pair_by_pair() -> None:
    system = reliability_tree_system(11, brokers=3, subscribers=200)
    texts = list(dict.fromkeys(s["filter"] for s in system["subscribers"]))
    texts += ["t = 'a'", "flag = true", "x between 1 and 2 and t != 'b'", "missing > 3"]
    events = [c["attributes"] for p in system["publishers"] for c in p["content"]]
    events += [{"t": "a", "x": 1.5}, {"flag": True, "t": "b", "x": 2}, {"x": 1}, {}]
    matcher = filter_matcher()
    expected = [[matcher(text, event) for text in texts] for event in events]
    assert matcher.match_many(texts, events).tolist() == expected


def test_a_filter_that_does_not_parse_is_rejected_by_name() -> None:
    system = diamond()
    system["subscribers"][1]["filter"] = "t = = 2"
    with pytest.raises(ValueError, match=r"subscribers\[1\] \('s2'\): filter 't = = 2' rejected: "):
        predict(system)


@pytest.mark.parametrize("tests_per_filter", [0, 300])  # an index pass, a predicate table
def test_both_bulk_matching_paths_agree(monkeypatch: pytest.MonkeyPatch, tests_per_filter: int) -> None:
    monkeypatch.setattr(prediction, "_PREDICATE_TESTS_PER_FILTER", tests_per_filter)
    test_bulk_matching_equals_the_matcher_pair_by_pair()


def test_bulk_and_pairwise_matching_give_the_same_table() -> None:
    system = diamond()
    overlay = validate_system(system, filter_matcher())
    bulk = match_content(overlay, filter_matcher())
    pairwise = match_content(overlay, lambda text, attributes: filter_matcher()(text, attributes))
    assert np.array_equal(bulk.dense(), pairwise.dense())


def hop_paths(network: Any, k: int) -> set[tuple[int, ...]]:
    """Content key k's route in the dense network, as the link path of every hop."""
    start, end = network.route_offset[k], network.route_offset[k + 1]
    paths: list[tuple[int, ...]] = []
    for h in range(start, end):
        parent = network.route_parent[h]
        prefix = paths[parent] if parent >= 0 else ()
        paths.append((*prefix, int(network.route_link[h])))
    return set(paths)


def tree_paths(overlay: Any, matching: Any, tree: Any, k: int) -> set[tuple[int, ...]]:
    """Content key k's route read off the route tree: its nodes and its matching leaves."""
    node_path: list[tuple[int, ...]] = []
    for n in range(len(tree.node_link)):
        parent = tree.node_parent[n]
        node_path.append((*(node_path[parent] if parent >= 0 else ()), int(tree.node_link[n])))
    out = set()
    for n in range(len(tree.node_link)):
        keys = tree.node_key[tree.node_key_offset[n] : tree.node_key_offset[n + 1]]
        if k in keys:
            out.add(node_path[n])
    match = matching.dense()
    for node, s in zip(tree.leaf_node, tree.leaf_subscriber, strict=True):
        if match[k, s] and tree.node_publisher[node] == overlay.content_publisher[k]:
            out.add((*node_path[node], int(overlay.subscriber_link[s])))
    return out


@pytest.mark.parametrize("system", [diamond(), reliability_tree_system(3, brokers=8, subscribers=30)])
def test_route_tree_holds_the_dense_routes(system: dict[str, Any]) -> None:
    matcher = filter_matcher()
    network = compile_system(system, matcher)
    overlay = validate_system(system, matcher)
    matching = match_content(overlay, matcher)
    tree = compile_routes(overlay, matching)
    for k in range(len(network.content_p)):
        assert tree_paths(overlay, matching, tree, k) == hop_paths(network, k)
