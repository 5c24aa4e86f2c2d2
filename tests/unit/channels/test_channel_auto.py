"""``auto`` judged on held-out events (routing.channels.planner.select_auto, docs/reference/channels.md §4):
the split of the sample, the choice by the newest events' false positives, the refit, the output of
``plan channels --method auto`` on a sample large enough to hold events out, and the fast false-positive
count that scores the candidates against its oracle (``plan_metrics``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from producers.workloads import ClustersWorkload
from routing.channels import BOUNDED_METHODS, ChannelInstance, plan_channels, plan_metrics, planner, recluster
from routing.channels.match_sets import derive_hits_by_filters, false_positives, plan_metrics_by_sets
from routing.channels.planner import (
    HOLDOUT_FRACTION,
    HOLDOUT_MIN_EVENTS,
    PreparedInstance,
    holdout_split,
    select_auto,
)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=14),
            st.lists(st.integers(0, 4), min_size=14, max_size=14),
        )
    )
)
def test_false_positives_equals_its_oracle_dense_and_csr(case: tuple[list[list[bool]], list[int]]) -> None:
    rows, raw = case
    hits = np.array(rows, dtype=bool)
    labels = np.array(raw[: len(rows)], dtype=np.int64)
    expected = plan_metrics_by_sets(hits, labels).false_positives
    assert false_positives(hits, labels) == expected == plan_metrics(hits, labels).false_positives
    assert false_positives(sparse.csr_matrix(hits), labels) == expected


def test_holdout_split_holds_out_the_newest_quarter_from_its_minimum() -> None:
    assert HOLDOUT_FRACTION == 0.25 and HOLDOUT_MIN_EVENTS == 100
    assert holdout_split(2000) == 1500
    assert holdout_split(4 * HOLDOUT_MIN_EVENTS) == 3 * HOLDOUT_MIN_EVENTS
    assert holdout_split(4 * HOLDOUT_MIN_EVENTS - 1) == 4 * HOLDOUT_MIN_EVENTS - 1  # 99 held out: none
    assert holdout_split(5) == 5 and holdout_split(0) == 0
    assert holdout_split(1003) == 1003 - 250


def _drifting_sample() -> tuple[PreparedInstance, dict[str, np.ndarray]]:
    """Four subscriptions over 400 events: a and b match together in the older 300 events and part
    in the newest 100, where b matches with c instead. Plan "old" ({a, b}, {c, d}) has no false positive
    on the older events; plan "new" ({a, d}, {b, c}) has none on the newest."""
    hits = np.zeros((4, 400), dtype=bool)
    hits[[0, 1], :300:2] = True  # a and b, older events
    hits[[2, 3], 1:300:2] = True  # c and d, older events
    hits[[1, 2], 300::2] = True  # b and c, newest events
    hits[[0, 3], 301::2] = True  # a and d, newest events
    inst = ChannelInstance(2, 20, 0, ("a", "b", "c", "d"), (), (), (), {})
    plans = {"old": np.array([0, 0, 1, 1]), "new": np.array([0, 1, 1, 0])}
    return PreparedInstance(inst, hits), plans


def _fit_from(plans: dict[str, np.ndarray], calls: list[tuple[str, int]]) -> Any:
    """Candidates with fixed plans: approx makes "old", spectral-ncut makes "new", flooding one channel."""

    def fit(method: str, prep: PreparedInstance) -> np.ndarray | None:
        calls.append((method, prep.hits.shape[1]))
        return {"flooding": np.zeros(4, dtype=np.int64), "approx": plans["old"], "spectral-ncut": plans["new"]}.get(
            method
        )

    return fit


def test_auto_chooses_by_the_held_out_events_not_the_sample() -> None:
    prep, plans = _drifting_sample()
    calls: list[tuple[str, int]] = []
    choice = select_auto(prep, _fit_from(plans, calls), budget_ms=10**9)
    # on the whole sample "old" has fewer false positives (its 300 events outweigh the newest 100) ...
    assert choice.sample_fp["approx"] < choice.sample_fp["spectral-ncut"]
    assert choice.sample_fp == {
        m: plan_metrics(prep.hits, lab).false_positives
        for m, lab in (
            ("flooding", np.zeros(4, dtype=np.int64)),
            ("spectral-ncut", plans["new"]),
            ("approx", plans["old"]),
        )
    }
    # ... but on the held-out newest 100 events "new" has none: auto keeps it
    assert choice.held_out_events == 100
    assert choice.held_out_fp["spectral-ncut"] == 0 < choice.held_out_fp["approx"]
    assert choice.chosen == "spectral-ncut" and choice.labels.tolist() == plans["new"].tolist()
    assert list(choice.sample_fp) == [m for m in BOUNDED_METHODS if m in choice.sample_fp]  # table order
    # every candidate was fitted on the 300 older events, then the winner refitted on all 400
    assert {n for m, n in calls[:-1]} == {300} and calls[-1] == ("spectral-ncut", 400) and choice.refitted


def test_a_spent_budget_runs_the_baselines_and_the_default_and_refits_a_baseline_winner() -> None:
    prep, plans = _drifting_sample()
    calls: list[tuple[str, int]] = []
    # approx makes "new" here, spectral-ncut "old": the held-out winner is a baseline
    swapped = {"old": plans["new"], "new": plans["old"]}
    choice = select_auto(prep, _fit_from(swapped, calls), budget_ms=0)
    assert [m for m, _ in calls[:-1]] == ["flooding", "approx", "ck", "ov", "spectral-ncut"]  # AUTO_ALWAYS
    assert choice.chosen == "approx" and choice.held_out_fp["approx"] == 0
    assert choice.refitted and calls[-1] == ("approx", 400)
    # the default method as the winner with a spent budget is not refitted
    calls[:] = []
    choice = select_auto(prep, _fit_from(plans, calls), budget_ms=0)
    assert choice.chosen == "spectral-ncut" and not choice.refitted and all(n == 300 for _, n in calls)


class _Clock:
    """A clock that only the fits move: each spectral-ncut fit takes ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        return self.now


