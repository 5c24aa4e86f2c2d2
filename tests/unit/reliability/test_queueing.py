"""The single-queue formulas (``routing.reliability.queueing``) against closed forms.

Closed forms (docs/reference/reliability-model.md §8.1): M/D/1's mean wait by Pollaczek-Khinchine, whose probability
of waiting is rho; GI/M/1 (D and Erlang-k arrivals) with sigma the root of
sigma = A*(mu (1 - sigma)) and E[W] = sigma / (mu (1 - sigma)). The predictor built on them is
checked against the same queues in ``test_prediction.py``.
"""

from __future__ import annotations

import pytest

from routing.reliability.queueing import gg1_wait_model, klb_wait, qna_delay_probability, superposed_scv
from tests.unit.reliability.prediction_systems import gi_m1_case


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_wait_is_pollaczek_khinchine(rho: float) -> None:
    d = 10.0
    wait = gg1_wait_model(rho, 1.0, 0.0, 1.0, d)
    assert wait.mean == pytest.approx(rho * d / (2.0 * (1.0 - rho)))  # Pollaczek-Khinchine
    assert wait.sigma == pytest.approx(rho)


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.9])
@pytest.mark.parametrize("k", [0, 2, 4])  # 0: deterministic arrivals
def test_gi_m1_delay_probability_and_mean_wait(rho: float, k: int) -> None:
    tau = 10.0
    _, sigma, ca2 = gi_m1_case(rho, k, tau)
    mu = 1.0 / tau
    assert qna_delay_probability(rho, ca2, 1.0) == pytest.approx(sigma, abs=0.025)
    exact_wait = sigma / (mu * (1.0 - sigma))
    assert klb_wait(rho, ca2, 1.0, tau) == pytest.approx(exact_wait, rel=0.10)  # reliability-model.md §5.1


def test_superposition_rules_are_named() -> None:
    with pytest.raises(ValueError, match="unknown superposition rule 'mean'; valid: asymptotic, hybrid"):
        superposed_scv([1.0], [1.0], 0.5, "mean")
