"""The reliability predictor (``routing.reliability.prediction``) against closed forms and the simulator.

Closed forms (docs/reference/reliability-model.md §8.1): M/M/1 sojourn T ~ Exp(mu - lambda); M/D/1 waiting time by
Erlang's formula; GI/M/1 (D and Erlang-k arrivals) with sigma the root of
sigma = A*(mu (1 - sigma)) and T ~ Exp(mu (1 - sigma)); a tandem of M/M/1 queues, whose sojourn
is a sum of independent exponentials (Burke's theorem). The formulas alone are checked in
``test_queueing.py``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from routing.reliability.prediction import filter_matcher, predict, to_spec_output
from routing.reliability.simulator import simulate
from tests.unit.reliability.prediction_systems import ZERO, chain, exp, gi_m1_case


def r_of(system: dict[str, Any], **kwargs: Any) -> float:
    value = predict(system, **kwargs).subscribers["s1"].reliability
    assert value is not None
    return value


# ------------------------------------------------------------------ single queues


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.8, 0.9])
@pytest.mark.parametrize("quantile", [0.5, 0.9, 0.99])
def test_mm1_sojourn_is_exponential(rho: float, quantile: float) -> None:
    tau = 10.0
    rate = (1.0 - rho) / tau  # mu - lambda per ms
    deadline = -math.log(1.0 - quantile) / rate
    system = chain([exp(tau)], exp(tau / rho), deadline)
    assert r_of(system) == pytest.approx(quantile, abs=2e-3)


def test_mm1_mean_wait_and_load_in_both_models() -> None:
    system = chain([exp(10.0)], exp(12.5), 100.0)
    for model in ("gg1", "mm1"):
        b1 = predict(system, model=model).brokers["b1"]
        assert b1.rho == pytest.approx(0.8)
        assert b1.arrival_rate_per_s == pytest.approx(80.0)
        assert b1.mean_wait_ms == pytest.approx(0.8 * 10.0 / 0.2)


def test_mm1_model_shifts_service_by_the_mean_wait() -> None:
    """The paper's §4.3: D_b(t + q_b) = M_b(t), so P(T <= d) = P(S <= d - q_b)."""
    tau, rho, deadline = 10.0, 0.5, 25.0
    system = chain([exp(tau)], exp(tau / rho), deadline)
    q = rho * tau / (1.0 - rho)
    assert r_of(system, model="mm1") == pytest.approx(1.0 - math.exp(-(deadline - q) / tau), abs=2e-3)


def erlang_md1_wait_cdf(t: float, lam: float, d: float) -> float:
    """Erlang's M/D/1 formula: P(W <= t) = (1 - rho) sum_{k <= t/D} [lam (kD - t)]^k / k! e^{-lam (kD - t)}."""
    rho = lam * d
    total = 0.0
    for k in range(math.floor(t / d) + 1):
        x = lam * (k * d - t)
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1.0 - rho) * total


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_against_erlangs_formula(rho: float) -> None:
    d = 10.0
    lam = rho / d
    errors = []
    for t_over_d in (0.3, 1.5, 2.5, 4.5):  # off the kinks at multiples of D
        t = t_over_d * d
        system = chain([{"kind": "deterministic", "value": d}], exp(1.0 / lam), t + d)
        errors.append(abs(r_of(system) - erlang_md1_wait_cdf(t, lam, d)))
    # docs/reference/reliability-model.md §5.2: atom + gamma errs by about 0.01 on M/D/1.
    assert max(errors) < 0.02


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.9])
@pytest.mark.parametrize("k", [0, 2, 4])  # 0: deterministic arrivals
def test_gi_m1_sojourn(rho: float, k: int) -> None:
    tau = 10.0
    arrivals, sigma, _ = gi_m1_case(rho, k, tau)
    mu = 1.0 / tau
    for q in (0.5, 0.9, 0.99):
        deadline = -math.log(1.0 - q) / (mu * (1.0 - sigma))
        # docs/reference/reliability-model.md §5.2: atom + gamma on D/M/1 errs by about 0.002.
        assert r_of(chain([exp(tau)], arrivals, deadline)) == pytest.approx(q, abs=0.02)


