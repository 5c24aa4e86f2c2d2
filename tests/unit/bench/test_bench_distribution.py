"""The statistics of ``bench/distribution.py``'s Fig. 8 tables: the bootstrap interval of a ratio
of means and the "within noise" reading of the paper's bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.distribution import PC_VALUES, _ratio_interval, _within_noise


def test_an_exact_ratio_has_no_spread() -> None:
    opt = np.array([2.0, 3.5, 1.25, 4.0])
    assert _ratio_interval(opt.copy(), opt) == (1.0, 1.0)
    lo, hi = _ratio_interval(1.1 * opt, opt)
    assert lo == pytest.approx(1.1) and hi == pytest.approx(1.1)


def test_the_interval_holds_the_ratio_and_narrows_with_more_instances() -> None:
    rng = np.random.default_rng(3)
    opt = rng.uniform(1.0, 8.0, 400)
    app = opt * rng.choice([1.0, 1.0, 1.0, 1.3], size=400)
    wide = _ratio_interval(app[:40], opt[:40])
    narrow = _ratio_interval(app, opt)
    for (lo, hi), n in ((wide, 40), (narrow, 400)):
        point = app[:n].sum() / opt[:n].sum()
        assert 1.0 <= lo < point < hi
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_no_instances_give_no_interval() -> None:
    lo, hi = _ratio_interval(np.array([]), np.array([]))
    assert np.isnan(lo) and np.isnan(hi)


def _rows(lows: list[float]) -> list[dict[str, Any]]:
    return [{"p_c": p_c, "ci_greedy": (lo, lo + 0.05)} for p_c, lo in zip(PC_VALUES, lows, strict=True)]


def test_within_noise_needs_every_point_and_one_at_the_end() -> None:
    ok = [1.07, 1.06, 1.05, 1.04, 1.03, 1.02, 1.01, 1.0, 1.0, 1.0]
    assert _within_noise(_rows(ok), "greedy", 1.08)
    assert not _within_noise(_rows([1.09, *ok[1:]]), "greedy", 1.08)  # one point surely above the bound
    assert _within_noise(_rows([1.08, *ok[1:]]), "greedy", 1.08)  # at the bound is not above it
    assert not _within_noise(_rows([*ok[:-1], 1.001]), "greedy", 1.08)  # 1 is outside the last interval