def test_auto_keeps_the_older_events_fit_when_the_budget_cannot_pay_a_refit(monkeypatch: pytest.MonkeyPatch) -> None:
    prep, plans = _drifting_sample()
    clock = _Clock(1.0)
    monkeypatch.setattr(planner, "time", clock)
    calls: list[tuple[str, int]] = []
    fit = _fit_from(plans, calls)

    def slow_fit(method: str, p: PreparedInstance) -> np.ndarray | None:
        if method == "spectral-ncut":
            clock.now += clock.step
        return fit(method, p)  # type: ignore[no-any-return]

    # spectral-ncut starts within the 1.5 s budget, takes 1 s on 300 events: a refit (~1.33 s) does not fit
    choice = select_auto(prep, slow_fit, budget_ms=1500)
    assert choice.chosen == "spectral-ncut" and not choice.refitted
    assert all(n == 300 for _, n in calls) and choice.labels.tolist() == plans["new"].tolist()
    # with 3 s it does
    clock.now, calls[:] = 0.0, []
    choice = select_auto(prep, slow_fit, budget_ms=3000)
    assert choice.refitted and calls[-1] == ("spectral-ncut", 400)


def test_auto_on_a_small_sample_judges_on_the_whole_sample() -> None:
    prep, plans = _drifting_sample()
    small = PreparedInstance(prep.instance, np.ascontiguousarray(prep.hits[:, 200:]))  # 200 events: none held out
    calls: list[tuple[str, int]] = []
    choice = select_auto(small, _fit_from(plans, calls), budget_ms=10**9)
    assert choice.held_out_events == 0 and choice.held_out_fp == {} and not choice.refitted
    best = min(choice.sample_fp.values())
    assert choice.sample_fp[choice.chosen] == best and all(n == 200 for _, n in calls)


def _clustered(events: int) -> ChannelInstance:
    w = ClustersWorkload(subscriptions=80, dims=2, distribution="WL2", match_rate=0.1, seed=3)
    subs = [{key: r[key] for key in ("subscription_id", "subscriber_id", "filter")} for r in w.subscriptions()]
    doc = {
        "k": 4,
        "subscriptions": subs,
        "events": [{"event_id": e["event_id"], "attributes": e["attributes"]} for e in w.batch(events)],
        "domains": {"x1": {"min": 0, "max": 30}, "x2": {"min": 0, "max": 30}},
    }
    return ChannelInstance.from_json(doc)