def test_mm1_tandem_is_a_sum_of_exponentials() -> None:
    lam = 0.05
    mus = [0.1, 0.08]
    system = chain([exp(1.0 / m) for m in mus], exp(1.0 / lam), 0.0)
    a, b = (m - lam for m in mus)
    for t in (20.0, 60.0, 150.0):
        system["publishers"][0]["content"][0]["lifetime_ms"] = t
        exact = 1.0 - (b * math.exp(-a * t) - a * math.exp(-b * t)) / (b - a)
        assert r_of(system) == pytest.approx(exact, abs=3e-3)
        brokers = predict(system).brokers
        assert brokers["b2"].ca2 == pytest.approx(1.0)  # Burke: M/M/1 departures are Poisson


# ------------------------------------------------------------------ network behaviour


def test_link_loss_and_delay_enter_the_prediction() -> None:
    delay = {"kind": "deterministic", "value": 30.0}
    lossless = r_of(chain([exp(1.0)], exp(100.0), 40.0, delay=ZERO))
    lossy = r_of(chain([exp(1.0), exp(1.0)], exp(100.0), 40.0, delay=delay, reliability=0.9))
    assert lossless > 0.99
    assert lossy < 0.9 * lossless  # the loss, and 30 ms of a 40 ms lifetime gone
    # Loss scales R by r_l (and, by thinning, barely changes b2's burstiness at rho 0.01).
    assert lossy == pytest.approx(0.9 * r_of(chain([exp(1.0), exp(1.0)], exp(100.0), 40.0, delay=delay)), abs=1e-4)


def test_overloaded_broker_gives_zero_with_a_warning() -> None:
    prediction = predict(chain([exp(12.0)], exp(10.0), 1000.0))
    assert prediction.subscribers["s1"].reliability == 0.0
    assert prediction.subscribers["s1"].mean_delay_ms is None
    assert any("b1: rho 1.20 >= 1" in w for w in prediction.warnings)
    near = predict(chain([exp(9.6)], exp(10.0), 1000.0))
    assert any("b1: rho 0.96 >= 0.95" in w for w in near.warnings)


def test_burstier_publishers_wait_longer() -> None:
    services = [exp(5.0)]
    waits = [
        predict(chain(services, arrivals, 100.0)).brokers["b1"].mean_wait_ms
        for arrivals in (
            {"kind": "deterministic", "value": 7.0},
            exp(7.0),
            {"kind": "gamma", "mean": 7.0, "cv": 2.0},
        )
    ]
    assert waits[0] < waits[1] < waits[2]


def test_unmatched_subscriber_is_undefined() -> None:
    system = chain([exp(1.0)], exp(10.0), 50.0)
    system["subscribers"][0]["filter"] = "t = 2"
    prediction = predict(system)
    assert prediction.subscribers["s1"].reliability is None
    assert any("s1: no publisher's content matches" in w for w in prediction.warnings)


def test_invalid_arguments_are_named() -> None:
    system = chain([exp(1.0)], exp(10.0), 50.0)
    with pytest.raises(ValueError, match="unknown model 'gg2'; valid: gg1, mm1"):
        predict(system, model="gg2")
    with pytest.raises(ValueError, match="unknown superposition rule"):
        predict(system, superposition="mean")
    system["links"][1]["to"] = "nowhere"
    with pytest.raises(ValueError, match=r"links\[1\]"):
        predict(system)


def test_contributors_blame_the_slow_broker() -> None:
    system = chain([exp(1.0), exp(8.0)], exp(10.0), 30.0)
    s1 = predict(system).subscribers["s1"]
    assert s1.contributors[0].element == "b2"
    assert s1.contributors[0].utilisation == pytest.approx(0.8)
    assert sum(c.share for c in s1.contributors) == pytest.approx(1.0)


