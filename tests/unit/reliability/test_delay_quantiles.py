"""The p95 search (``routing.reliability.delay_quantiles``) along its other paths: a first
guess that falls short, a link-atom layout per broker, other coarse steps and windows, and
brackets that end too early, against the reference implementation and the default path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from routing.reliability import delay_quantiles
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.prediction import Prediction, predict
from routing.reliability.reference_predictor import predict_reference
from tests.unit.reliability.prediction_systems import assert_same_prediction, diamond


def test_a_short_first_guess_of_the_p95_pass_is_redone_on_the_whole_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    system = reliability_tree_system(5, brokers=6, subscribers=20, ms_per_subscription=3.0)
    expected = predict(system)
    monkeypatch.setattr(delay_quantiles, "_P95_GUESS_SD", -2.0)  # every first guess falls short
    again = predict(system)
    for sid, s in expected.subscribers.items():
        assert again.subscribers[sid].p95_delay_ms == pytest.approx(s.p95_delay_ms, rel=1e-12)


def p95s(prediction: Prediction) -> dict[str, float | None]:
    return {sid: s.p95_delay_ms for sid, s in prediction.subscribers.items()}


def assert_same_p95s(got: Prediction, expected: Prediction) -> None:
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
    monkeypatch.setattr(delay_quantiles, "_P95_SHARED_ATOMS", 0)  # as for too many distinct subscriber links
    assert_same_prediction(predict(system), predict_reference(system))


@pytest.mark.parametrize(("coarse", "chunk"), [(1, 1), (7, 3), (1000, 10**6)])
def test_the_p95_search_steps_do_not_change_the_quantiles(
    monkeypatch: pytest.MonkeyPatch, coarse: int, chunk: int
) -> None:
    for system in P95_SYSTEMS:
        expected = predict(system)
        with monkeypatch.context() as m:
            m.setattr(delay_quantiles, "_P95_COARSE", coarse)  # cells between the first reads of M
            m.setattr(delay_quantiles, "_P95_CHUNK", chunk)  # subscribers per window of M
            assert_same_p95s(predict(system), expected)


@pytest.mark.parametrize("bracket_end", ["too early", "last valid cell"])
def test_p95_brackets_that_end_early_are_searched_again(monkeypatch: pytest.MonkeyPatch, bracket_end: str) -> None:
    """The search's upper bracket comes from q_cell and q_mass; where G is still below its
    target there, the broker is searched again up to its last valid cell, and a bracket that
    ends at that cell covers everything: either way the quantiles stay the same."""
    bulk = delay_quantiles._batch_bulk

    def moved(*args: Any) -> tuple[np.ndarray, np.ndarray]:
        q_cell, q_mass = bulk(*args)
        if bracket_end == "too early":
            return np.zeros_like(q_cell), np.ones_like(q_mass)
        return q_cell + 10**6, q_mass

    for system in P95_SYSTEMS:
        expected = predict(system)
        with monkeypatch.context() as m:
            m.setattr(delay_quantiles, "_batch_bulk", moved)
            assert_same_p95s(predict(system), expected)
