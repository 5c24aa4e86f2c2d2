"""The delay sketch (``routing.stats.delay_sketch.DelaySketch``).

What is checked: CDF and quantile accuracy on 10^5 delays against the exact empirical CDF, the
accuracy the predictor needs at R near 0.99; merges are exact (any split, merged in any order,
gives the same state, also through bytes); the atom at 0, point masses, the grid pmf and its tail,
the compact empirical distribution.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from routing.stats.delay_sketch import DelaySketch
from tests.unit.stats.summary_helpers import PROPERTY, same_state, splits


def _delays(kind: str, seed: int) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    if kind == "lognormal":  # mean 100, cv 1
        s2 = math.log(2.0)
        return rng.lognormal(math.log(100.0) - s2 / 2, math.sqrt(s2), 100_000)
    if kind == "exponential":
        return rng.exponential(100.0, 100_000)
    x = rng.exponential(500.0, 100_000)  # an M/M/1 wait at rho 0.8: an atom of 0.2 at 0
    x[rng.random(100_000) < 0.2] = 0.0
    return x


QS = np.array([0.5, 0.9, 0.95, 0.99, 0.995, 0.999])


@pytest.mark.parametrize("kind", ["lognormal", "exponential", "wait"])
@pytest.mark.parametrize("seed", [0, 1])
def test_sketch_cdf_is_accurate_where_r_is_near_099(kind: str, seed: int) -> None:
    """Against the exact empirical CDF of the same data: |dF| <= 5e-4 everywhere tested, at most 2%
    of 1 - F at the 0.99 quantile (docs/decisions/delay-sketch.md), quantiles within alpha."""
    x = _delays(kind, seed)
    sketch = DelaySketch(relative_accuracy=0.005)
    for part in np.array_split(x, 5):
        sketch.add(part)
    points = np.quantile(x, QS)
    exact = np.searchsorted(np.sort(x), points, side="right") / len(x)
    error = np.abs(sketch.cdf(points) - exact)
    assert error.max() <= 5e-4, dict(zip(QS.tolist(), error.tolist(), strict=True))
    assert error[3] <= 0.02 * (1.0 - exact[3])
    assert np.abs(sketch.quantile(QS) / points - 1.0).max() <= 0.005
    assert sketch.count == len(x) and sketch.max == x.max() and sketch.min == x.min()


@st.composite
def delays_and_splits(draw: st.DrawFn) -> tuple[NDArray[np.float64], list[int]]:
    value = st.one_of(st.just(0.0), st.floats(0.0, 1e-3), st.floats(1e-3, 1e6, allow_nan=False))
    values = draw(st.lists(value, max_size=60))
    return np.array(values, dtype=np.float64), splits(draw, len(values))


@PROPERTY
@given(delays_and_splits())
def test_sketch_merges_are_exact_in_any_order(case: tuple[NDArray[np.float64], list[int]]) -> None:
    x, cuts = case
    whole = DelaySketch()
    whole.add(x)
    parts = []
    for a, b in itertools.pairwise(cuts):
        part = DelaySketch()
        part.add(x[a:b])
        parts.append(part)
    forward, backward = DelaySketch(), DelaySketch()
    for part in parts:
        forward.merge(part)
    for part in reversed(parts):
        backward.merge(part)
    assert same_state(forward.to_state(), whole.to_state())
    assert same_state(backward.to_state(), whole.to_state())
    assert same_state(DelaySketch.from_bytes(whole.to_bytes()).to_state(), whole.to_state())
    if len(x):
        grid = np.linspace(0.0, float(x.max()) * 1.1, 17)
        cdf = whole.cdf(grid)
        assert np.all(np.diff(cdf) >= 0) and cdf[-1] == 1.0


def test_sketch_atoms_point_masses_and_grid_pmf() -> None:
    s = DelaySketch()
    s.add([0.0, 0.0, 20.0, 20.0])  # half at 0, half at exactly 20
    assert s.cdf([-1.0, 0.0, 19.99, 20.0]).tolist() == [0.0, 0.5, 0.5, 1.0]
    assert s.quantile([0.0, 0.5, 0.75, 1.0]).tolist() == [0.0, 0.0, 20.0, 20.0]
    mass, tail = s.pmf_on_grid(10.0, 3)  # [0, 10), [10, 20), [20, 30): 20 is in the third cell
    assert mass.tolist() == [0.5, 0.0, 0.5] and tail == 0.0
    mass, tail = s.pmf_on_grid(10.0, 2)  # the grid ends at 20: that mass is beyond it, late
    assert mass.tolist() == [0.5, 0.0] and tail == 0.5
    x = _delays("lognormal", 4)
    s = DelaySketch()
    s.add(x)
    mass, tail = s.pmf_on_grid(5.0, 80)  # to 400 ms, about the 0.99 quantile
    exact = np.histogram(x, bins=np.arange(81) * 5.0)[0] / len(x)
    assert np.abs(mass - exact).max() < 5e-4
    assert tail == pytest.approx(np.mean(x >= 400.0), abs=2e-4)
    assert mass.sum() + tail == pytest.approx(1.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        s.add([1.0, -2.0])
    with pytest.raises(ValueError, match="different parameters"):
        s.merge(DelaySketch(0.01))
    empty = DelaySketch()
    assert math.isnan(float(empty.cdf(1.0))) and math.isnan(float(empty.quantile(0.5)))


@pytest.mark.parametrize("kind", ["lognormal", "exponential", "wait"])
def test_sketch_to_distribution_is_compact_and_keeps_the_tail(kind: str) -> None:
    x = _delays(kind, 2)
    s = DelaySketch()
    s.add(x)
    dist = s.to_distribution(max_points=200)
    assert len(dist.values) <= 200 < s.buckets
    assert sum(dist.probs) == pytest.approx(1.0, abs=1e-9)
    assert dist.mean == pytest.approx(x.mean(), rel=0.005)
    for q in (0.5, 0.9, 0.99):  # within 10% of 1 - F, near R = 0.99 included
        near = np.quantile(x, np.linspace(q - (1 - q) / 2, q + (1 - q) / 2, 21))
        exact = np.searchsorted(np.sort(x), near, side="right") / len(x)
        assert np.abs(dist.cdf(near) - exact).max() <= 0.1 * (1 - q)
    small = DelaySketch()
    small.add([5.0, 5.0, 7.0])
    assert small.to_distribution(200).values == pytest.approx((5.0, 7.0), rel=0.005)


@PROPERTY
@given(
    values=st.lists(st.floats(0.01, 1e6, allow_nan=False), min_size=1, max_size=300),
    q=st.floats(0.0, 1.0),
    alpha=st.sampled_from([0.005, 0.02, 0.1]),
)
def test_a_quantile_is_within_the_documented_relative_error(values: list[float], q: float, alpha: float) -> None:
    """The interpolated quantile lies in the bucket of the order statistic it stands for, so it
    is within 2 alpha / (1 - alpha) of it, relatively."""
    sketch = DelaySketch(relative_accuracy=alpha)
    sketch.add(values)
    rank = max(1, math.ceil(q * len(values)))
    exact = sorted(values)[rank - 1]
    estimate = float(sketch.quantile(q))
    assert abs(estimate - exact) <= 2 * alpha / (1 - alpha) * exact * (1 + 1e-9)
