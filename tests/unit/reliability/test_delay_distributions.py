"""The delay distributions (``routing.reliability.delay_distributions``): the wait pmfs against
the gamma cdf worked out on every point. The distributions along the routes are checked through
the predictor, against the reference and a per-path evaluation (``test_prediction_parity.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import special

from routing.reliability.delay_distributions import Evaluator
from routing.reliability.grid import Grid
from routing.reliability.queueing import WaitModel


@pytest.mark.parametrize("cd2", [0.05, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("sigma", [0.001, 0.5, 0.999])
def test_wait_pmfs_equal_the_gamma_cdf_differences(cd2: float, sigma: float) -> None:
    """The wait pmfs skip the incomplete gamma function where the cdf rounds to 1 and use e^-x
    for shape 1: the same masses as the cdf worked out everywhere, to rounding."""
    grid = Grid(step=0.5, n=2048)
    wait = WaitModel(mean=3.0, sigma=sigma, cd2=cd2)
    ev = SimpleNamespace(_waits={})
    got = Evaluator._wait_pmfs(ev, grid, [wait], np.array([grid.n]))[0]  # type: ignore[arg-type]
    edges = np.maximum((np.arange(grid.n + 1) - 0.5) * grid.step, 0.0)
    shape, scale = 1.0 / cd2, 3.0 / sigma * cd2
    cdf = 1.0 - sigma * special.gammaincc(shape, edges / scale)
    cdf[0] = 0.0
    assert np.max(np.abs(got - np.maximum(np.diff(cdf), 0.0))) < 1e-15