def test_plan_channels_auto_with_held_out_events_is_a_valid_plan_with_exact_numbers() -> None:
    instance = _clustered(480)
    out = plan_channels(instance, "auto", budget_ms=10**9)
    assert out["method"] == "auto" and out["held_out_events"] == 120
    held, whole = out["held_out_candidates"], out["candidates"]
    assert list(held) == list(whole) and out["chosen"] in whole
    assert held[out["chosen"]] == min(held.values())
    # the plan and every number it reports: exact on the whole sample (the contract's output)
    ids = instance.subscription_ids
    labels = np.array([out["assignment"][sid] for sid in ids], dtype=np.int64)
    assert len(set(labels.tolist())) <= instance.k
    hits = derive_hits_by_filters(instance.filters, instance.events)
    assert out["summary"] == plan_metrics_by_sets(hits, labels).summary()
    # the candidates' held-out counts are those of plans fitted on the older 360 events
    for method in ("approx", "ck", "flooding"):
        older = plan_channels(
            ChannelInstance(
                instance.k,
                instance.psi,
                instance.seed,
                ids,
                instance.filters,
                instance.event_ids[:360],
                instance.events[:360],
                instance.domains,
            ),
            method,
        )
        fitted = np.array([older["assignment"][sid] for sid in ids], dtype=np.int64)
        assert held[method] == false_positives(hits[:, 360:], fitted)
        assert whole[method] == false_positives(hits, fitted)
    if out["refitted"]:
        assert out["summary"]["false_positives"] == plan_channels(instance, out["chosen"])["summary"]["false_positives"]


@pytest.mark.parametrize("budget_ms", [0, 10**9])
def test_recluster_auto_returns_the_plan_select_auto_chose(budget_ms: int) -> None:
    instance = _clustered(400)
    hits = derive_hits_by_filters(instance.filters, instance.events)
    ids = instance.subscription_ids
    labels, used = recluster(
        hits, ids, 4, "auto", budget_ms=budget_ms, filters=instance.filters, domains=instance.domains
    )
    assert len(labels) == len(ids) and set(labels.tolist()) <= set(range(4))
    older, _ = recluster(
        np.ascontiguousarray(hits[:, :300]), ids, 4, used, filters=instance.filters, domains=instance.domains
    )
    refit, _ = recluster(hits, ids, 4, used, filters=instance.filters, domains=instance.domains)
    # the labels are the winner's, fitted on the older 300 events or refitted on all 400
    assert np.array_equal(labels, older) or np.array_equal(labels, refit)
    if budget_ms == 0:  # only the baselines ran, and a baseline winner is the baseline's plan of the whole sample
        assert used in ("flooding", "approx", "ck", "ov") and np.array_equal(labels, refit)


def test_a_kept_fit_places_the_subscriptions_unseen_in_the_older_events_by_the_join_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from routing.channels.methods import join_isolated, number_channels

    prep, _ = _drifting_sample()
    hits = np.vstack([prep.hits, np.zeros((1, 400), dtype=bool)])
    hits[4, 300::2] = True  # e matches only newest events, with b and c
    inst = ChannelInstance(2, 20, 0, ("a", "b", "c", "d", "e"), (), (), (), {})
    clock = _Clock(1.0)
    monkeypatch.setattr(planner, "time", clock)
    fitted_on: list[int] = []

    def fit(method: str, p: PreparedInstance) -> np.ndarray | None:
        fitted_on.append(p.hits.shape[1])
        if method == "flooding":
            return np.zeros(5, dtype=np.int64)
        if method != "spectral-ncut":
            return None
        clock.now += clock.step  # too slow to refit within the budget
        assert not p.hits[4].any()  # e matched none of the older events: fitted blind, next to a
        return np.array([0, 1, 1, 0, 0], dtype=np.int64)

    choice = select_auto(PreparedInstance(inst, hits), fit, budget_ms=1500)
    assert choice.chosen == "spectral-ncut" and not choice.refitted and set(fitted_on) == {300}
    expected = number_channels(
        join_isolated(hits, np.array([0, 1, 1, 0, -1]), list(inst.subscription_ids), 2), inst.subscription_ids
    )
    assert choice.labels.tolist() == expected.tolist() == [0, 1, 1, 0, 1]  # e joins b and c, who carry its events
    assert false_positives(hits, choice.labels) < false_positives(hits, np.array([0, 1, 1, 0, 0]))


