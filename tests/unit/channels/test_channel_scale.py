"""The fast paths of channel re-clustering held to their oracle twins (docs/conventions.md §6):
windows by rows, the sparse Jaccard by sets, ``approx`` by sorting, weighted k-means by plain
k-means, the one-node-per-window ncut embedding by the full N x N matrix, the batched join rule by
one ``ChannelUnions.place`` per subscription; and ``recluster`` on dense and CSR matches."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from routing.channels import ChannelUnions, jaccard, jaccard_by_sets, join_isolated, plan_metrics, planner, recluster
from routing.channels import methods as channel_methods
from routing.channels.kmeans import _weighted_means, kmeans, kmeans_weighted, within_ss
from routing.channels.methods import (
    _ncut_embedding_weighted,
    approx,
    approx_by_sorting,
    spectral_ncut,
    spectral_ncut_sparse,
)
from routing.channels.similarity import (
    distinct_windows,
    isolated,
    jaccard_sparse,
    recent_windows,
    recent_windows_by_rows,
)

hit_matrices = st.integers(1, 14).flatmap(
    lambda n: st.integers(1, 9).flatmap(
        lambda m: st.lists(st.lists(st.booleans(), min_size=m, max_size=m), min_size=n, max_size=n)
    )
)


def _ids(n: int) -> list[str]:
    return [f"s{i:03d}" for i in range(n)][::-1]  # not in input order: the numbering matters


def _canonical(labels: Any) -> list[int]:
    """A partition as labels numbered by first appearance."""
    seen: dict[int, int] = {}
    return [seen.setdefault(int(v), len(seen)) for v in labels]


def _duplicated_hits(seed: int, n: int = 60, m: int = 30, distinct: int = 14) -> np.ndarray:
    """Match sets drawn from a few distinct rows, so equal windows are common (some rows empty)."""
    rng = np.random.default_rng(seed)
    base = rng.random((distinct, m)) < rng.uniform(0.05, 0.4)
    base[0] = False
    return np.asarray(base[rng.integers(distinct, size=n)], dtype=bool)


@settings(max_examples=80, deadline=None)
@given(hit_matrices, st.integers(1, 5))
def test_windows_and_sparse_jaccard_equal_their_oracles(rows: list[list[bool]], psi: int) -> None:
    hits = np.array(rows, dtype=bool)
    windows = recent_windows(hits, psi)
    assert np.array_equal(windows, recent_windows_by_rows(hits, psi))
    np.testing.assert_allclose(jaccard_sparse(windows).toarray(), jaccard_by_sets(windows), atol=1e-12)
    distinct, which, count = distinct_windows(windows)
    assert np.array_equal(distinct[which], windows)
    assert count.tolist() == np.bincount(which).tolist()
    assert len({row.tobytes() for row in distinct}) == len(distinct)


@settings(max_examples=120, deadline=None)
@given(hit_matrices, st.integers(1, 5), st.integers(2, 6))
def test_approx_equals_its_plain_twin_by_sorting(rows: list[list[bool]], k: int, window: int) -> None:
    hits = np.array(rows, dtype=bool)
    ids = _ids(len(rows))
    assert approx(hits, k, ids, window).tolist() == approx_by_sorting(hits, k, ids, window).tolist()
    assert approx(hits, k, ids).tolist() == approx_by_sorting(hits, k, ids).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_approx_equals_its_twin_on_hundreds_of_channels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    hits = rng.random((400, 40)) < 0.08  # ~300 distinct match sets: the window of 100 slides
    ids = [f"s{int(i)}" for i in rng.permutation(400)]
    assert approx(hits, 8, ids).tolist() == approx_by_sorting(hits, 8, ids).tolist()


@pytest.mark.parametrize("seed", range(40))
def test_weighted_kmeans_with_unit_weights_is_plain_kmeans(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, dims, k = int(rng.integers(1, 50)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    x = rng.normal(size=(n, dims))
    ones = np.ones(n, dtype=np.int64)
    assert _canonical(kmeans_weighted(x, ones, k, seed)) == _canonical(kmeans(x, k, seed))


@pytest.mark.parametrize("seed", range(10))
def test_weighted_kmeans_is_kmeans_on_the_copies(seed: int) -> None:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=10.0, size=(3, 2))
    x = np.concatenate([c + rng.normal(scale=0.1, size=(5, 2)) for c in centres])
    w = rng.integers(1, 4, size=len(x))
    copies = np.repeat(x, w, axis=0)
    weighted = np.repeat(kmeans_weighted(x, w, 3, seed), w)
    plain = kmeans(copies, 3, seed)
    assert _canonical(weighted) == _canonical(plain)
    assert within_ss(copies, weighted, 3) == pytest.approx(within_ss(copies, plain, 3))


@pytest.mark.parametrize("seed", range(20))
def test_weighted_means_add_in_bincount_order(seed: int) -> None:
    """The membership-matrix sums are bincount's floats bit for bit, so the fast means change no plan."""
    rng = np.random.default_rng(seed)
    n, dims, k = int(rng.integers(1, 3000)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
    w = rng.integers(1, 9, size=n).astype(np.float64)
    wx = w[:, None] * rng.normal(scale=rng.uniform(0.01, 100), size=(n, dims))
    labels = rng.integers(0, k, size=n).astype(np.int64)
    centres = rng.normal(size=(k, dims))
    flat = (labels[:, None] * dims + np.arange(dims)[None, :]).ravel()
    sums = np.bincount(flat, weights=wx.ravel(), minlength=k * dims).reshape(k, dims)
    mass = np.bincount(labels, weights=w, minlength=k)
    expected = np.where(mass[:, None] > 0, sums / np.where(mass > 0, mass, 1.0)[:, None], centres)
    assert np.array_equal(_weighted_means(wx, w, labels, centres), expected)


def _full_normalised(hits: np.ndarray, psi: int, sigma: float | None) -> tuple[np.ndarray, np.ndarray]:
    """The dense path's matrix: D^-1/2 A D^-1/2 on the non-isolated subscriptions, and which they are."""
    j = jaccard(recent_windows(hits, psi))
    inner = np.flatnonzero(~isolated(j))
    w = j[np.ix_(inner, inner)]
    a = np.where(w > 0, np.exp(-(1.0 - w) / sigma**2), 0.0) if sigma is not None else w
    d = a.sum(axis=1)
    return a / np.sqrt(d)[:, None] / np.sqrt(d)[None, :], inner


@pytest.mark.parametrize("sigma", [None, 0.7])
@pytest.mark.parametrize("seed", range(8))
def test_node_embedding_is_the_full_embedding(seed: int, sigma: float | None) -> None:
    """Lifted to the subscriptions, each eigenvector of the node matrix is an eigenvector of the full
    D^-1/2 A D^-1/2 with the same eigenvalue, and the top ones are the full matrix's top ones."""
    hits, psi, k = _duplicated_hits(seed), 4, 4
    full, inner = _full_normalised(hits, psi, sigma)
    distinct, which, count = distinct_windows(recent_windows(hits, psi))
    r = sparse.csr_matrix(distinct, dtype=np.float64)
    inter = (r @ r.T).toarray()
    size = distinct.sum(axis=1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(inter > 0, inter / (size[:, None] + size[None, :] - inter), 0.0)
    if sigma is not None:
        m = np.where(m > 0, np.exp(-(1.0 - m) / sigma**2), 0.0)
    nodes = np.unique(which[inner])
    assert sorted(nodes.tolist()) == sorted(set(which[inner].tolist()))
    c = count[nodes].astype(np.float64)
    mm = m[np.ix_(nodes, nodes)]
    d = mm @ c - 1.0
    b = np.sqrt(c / d)[:, None] * mm * np.sqrt(c / d)[None, :] - np.diag(1.0 / d)
    values, vectors = np.linalg.eigh(b)
    node_of = {int(g): p for p, g in enumerate(nodes)}
    lift = np.array([[node_of[int(which[i])]] for i in inner]).ravel()
    for lam, y in zip(values, vectors.T, strict=True):
        u = y[lift] / np.sqrt(c[lift])
        np.testing.assert_allclose(full @ u, lam * u, atol=1e-9)
    top = min(k, len(nodes))
    full_values = np.linalg.eigvalsh(full)[::-1][:top]
    np.testing.assert_allclose(values[::-1][:top], full_values, atol=1e-9)
    # and the embedding: rows of the top-K node eigenvectors, scaled to unit length
    points = _ncut_embedding_weighted(sparse.csr_matrix(mm), count[nodes], k, seed)
    assert points.shape == (len(nodes), top)
    np.testing.assert_allclose(np.linalg.norm(points, axis=1), 1.0, atol=1e-9)


def test_sparse_eigensolver_finds_the_dense_top_eigenvectors(monkeypatch: pytest.MonkeyPatch) -> None:
    hits = _duplicated_hits(3, n=400, m=80, distinct=150)
    distinct, _, count = distinct_windows(recent_windows(hits, 6))
    r = sparse.csr_matrix(distinct, dtype=np.float64)
    inter = sparse.csr_matrix(r @ r.T)
    inter.sort_indices()
    size = distinct.sum(axis=1).astype(np.float64)
    row_of = np.repeat(np.arange(len(distinct)), np.diff(inter.indptr))
    inter.data = inter.data / (size[row_of] + size[inter.indices] - inter.data)
    keep = np.flatnonzero((size > 0) & ((np.diff(inter.indptr) > 1) | (count > 1)))
    mm = sparse.csr_matrix(inter[keep][:, keep])
    dense = _ncut_embedding_weighted(mm, count[keep], 5, 0)
    monkeypatch.setattr(channel_methods, "DENSE_EIGEN_LIMIT", 0)
    fast = _ncut_embedding_weighted(mm, count[keep], 5, 0)
    # the same unit rows up to an orthogonal change of basis of the eigenspace: equal Gram matrices
    np.testing.assert_allclose(fast @ fast.T, dense @ dense.T, atol=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_sparse_ncut_is_a_valid_deterministic_plan_that_beats_flooding(seed: int) -> None:
    hits = _duplicated_hits(seed, n=200, m=60, distinct=25)
    ids, k = _ids(len(hits)), 5
    labels = spectral_ncut_sparse(hits, 5, k, ids, seed)
    assert np.array_equal(labels, spectral_ncut_sparse(hits, 5, k, ids, seed))
    assert set(labels.tolist()) <= set(range(k))
    firsts = [min(sid for sid, c in zip(ids, labels.tolist(), strict=True) if c == ch) for ch in sorted(set(labels))]
    assert firsts == sorted(firsts)  # numbered by smallest id
    fp = plan_metrics(hits, labels).false_positives
    assert fp <= plan_metrics(hits, np.zeros(len(hits), dtype=np.int64)).false_positives
    dense = spectral_ncut(hits, jaccard(recent_windows(hits, 5)), k, ids, seed)
    assert fp <= 1.5 * plan_metrics(hits, dense).false_positives + 10


def test_sparse_ncut_separates_disjoint_blocks_like_the_dense_path() -> None:
    blocks = np.zeros((40, 20), dtype=bool)
    for b in range(4):
        blocks[b * 10 : (b + 1) * 10, b * 5 : b * 5 + 5] = np.random.default_rng(b).random((10, 5)) < 0.6
        blocks[b * 10, b * 5 : b * 5 + 5] = True
    ids = _ids(40)
    sparse_plan = spectral_ncut_sparse(blocks, 20, 4, ids, 0)
    dense_plan = spectral_ncut(blocks, jaccard(recent_windows(blocks, 20)), 4, ids, 0)
    by_block = [b for b in range(4) for _ in range(10)]
    assert _canonical(sparse_plan) == _canonical(dense_plan) == _canonical(by_block)


def _join_one_by_one(hits: np.ndarray, labels: np.ndarray, ids: list[str], k: int) -> list[int]:
    """The plain twin of ``join_isolated``: one ``ChannelUnions.place`` per unplaced subscription."""
    out = labels.copy()
    unions = ChannelUnions(k, hits.shape[1])
    for i, c in enumerate(labels.tolist()):
        if c >= 0:
            unions.add(c, hits[i])
    for i in sorted((i for i in range(len(labels)) if labels[i] < 0), key=lambda i: ids[i]):
        out[i] = unions.place(hits[i])
    return [int(v) for v in out]


@settings(max_examples=100, deadline=None)
@given(hit_matrices, st.integers(1, 4), st.randoms(use_true_random=False))
def test_join_isolated_equals_one_placement_at_a_time(rows: list[list[bool]], k: int, rnd: Any) -> None:
    hits = np.array(rows, dtype=bool)
    hits[[i for i in range(len(rows)) if rnd.random() < 0.4]] = False  # runs of empty match sets
    labels = np.array([rnd.choice([-1, -1, *range(k)]) for _ in rows], dtype=np.int64)
    ids = _ids(len(rows))
    assert join_isolated(hits, labels, ids, k).tolist() == _join_one_by_one(hits, labels, ids, k)


def test_recluster_reads_csr_and_uses_the_sparse_ncut_from_its_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    hits = _duplicated_hits(1, n=120, m=40, distinct=20)
    ids = tuple(_ids(len(hits)))
    for method in ("approx", "spectral-ncut", "auto"):
        dense_labels, used = recluster(hits, ids, 4, method)
        csr_labels, csr_used = recluster(sparse.csr_matrix(hits), ids, 4, method)
        assert np.array_equal(dense_labels, csr_labels) and used == csr_used
    assert np.array_equal(recluster(hits, ids, 4)[0], spectral_ncut(hits, jaccard(recent_windows(hits, 20)), 4, ids, 0))
    monkeypatch.setattr(planner, "SPARSE_NCUT_FROM", 10)
    online = spectral_ncut_sparse(
        hits, 20, 4, ids, 0, restarts=planner.RECLUSTER_RESTARTS, tol=planner.RECLUSTER_EIGEN_TOL
    )
    assert np.array_equal(recluster(hits, ids, 4)[0], online)


def test_recluster_takes_the_jobs_restarts_and_plan_channels_the_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    from routing.channels.kmeans import RESTARTS

    hits = _duplicated_hits(3, n=150, m=40, distinct=30)
    ids = tuple(_ids(len(hits)))
    monkeypatch.setattr(planner, "SPARSE_NCUT_FROM", 10)
    seen: list[tuple[int, float]] = []
    real = channel_methods.spectral_ncut_sparse

    def spy(*args: Any, restarts: int = RESTARTS, tol: float = 0.0, **kw: Any) -> np.ndarray:
        seen.append((restarts, tol))
        return real(*args, restarts=restarts, tol=tol, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(planner, "spectral_ncut_sparse", spy)
    recluster(hits, ids, 4, "spectral-ncut")
    recluster(hits, ids, 4, "auto")  # its spectral-ncut candidate too
    online = (planner.RECLUSTER_RESTARTS, planner.RECLUSTER_EIGEN_TOL)
    assert seen and all(call == online for call in seen) and online[0] < RESTARTS
    seen.clear()
    prep = planner.PreparedInstance(planner.ChannelInstance(4, 20, 0, ids, (), (), (), {}), hits)
    planner.run_method(prep, "spectral-ncut")  # what plan channels runs
    assert seen == [(RESTARTS, 0.0)]


@pytest.mark.parametrize("seed", range(5))
def test_fewer_kmeans_restarts_are_the_best_of_the_first_ones(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(60, 3))
    w = rng.integers(1, 4, size=60)

    def ss(labels: np.ndarray) -> float:
        return within_ss(np.repeat(x, w, axis=0), np.repeat(labels, w), 4)

    runs = [ss(kmeans_weighted(x, w, 4, seed, restarts=r)) for r in range(1, 11)]
    assert all(later <= earlier for earlier, later in itertools.pairwise(runs))
    assert np.array_equal(kmeans_weighted(x, w, 4, seed, restarts=10), kmeans_weighted(x, w, 4, seed))
    with pytest.raises(ValueError, match="restarts"):
        kmeans_weighted(x, w, 4, seed, restarts=0)


def test_recluster_refuses_dense_similarity_methods_beyond_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from routing.channels import ChannelError

    hits = _duplicated_hits(2, n=50, m=30)
    ids = tuple(_ids(len(hits)))
    monkeypatch.setattr(planner, "DENSE_SIMILARITY_LIMIT", 20)
    with pytest.raises(ChannelError, match="dense 50 x 50 similarity"):
        recluster(hits, ids, 3, "kmeans")
    _, chosen = recluster(hits, ids, 3, "auto", budget_ms=10**9)
    assert chosen not in ("kmeans", "spectral-rassoc")


@settings(max_examples=150, deadline=None)
@given(hit_matrices)
def test_first_appearance_numbers_distinct_rows_as_a_dict_of_their_bytes_does(rows: list[list[bool]]) -> None:
    from routing.channels.similarity import first_appearance

    hits = np.array(rows, dtype=bool)
    keys: dict[bytes, int] = {}
    plain = [keys.setdefault(row.tobytes(), len(keys)) for row in hits]  # the twin: one dict step per row
    assert first_appearance(hits).tolist() == plain
    assert first_appearance(hits[:, :0]).tolist() == [0] * len(hits)
    assert first_appearance(hits[:0]).tolist() == []
