"""The scalable reliability predictor (``routing.reliability.qos.predict``) against its oracles.

- ``predict`` against ``predict_reference`` (the previous, hop-by-hop implementation on the
  dense ``Network``): the same R'_s, interval, mean delay, p95, broker loads and blame, to
  rounding, on generated trees, DAGs (several paths to one broker), lossy links, several
  lifetimes and overloaded brokers (CONVENTIONS 6);
- R'_s against a per-path evaluation written here: for every (subscriber, content entry) that
  matches, the route from the publisher's home broker found by breadth-first search, its link
  and broker delays convolved on a grid of the test's own;
- the bulk matching (``FilterMatcher.match_many``) against the matcher called pair by pair, and
  the route tree against the dense routes the simulator uses;
- the p95 search with its other paths (a link-atom layout per broker, other coarse steps and
  windows, brackets that end too early) against the reference and the default path, and the
  wait pmfs against the gamma cdf worked out on every point.
"""

from __future__ import annotations

import gc
import math
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from routing.reliability import qos
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.system import (
    compile_routes,
    compile_system,
    match_content,
    validate_system,
)
from routing.stats.distributions import Exponential, Gamma, Lognormal, parse_distribution

PARITY = settings(max_examples=25, deadline=None)


def exp(mean: float) -> dict[str, Any]:
    return {"kind": "exponential", "mean": mean}


def lognormal(mean: float, cv: float) -> dict[str, Any]:
    return {"kind": "lognormal", "mean": mean, "cv": cv}


def assert_same_prediction(fast: qos.Prediction, ref: qos.Prediction, p95_rel: float = 1e-7) -> None:
    assert fast.subscribers.keys() == ref.subscribers.keys()
    assert fast.warnings == ref.warnings
    for sid, f in fast.subscribers.items():
        r = ref.subscribers[sid]
        for name in ("reliability", "reliability_low", "reliability_high"):
            a, b = getattr(f, name), getattr(r, name)
            assert (a is None) == (b is None), (sid, name)
            if a is not None:
                assert a == pytest.approx(b, abs=1e-9), (sid, name)
        for name, rel in (("mean_delay_ms", 1e-9), ("p95_delay_ms", p95_rel)):
            a, b = getattr(f, name), getattr(r, name)
            assert (a is None) == (b is None), (sid, name, a, b)
            if a is not None:
                assert a == pytest.approx(b, rel=rel, abs=1e-9), (sid, name)
        assert f.matching_rate_per_s == pytest.approx(r.matching_rate_per_s, rel=1e-12)
        shares = {c.element: c.share for c in f.contributors}
        assert shares.keys() == {c.element for c in r.contributors}
        for c in r.contributors:
            assert shares[c.element] == pytest.approx(c.share, abs=1e-9)
    for bid, fb in fast.brokers.items():
        rb = ref.brokers[bid]
        for name in ("arrival_rate_per_s", "rho", "mean_wait_ms", "ca2", "delay_probability"):
            assert getattr(fb, name) == pytest.approx(getattr(rb, name), rel=1e-9, abs=1e-12), (bid, name)
        assert fb.superposition == rb.superposition


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
        assert_same_prediction(qos.predict(system, model=model), qos.predict_reference(system, model=model))


