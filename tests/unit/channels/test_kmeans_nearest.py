"""``routing.channels.kmeans.nearest``: the matrix-product path returns the labels of the direct
differences exactly (ties and near ties included), so ``kmeans`` keeps the contract's rules."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

km = importlib.import_module("routing.channels.kmeans")  # the package exports a function of that name


def direct(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The definition: argmin of Σ (x − c)², the lowest centre on a tie."""
    return np.argmin(((x[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2), axis=1)


@st.composite
def points_and_centres(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 40))
    k = draw(st.integers(1, 8))
    d = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["grid", "float", "offset", "copies"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "grid":  # small integers: many exact ties
        x = rng.integers(0, 3, (n, d)).astype(np.float64)
        c = rng.integers(0, 3, (k, d)).astype(np.float64)
    elif kind == "float":
        x, c = rng.random((n, d)), rng.random((k, d))
    elif kind == "offset":  # a large common offset: the product form cancels badly
        x, c = 1e6 + rng.random((n, d)), 1e6 + rng.random((k, d))
    else:  # points equal to centres and midpoints between two of them
        c = rng.random((k, d))
        picks = rng.integers(0, k, (n, 2))
        x = (c[picks[:, 0]] + c[picks[:, 1]]) / 2.0
    return x, c


@settings(max_examples=300, deadline=None)
@given(points_and_centres())
def test_the_product_path_equals_the_direct_differences(case: tuple[np.ndarray, np.ndarray]) -> None:
    x, c = case
    assert km.nearest(x, c, broadcast_max=0).tolist() == direct(x, c).tolist()
    assert km.nearest(x, c).tolist() == direct(x, c).tolist()


def test_an_exact_tie_goes_to_the_lowest_centre_on_the_product_path() -> None:
    x = np.array([[0.5, 0.5], [0.1, 0.1]])
    centres = np.array([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    assert km.nearest(x, centres, broadcast_max=0).tolist() == [0, 1]


PRODUCT = km.nearest  # the function itself, kept before the test below replaces the module's name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_labels_are_those_of_the_direct_differences(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole of k-means (seeding, Lloyd, restarts) on rows with many ties, with ``nearest``
    forced onto the product path, against the same run on the direct differences."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.random((120, 60)), 1)  # one decimal: many equal rows and ties
    monkeypatch.setattr(km, "nearest", km._nearest_direct)
    want = km.kmeans(x, 7, seed)
    monkeypatch.setattr(km, "nearest", lambda p, c: PRODUCT(p, c, broadcast_max=0))
    assert km.kmeans(x, 7, seed).tolist() == want.tolist()