def test_prediction_agrees_with_the_simulator_on_a_poisson_tree() -> None:
    """Poisson publishers, exponential service, two brokers linked both ways, lossy jittery
    links: the predicted R'_s is within 0.02 + 3 standard errors of the simulated R_s."""
    lognormal = {"kind": "lognormal", "mean": 20.0, "cv": 0.7}
    content = [
        {"p": 0.5, "lifetime_ms": 150.0, "attributes": {"t": 1}},
        {"p": 0.5, "lifetime_ms": 150.0, "attributes": {"t": 2}},
    ]
    system = {
        "brokers": [{"id": "b1", "service_ms": exp(6.0)}, {"id": "b2", "service_ms": exp(8.0)}],
        "links": [
            {"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": exp(2.0)},
            {"from": "p2", "to": "b2", "reliability": 0.98, "delay_ms": exp(2.0)},
            {"from": "b1", "to": "b2", "reliability": 0.95, "delay_ms": lognormal},
            {"from": "b2", "to": "b1", "reliability": 0.97, "delay_ms": lognormal},
            {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": exp(3.0)},
            {"from": "b2", "to": "s2", "reliability": 0.99, "delay_ms": exp(3.0)},
        ],
        "publishers": [
            {"id": "p1", "broker": "b1", "interarrival_ms": exp(20.0), "content": content},
            {"id": "p2", "broker": "b2", "interarrival_ms": exp(25.0), "content": content},
        ],
        "subscribers": [
            {"id": "s1", "broker": "b1", "filter": "t = 1"},
            {"id": "s2", "broker": "b2", "filter": "t >= 1"},
        ],
    }
    predicted = predict(system)
    measured = simulate(system, 2000.0, 11, filter_matcher())
    for sid in ("s1", "s2"):
        truth = measured.subscribers[sid]
        se = math.sqrt(truth.reliability * (1.0 - truth.reliability) / truth.matching)
        p = predicted.subscribers[sid]
        assert p.reliability == pytest.approx(truth.reliability, abs=0.02 + 3.0 * se)
        assert p.reliability_low is not None and p.reliability_high is not None
        assert p.reliability_low <= p.reliability <= p.reliability_high
        assert p.mean_delay_ms == pytest.approx(truth.mean_delay_ms, rel=0.05)
    for bid in ("b1", "b2"):
        assert predicted.brokers[bid].rho == pytest.approx(measured.brokers[bid].rho, abs=0.03)
        assert predicted.brokers[bid].mean_wait_ms == pytest.approx(measured.brokers[bid].mean_wait_ms, rel=0.15)


def test_spec_output_shape() -> None:
    out = to_spec_output(predict(chain([exp(5.0)], exp(10.0), 30.0)))
    assert set(out) == {"model", "subscribers", "brokers", "warnings"}
    assert set(out["subscribers"]["s1"]) == {
        "reliability",
        "reliability_low",
        "reliability_high",
        "mean_delay_ms",
        "p95_delay_ms",
    }
    assert set(out["brokers"]["b1"]) == {"arrival_rate_per_s", "rho", "mean_wait_ms"}
    json.dumps(out, allow_nan=False)


def test_cli_predict(tmp_path: Any) -> None:
    path = tmp_path / "system.json"
    path.write_text(json.dumps(chain([exp(5.0)], exp(10.0), 30.0)))
    cmd = [sys.executable, "-m", "streaming.cli", "qos", "predict", "--system", str(path), "--model", "mm1"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    assert out["model"] == "mm1"
    assert out["subscribers"]["s1"]["reliability_low"] is None  # the paper's model has no interval
    assert 0.0 < out["subscribers"]["s1"]["reliability"] < 1.0
    for broken, message in (({}, "no brokers"), ({"brokers": [{"id": "b1"}]}, "service_ms")):
        path.write_text(json.dumps(broken))
        bad = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert bad.returncode != 0
        assert message in bad.stderr
        assert "Traceback" not in bad.stderr