def diamond(lifetimes: tuple[float, float] = (60.0, 200.0), service_b4: float = 4.0) -> dict[str, Any]:
    """p1 -> b1, which feeds b4 both through b2 and through b3 (one event reaches b4 twice), and
    b4 <-> b5 both ways; two content entries with different lifetimes."""

    def link(a: str, b: str, r: float = 0.95, d: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"from": a, "to": b, "reliability": r, "delay_ms": d or lognormal(8.0, 0.6)}

    links = [link("p1", "b1", 1.0, exp(1.0)), link("p2", "b5", 0.99, exp(2.0))]
    links += [
        link("b1", "b2"),
        link("b1", "b3", 0.9),
        link("b2", "b4"),
        link("b3", "b4"),
        link("b4", "b5"),
        link("b5", "b4"),
    ]
    links += [link("b4", "s1", 1.0, exp(2.0)), link("b5", "s2"), link("b2", "s3", 0.97, exp(1.0))]
    content = [
        {"p": 0.6, "lifetime_ms": lifetimes[0], "attributes": {"t": 1}},
        {"p": 0.4, "lifetime_ms": lifetimes[1], "attributes": {"t": 2}},
    ]
    services = {"b1": exp(2.0), "b2": {"kind": "uniform", "low": 0.0, "high": 6.0}, "b3": exp(3.0)}
    services |= {"b4": exp(service_b4), "b5": {"kind": "gamma", "mean": 3.0, "cv": 0.5}}
    return {
        "brokers": [{"id": b, "service_ms": s} for b, s in services.items()],
        "links": links,
        "publishers": [
            {"id": "p1", "broker": "b1", "interarrival_ms": exp(25.0), "content": content},
            {
                "id": "p2",
                "broker": "b5",
                "interarrival_ms": {"kind": "deterministic", "value": 40.0},
                "content": content,
            },
        ],
        "subscribers": [
            {"id": "s1", "broker": "b4", "filter": "t >= 1"},
            {"id": "s2", "broker": "b5", "filter": "t = 2"},
            {"id": "s3", "broker": "b2", "filter": "t = 1"},
        ],
    }


@pytest.mark.parametrize("superposition", ["auto", "asymptotic", "hybrid"])
@pytest.mark.parametrize("model", ["gg1", "mm1"])
def test_fast_path_equals_the_reference_with_several_paths_and_lifetimes(model: str, superposition: str) -> None:
    if model == "mm1" and superposition != "auto":
        return
    system = diamond()
    fast = qos.predict(system, model=model, superposition=superposition)
    assert_same_prediction(fast, qos.predict_reference(system, model=model, superposition=superposition))
    assert fast.subscribers["s1"].reliability is not None


def test_fast_path_equals_the_reference_behind_an_overloaded_broker() -> None:
    system = diamond(service_b4=40.0)  # b4 gets ~0.04 events/ms: rho > 1
    fast = qos.predict(system)
    assert fast.brokers["b4"].rho > 1.0
    assert fast.subscribers["s1"].reliability == 0.0 and fast.subscribers["s1"].p95_delay_ms is None
    assert_same_prediction(fast, qos.predict_reference(system))


def test_a_short_first_guess_of_the_p95_pass_is_redone_on_the_whole_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    system = reliability_tree_system(5, brokers=6, subscribers=20, ms_per_subscription=3.0)
    expected = qos.predict(system)
    monkeypatch.setattr(qos, "_P95_GUESS_SD", -2.0)  # every first guess falls short
    again = qos.predict(system)
    for sid, s in expected.subscribers.items():
        assert again.subscribers[sid].p95_delay_ms == pytest.approx(s.p95_delay_ms, rel=1e-12)


def p95s(prediction: qos.Prediction) -> dict[str, float | None]:
    return {sid: s.p95_delay_ms for sid, s in prediction.subscribers.items()}


def assert_same_p95s(got: qos.Prediction, expected: qos.Prediction) -> None:
    for sid, value in p95s(expected).items():
        other = got.subscribers[sid].p95_delay_ms
        assert (other is None) == (value is None), sid
        if value is not None:
            assert other == pytest.approx(value, rel=1e-12), sid


P95_SYSTEMS = [
    diamond(),
    reliability_tree_system(3, brokers=12, subscribers=60, ms_per_subscription=1.0),
    reliability_tree_system(4, brokers=20, subscribers=200, link_scv=4.0, ms_per_subscription=0.5),
]


