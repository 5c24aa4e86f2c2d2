"""The delay grid (``routing.reliability.grid``): mass, rounding and the cdf table's closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from routing.reliability.grid import CdfTable, Grid
from routing.stats.distributions import Exponential, Gamma, Lognormal, parse_distribution


def test_grid_keeps_mass_and_rounds_atoms() -> None:
    grid = Grid(step=0.5, n=256)
    pmf = grid.pmf(parse_distribution({"kind": "deterministic", "value": 10.2}))
    assert int(np.argmax(pmf)) == 20 and pmf.sum() == pytest.approx(1.0)
    both = grid.convolve(pmf, pmf)
    assert int(np.argmax(both)) == 40 and both.sum() == pytest.approx(1.0)
    beyond = grid.shift(pmf, 200.0)
    assert beyond.sum() == 0.0  # past the grid's end: late, never on time


def test_cdf_table_rows_in_blocks_equal_the_whole_table_expression() -> None:
    """CdfTable.rows works the closed forms out in place, block by block: the same bits as one
    expression over the whole table (several blocks here, kinds mixed and unmixed, cells <= 0)."""
    rng = np.random.default_rng(5)
    means, cvs = rng.uniform(1, 200, 150), rng.uniform(0.1, 2, 150)
    logn = [Lognormal(float(m), float(c)) for m, c in zip(means, cvs, strict=True)]
    expo = [Exponential(float(m)) for m in rng.uniform(1, 200, 150)]
    x = np.concatenate(([-1.0, 0.0], np.linspace(0.5, 900.0, 498)))
    xs = x[None, :]
    for dists in (logn, expo, logn + expo + [Gamma(2.0, 3.0)]):
        table = CdfTable(dists)
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