def _timed_fit(plans: dict[str, np.ndarray], clock: _Clock, calls: list[tuple[str, int]]) -> Any:
    """``_fit_from``'s plans, where each optional candidate (exact, spectral-rassoc, kmeans) takes
    ``clock.step`` seconds and returns flooding's plan; the rest take no time."""
    fit = _fit_from(plans, calls)

    def timed(method: str, prep: PreparedInstance) -> np.ndarray | None:
        if method in ("exact", "spectral-rassoc", "kmeans"):
            calls.append((method, prep.hits.shape[1]))
            clock.now += clock.step
            return np.zeros(4, dtype=np.int64)
        return fit(method, prep)  # type: ignore[no-any-return]

    return timed


def test_auto_skips_a_candidate_its_times_predict_to_overrun_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    prep, plans = _drifting_sample()
    clock = _Clock(0.8)
    monkeypatch.setattr(planner, "time", clock)
    calls: list[tuple[str, int]] = []
    times = planner.AutoTimes()
    # no predictions yet: each optional candidate starts while the 1 s budget lasts, so the one that
    # starts last (spectral-rassoc, at 0.8 s) overruns it, and kmeans (at 1.6 s) is skipped
    choice = select_auto(prep, _timed_fit(plans, clock, calls), budget_ms=1000, times=times)
    assert [m for m, _ in calls if m in ("exact", "spectral-rassoc", "kmeans")] == ["exact", "spectral-rassoc"]
    assert choice.skipped == ("kmeans",) and clock.now == pytest.approx(1.6)
    assert choice.fit_ms["exact"] == pytest.approx(800.0) and times.predict("exact", 600) == pytest.approx(800.0)
    # the next run has their times: exact (0.8 s predicted) fits in the budget, spectral-rassoc after
    # it would end at 1.6 s and is skipped; kmeans, never timed, starts at 0.8 s and overruns
    clock.now, calls[:] = 0.0, []
    choice = select_auto(prep, _timed_fit(plans, clock, calls), budget_ms=1000, times=times)
    optional = [m for m, _ in calls if m in ("exact", "spectral-rassoc", "kmeans")]
    assert optional == ["exact", "kmeans"] and choice.skipped == ("spectral-rassoc",)
    # with every candidate timed, the optional ones end within the budget
    clock.now, calls[:] = 0.0, []
    choice = select_auto(prep, _timed_fit(plans, clock, calls), budget_ms=1000, times=times)
    assert [m for m, _ in calls if m in ("exact", "spectral-rassoc", "kmeans")] == ["exact"]
    assert choice.skipped == ("spectral-rassoc", "kmeans") and clock.now <= 1.0
    # the candidates auto always runs are never skipped, whatever their predicted times
    times.record("spectral-ncut", 10**9, 1)
    clock.now, calls[:] = 0.0, []
    choice = select_auto(prep, _timed_fit(plans, clock, calls), budget_ms=1000, times=times)
    assert "spectral-ncut" in choice.sample_fp and "spectral-ncut" not in choice.skipped


def test_auto_times_scale_by_the_matches_of_the_fit() -> None:
    times = planner.AutoTimes()
    assert times.predict("approx", 100) is None
    times.record("approx", 50.0, 1000)
    assert times.predict("approx", 2000) == pytest.approx(100.0)
    times.record("approx", 30.0, 1000)  # the last run's time replaces the one before
    assert times.predict("approx", 1000) == pytest.approx(30.0)


def test_recluster_auto_fills_the_times_it_is_given() -> None:
    instance = _clustered(400)
    hits = derive_hits_by_filters(instance.filters, instance.events)
    times = planner.AutoTimes()
    recluster(hits, instance.subscription_ids, 4, "auto", budget_ms=10**9, times=times)
    assert {"flooding", "approx", "spectral-ncut"} <= set(times.ms_per_match)
    assert all(rate >= 0 for rate in times.ms_per_match.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=7, max_size=7), min_size=0, max_size=9))
def test_the_csr_of_the_matches_equals_scipys(rows: list[list[bool]]) -> None:
    from routing.channels.similarity import csr_of, nonzero_of

    hits = np.array(rows, dtype=bool).reshape(len(rows), 7)
    fast, plain = csr_of(hits), sparse.csr_matrix(hits, dtype=np.float32)
    for matrix in (hits, np.ascontiguousarray(np.hstack([hits, hits[:, :1]]))):  # 7 and 8 columns: both paths
        assert [v.tolist() for v in nonzero_of(matrix)] == [v.tolist() for v in np.nonzero(matrix)]
    assert fast.shape == plain.shape and fast.dtype == plain.dtype
    assert (fast != plain).nnz == 0 and fast.nnz == plain.nnz and fast.has_sorted_indices