@pytest.mark.parametrize("system", P95_SYSTEMS)
def test_p95_with_a_link_atom_layout_per_broker_equals_the_reference(
    monkeypatch: pytest.MonkeyPatch, system: dict[str, Any]
) -> None:
    monkeypatch.setattr(qos, "_P95_SHARED_ATOMS", 0)  # as for too many distinct subscriber links
    assert_same_prediction(qos.predict(system), qos.predict_reference(system))


@pytest.mark.parametrize(("coarse", "chunk"), [(1, 1), (7, 3), (1000, 10**6)])
def test_the_p95_search_steps_do_not_change_the_quantiles(
    monkeypatch: pytest.MonkeyPatch, coarse: int, chunk: int
) -> None:
    for system in P95_SYSTEMS:
        expected = qos.predict(system)
        with monkeypatch.context() as m:
            m.setattr(qos, "_P95_COARSE", coarse)  # cells between the first reads of M
            m.setattr(qos, "_P95_CHUNK", chunk)  # subscribers per window of M
            assert_same_p95s(qos.predict(system), expected)


@pytest.mark.parametrize("bracket_end", ["too early", "last valid cell"])
def test_p95_brackets_that_end_early_are_searched_again(monkeypatch: pytest.MonkeyPatch, bracket_end: str) -> None:
    """The search's upper bracket comes from q_cell and q_mass; where G is still below its
    target there, the broker is searched again up to its last valid cell, and a bracket that
    ends at that cell covers everything: either way the quantiles stay the same."""
    bulk = qos._batch_bulk

    def moved(*args: Any) -> tuple[np.ndarray, np.ndarray]:
        q_cell, q_mass = bulk(*args)
        if bracket_end == "too early":
            return np.zeros_like(q_cell), np.ones_like(q_mass)
        return q_cell + 10**6, q_mass

    for system in P95_SYSTEMS:
        expected = qos.predict(system)
        with monkeypatch.context() as m:
            m.setattr(qos, "_batch_bulk", moved)
            assert_same_p95s(qos.predict(system), expected)


@pytest.mark.parametrize("cd2", [0.05, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("sigma", [0.001, 0.5, 0.999])
def test_wait_pmfs_equal_the_gamma_cdf_differences(cd2: float, sigma: float) -> None:
    """The wait pmfs skip the incomplete gamma function where the cdf rounds to 1 and use e^-x
    for shape 1: the same masses as the cdf worked out everywhere, to rounding."""
    grid = qos.Grid(step=0.5, n=2048)
    wait = qos.WaitModel(mean=3.0, sigma=sigma, cd2=cd2)
    ev = SimpleNamespace(_waits={})
    got = qos._Evaluator._wait_pmfs(ev, grid, [wait], np.array([grid.n]))[0]  # type: ignore[arg-type]
    edges = np.maximum((np.arange(grid.n + 1) - 0.5) * grid.step, 0.0)
    shape, scale = 1.0 / cd2, 3.0 / sigma * cd2
    cdf = 1.0 - sigma * special.gammaincc(shape, edges / scale)
    cdf[0] = 0.0
    assert np.max(np.abs(got - np.maximum(np.diff(cdf), 0.0))) < 1e-15


def test_cdf_table_rows_in_blocks_equal_the_whole_table_expression() -> None:
    """_CdfTable.rows works the closed forms out in place, block by block: the same bits as one
    expression over the whole table (several blocks here, kinds mixed and unmixed, cells <= 0)."""
    rng = np.random.default_rng(5)
    means, cvs = rng.uniform(1, 200, 150), rng.uniform(0.1, 2, 150)
    logn = [Lognormal(float(m), float(c)) for m, c in zip(means, cvs, strict=True)]
    expo = [Exponential(float(m)) for m in rng.uniform(1, 200, 150)]
    x = np.concatenate(([-1.0, 0.0], np.linspace(0.5, 900.0, 498)))
    xs = x[None, :]
    for dists in (logn, expo, logn + expo + [Gamma(2.0, 3.0)]):
        table = qos._CdfTable(dists)
        rows = np.arange(len(dists))[::-1].copy()
        got = table.rows(rows, x)
        for i, r in enumerate(rows.tolist()):
            if table.kind[r] == 2:
                with np.errstate(divide="ignore"):
                    z = (np.log(np.maximum(xs, 0.0)) - table.a[r]) / table.b[r]
                want = np.where(xs > 0.0, special.ndtr(z), 0.0)[0]
            elif table.kind[r] == 1:
                want = np.where(xs > 0.0, -np.expm1(-np.maximum(xs, 0.0) / table.a[r]), 0.0)[0]
            else:
                want = dists[r].cdf(x)
            assert np.array_equal(got[i], want), (r, table.kind[r])


def test_allocation_settings_are_restored_after_a_prediction() -> None:
    """predict pauses the collector and numpy's huge-page requests, then restores both."""
    hugepages = np._core.multiarray._set_madvise_hugepage
    before = hugepages(True)
    try:
        qos.predict(diamond())
        assert gc.isenabled() and hugepages(True) is True
        gc.disable()
        qos.predict(diamond())
        assert not gc.isenabled()
    finally:
        gc.enable()
        hugepages(before)


def test_compiled_and_dense_inputs_give_the_same_prediction() -> None:
    system = diamond()
    compiled = qos.compile_prediction(system)
    network = compile_system(system, qos.filter_matcher())
    by_system = qos.predict(system)
    assert qos.predict(system, compiled=compiled) == by_system
    assert_same_prediction(qos.predict({}, network=network), by_system)


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


def per_path_reliability(system: dict[str, Any], prediction: qos.Prediction, grid: qos.Grid) -> dict[str, float]:
    """R'_s the long way: every matching (content entry, subscriber) pair, its one route, the
    delay pmfs convolved along it (the broker waits as predicted), on-time mass times reach."""
    matcher = qos.filter_matcher()
    service = {b["id"]: parse_distribution(b["service_ms"]) for b in system["brokers"]}

    def broker_delay(bid: str) -> np.ndarray:
        b = prediction.brokers[bid]
        dist = service[bid]
        cd2 = qos.conditional_delay_scv(min(b.rho, 0.999), b.cs2, dist.third_moment / dist.mean**3)
        wait = qos.WaitModel(b.mean_wait_ms, b.delay_probability, cd2)
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
    prediction = qos.predict(system)
    brute = per_path_reliability(system, prediction, qos.Grid(step=0.25, n=4096))
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
    matcher = qos.filter_matcher()
    expected = [[matcher(text, event) for text in texts] for event in events]
    assert matcher.match_many(texts, events).tolist() == expected


def test_a_filter_that_does_not_parse_is_rejected_by_name() -> None:
    system = diamond()
    system["subscribers"][1]["filter"] = "t = = 2"
    with pytest.raises(ValueError, match=r"subscribers\[1\] \('s2'\): filter 't = = 2' rejected: "):
        qos.predict(system)


@pytest.mark.parametrize("tests_per_filter", [0, 300])  # an index pass, a predicate table
def test_both_bulk_matching_paths_agree(monkeypatch: pytest.MonkeyPatch, tests_per_filter: int) -> None:
    monkeypatch.setattr(qos, "_PREDICATE_TESTS_PER_FILTER", tests_per_filter)
    test_bulk_matching_equals_the_matcher_pair_by_pair()


def test_bulk_and_pairwise_matching_give_the_same_table() -> None:
    system = diamond()
    overlay = validate_system(system, qos.filter_matcher())
    bulk = match_content(overlay, qos.filter_matcher())
    pairwise = match_content(overlay, lambda text, attributes: qos.filter_matcher()(text, attributes))
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
    matcher = qos.filter_matcher()
    network = compile_system(system, matcher)
    overlay = validate_system(system, matcher)
    matching = match_content(overlay, matcher)
    tree = compile_routes(overlay, matching)
    for k in range(len(network.content_p)):
        assert tree_paths(overlay, matching, tree, k) == hop_paths(network, k)
