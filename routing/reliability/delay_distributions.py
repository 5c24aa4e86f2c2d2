"""The delay distributions of the reliability predictor, on the grid and along the route tree.

The distribution pass of :func:`routing.reliability.prediction.predict` (docs/reference/reliability-model.md §3),
after Pongthawornkamol, Nahrstedt and Wang ("Towards Timeliness and Reliability Analysis of
Distributed Content-based Publish/Subscribe Systems over Best-effort Networks", §4.3-4.4,
Eq. 5-11). The delay to a broker depends on the publisher and the path, not on the content, so
every node of the route tree (:class:`routing.reliability.system.RouteTree`) carries one
departure distribution: its parent's convolved with its link's delay and its broker's delay
(wait plus service), worked out level by level with batched FFTs (:class:`Evaluator`). The
paper propagates C_l(a, d) link by link; the convolutions commute, so evaluating them along
each route, sharing route prefixes, gives the same numbers.

A subscriber's on-time probability is one point of the convolution with its own link,
P(A + L <= lifetime) = sum over cells u of L[u] P(A <= lifetime - u), and per broker one matrix
product gives it for every (node, subscriber) pair there (:func:`on_time_probabilities`);
:func:`reliability_from_on_time` weighs them into R'_s. Sums of non-negative delays are causal:
the first m points of every pmf depend on the first m points of its inputs only, so a pass over
the points up to the longest lifetime is exact there (:func:`lifetime_cells`), and tables may
hold each node on fewer points (:class:`Ragged`, :func:`fft_lengths`).

Symbols: ``m`` the points of a pass, ``k`` the points of one batch, ``h`` (``grid.step``) the
grid step in ms; a broker's delay pmf is zero where rho >= 1 (every delivery through it is late).

Examples
--------
>>> import math
>>> from routing.reliability.prediction import compile_prediction
>>> from routing.reliability.propagation import broker_queues, compile_paths, fit_grid, wait_variance
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> zero = {"kind": "deterministic", "value": 0}
>>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": zero},
...                     {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": zero}],
...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> c = compile_prediction(system)
>>> paths = compile_paths(c.overlay, c.matching, c.routes)
>>> q = broker_queues(c.overlay, paths, "mm1", None)
>>> grid = fit_grid(c.overlay, c.routes, paths, q.mean_wait, wait_variance(q.waits), 4096)
>>> ev = Evaluator(c.overlay, c.routes, paths, grid)
>>> rho = paths.broker_rate * 5.0
>>> departure = ev.departures(grid.n, ev.broker_delays(grid.n, "mm1", rho, q))[0]
>>> round(grid.cdf_at(departure, 20.0), 3), round(1 - math.exp(-3), 3)  # mm1: Exp(mean 5) + 5 ms wait
(0.95, 0.95)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.fft as sfft
from numpy.typing import NDArray
from scipy import special

from routing.reliability.allocation import populated_zeros
from routing.reliability.grid import CdfTable, Grid, pmf_rows
from routing.reliability.propagation import Paths, Queues
from routing.reliability.queueing import WaitModel, mm1_wait
from routing.reliability.system import Overlay, RouteTree
from routing.stats.distributions import Distribution

__all__ = [
    "Evaluator",
    "LinkCdf",
    "Ragged",
    "fft_lengths",
    "lifetime_cells",
    "on_time_probabilities",
    "reliability_from_on_time",
    "sliding_rows",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_BATCH_VALUES = 1 << 18  # values (2 MiB of float64) per batched FFT: see _batch_rows


@dataclass(frozen=True, eq=False)
class _BrokerGroup:
    """The leaves at one broker: its nodes and subscribers, and each leaf's position in both."""

    leaves: IntArray
    nodes: IntArray
    node_pos: IntArray
    subs: IntArray
    sub_pos: IntArray


def _batch_rows(fft: int) -> int:
    """Rows per batched FFT of length ``fft``: about ``_BATCH_VALUES`` values, 16 to 512 rows.
    A batch's buffers then stay in the CPU's caches between the steps that read and write them
    (gather, rfft, product, irfft, truncation): long FFTs want few rows, the short FFTs of the
    reliability pass a few hundred (docs/decisions/qos-prediction-fft-batches.md)."""
    return max(16, min(512, _BATCH_VALUES // max(fft, 1)))


def _broker_groups(ov: Overlay, tree: RouteTree) -> list[_BrokerGroup]:
    """The leaves grouped by broker (brokers in order, a broker's leaves by subscriber): every
    array is worked out once for all leaves, and a group holds slices of them."""
    n_b = len(ov.broker_ids)
    home = ov.link_source_broker[ov.subscriber_link]
    sub_order = np.argsort(home, kind="stable")
    sub_start = np.searchsorted(home[sub_order], np.arange(n_b + 1))
    sub_local = np.empty(len(home), dtype=np.int64)
    sub_local[sub_order] = np.arange(len(home)) - sub_start[home[sub_order]]
    node_order = np.argsort(tree.node_broker, kind="stable").astype(np.int64)
    node_start = np.searchsorted(tree.node_broker[node_order], np.arange(n_b + 1))
    node_local = np.empty(len(node_order), dtype=np.int64)
    node_local[node_order] = np.arange(len(node_order)) - node_start[tree.node_broker[node_order]]
    leaf_broker = tree.node_broker[tree.leaf_node]
    # By broker, then subscriber: one stable sort of a combined key (the order of np.lexsort of
    # the two keys, and cheaper).
    order = np.argsort(leaf_broker * max(len(home), 1) + tree.leaf_subscriber, kind="stable").astype(np.int64)
    node_pos = node_local[tree.leaf_node[order]]
    sub_pos = sub_local[tree.leaf_subscriber[order]]
    sub_order = sub_order.astype(np.int64)
    if not len(order):
        return []
    bounds = np.flatnonzero(np.diff(leaf_broker[order])) + 1
    starts, ends = np.append(0, bounds).tolist(), np.append(bounds, len(order)).tolist()
    out: list[_BrokerGroup] = []
    for lo, hi, b in zip(starts, ends, leaf_broker[order[starts]].tolist(), strict=True):
        out.append(
            _BrokerGroup(
                leaves=order[lo:hi],
                nodes=node_order[node_start[b] : node_start[b + 1]],
                node_pos=node_pos[lo:hi],
                subs=sub_order[sub_start[b] : sub_start[b + 1]],
                sub_pos=sub_pos[lo:hi],
            )
        )
    return out


class Evaluator:
    """The delay distributions of one compiled system on one grid, truncated to the first ``m``
    points: for causal sums of non-negative delays the first m points of every pmf depend on
    the first m points of its inputs only, so a pass over m points is exact there (reliability
    needs the points up to the longest lifetime only). Inputs shared by every queue state
    (link and service pmfs, the subscriber links) are computed once."""

    def __init__(self, ov: Overlay, tree: RouteTree, paths: Paths, grid: Grid) -> None:
        self.ov, self.tree, self.paths, self.grid = ov, tree, paths, grid
        self._links: dict[int, tuple[IntArray, FloatArray]] = {}
        self._services: dict[int, tuple[IntArray, FloatArray]] = {}
        self._waits: dict[tuple[int, float, float, float], FloatArray] = {}
        self._leaf_link_pmf: dict[int, tuple[IntArray, FloatArray]] = {}
        self._link_table: CdfTable | None = None
        self._link_cdf: LinkCdf | None = None
        self._link_row: tuple[IntArray, IntArray, CdfTable] | None = None
        self.subscriber_link_row = np.zeros(0, dtype=np.int64)
        self.groups = _broker_groups(ov, tree)

    def sub(self, m: int) -> Grid:
        return Grid(self.grid.step, m)

    def link_pmfs(self, m: int) -> tuple[IntArray, FloatArray]:
        """Per link into a broker that some node uses: its row, and the pmf rows on m points."""
        if m not in self._links:
            row, _, table = self._link_rows()
            self._links[m] = (row, pmf_rows(self.sub(m), table.dists))
        return self._links[m]

    def _link_rows(self) -> tuple[IntArray, IntArray, CdfTable]:
        """Per link, its row among the links into a broker that some node uses (-1 if none);
        per row, its link and delay."""
        if self._link_row is None:
            used = np.unique(self.tree.node_link)
            row = np.full(len(self.ov.link_from), -1, dtype=np.int64)
            row[used] = np.arange(len(used))
            self._link_row = (row, used, CdfTable([self.ov.link_delay[i] for i in used.tolist()]))
        return self._link_row

    def hops(self, rows: IntArray, k: int, delay: FloatArray, keep: bool, padded: bool = False) -> FloatArray:
        """The pmfs (k points) of link delay plus broker delay (``delay``) of these link rows;
        with ``keep``, the link pmfs on k points are kept for other calls (:meth:`link_pmfs`);
        with ``padded``, each row is followed by zeros up to the FFT length of k points (as
        :meth:`departure_table` transforms them). The inputs are zero-padded in one buffer
        (rfft's own padding allocates and zeroes a new array per call)."""
        _, link, table = self._link_rows()
        size = sfft.next_fast_len(2 * k - 1, real=True)
        buf = np.zeros((len(rows), size))
        if keep:
            buf[:, :k] = self.link_pmfs(k)[1][rows]
        else:
            edges = (np.arange(k + 1, dtype=np.float64) - 0.5) * self.grid.step
            c = table.rows(rows, np.maximum(edges, 0.0))
            c[:, 0] = 0.0
            np.maximum(np.diff(c, axis=1), 0.0, out=buf[:, :k])
        spec = sfft.rfft(buf, axis=1)
        buf[:, :k] = delay[self.ov.link_broker[link[rows]], :k]
        spec *= sfft.rfft(buf, axis=1)
        out: FloatArray = buf if padded else np.empty((len(rows), k))
        np.maximum(sfft.irfft(spec, size, axis=1)[:, :k], 0.0, out=out[:, :k])
        return out

    def subscriber_link_table(self) -> CdfTable:
        """The distinct subscriber-link delays; ``subscriber_link_row`` gives each subscriber's."""
        if self._link_table is None:
            # Equal DISTs share one object (the parse is memoised), so identity finds most repeats.
            delays = [self.ov.link_delay[i] for i in self.ov.subscriber_link.tolist()]
            ids = np.fromiter(map(id, delays), dtype=np.int64, count=len(delays))
            _, first, rows = np.unique(ids, return_index=True, return_inverse=True)
            dists = [delays[i] for i in first.tolist()]
            rows = rows.reshape(-1).astype(np.int64)
            self.subscriber_link_row = rows
            self._link_table = CdfTable(dists)
        return self._link_table

    def subscriber_link_cdf(self) -> LinkCdf:
        """The cdfs of the distinct subscriber-link delays at the cell edges (shared by the
        reliability and the p95 pass, which read many of the same points)."""
        if self._link_cdf is None:
            self._link_cdf = LinkCdf(self.subscriber_link_table(), self.grid.step)
        return self._link_cdf

    def subscriber_link_pmfs(self, m: int) -> tuple[IntArray, FloatArray]:
        """Per subscriber, a row of the distinct subscriber-link delay pmfs on m points."""
        if m not in self._leaf_link_pmf:
            pmf = np.diff(self.subscriber_link_cdf().prefix(m + 1), axis=1)
            self._leaf_link_pmf[m] = (self.subscriber_link_row, np.maximum(pmf, 0.0, out=pmf))
        return self._leaf_link_pmf[m]

    def broker_delays(
        self, m: int, model: str, rho: FloatArray, q: Queues, lengths: IntArray | None = None
    ) -> FloatArray:
        """Per broker, the pmf of wait plus service (zero where rho >= 1: every delivery is late).
        ``lengths`` may ask for fewer points per broker (the rest stays 0, and a broker asked for
        0 points is left all 0): by causality those first points are the same."""
        grid = self.sub(m)
        ov = self.ov
        n_b = len(ov.broker_ids)
        need = np.full(n_b, m, dtype=np.int64) if lengths is None else np.minimum(lengths, m)
        if m not in self._services:
            dists: dict[Distribution, int] = {}
            row = np.array([dists.setdefault(d, len(dists)) for d in ov.service], dtype=np.int64)
            self._services[m] = (row, pmf_rows(grid, list(dists)))
        row, pmfs = self._services[m]
        out = populated_zeros((n_b, m))
        tau = np.array([d.mean for d in ov.service])
        todo: list[int] = []
        for b in range(n_b):
            w = q.waits[b]
            if rho[b] >= 1.0 or need[b] <= 0:
                continue
            if model == "mm1":
                out[b] = grid.shift(pmfs[row[b]], mm1_wait(float(rho[b]), float(tau[b])))
            elif w.mean <= 0.0:
                out[b] = pmfs[row[b]]
            else:
                todo.append(b)
        by_length = need[todo]
        for k in np.unique(by_length).tolist():
            brokers = np.asarray(todo, dtype=np.int64)[by_length == k]
            size = sfft.next_fast_len(2 * k - 1, real=True)
            service = sfft.rfft(pmfs[:, :k], size, axis=1)  # per distinct service distribution
            batch = _batch_rows(size)
            for lo in range(0, len(brokers), batch):
                chunk = brokers[lo : lo + batch]
                wait = self._wait_pmfs(grid, [q.waits[b] for b in chunk.tolist()], need[chunk], size)
                wait = sfft.rfft(wait, axis=1)
                wait *= service[row[chunk]]
                out[chunk, :k] = np.maximum(sfft.irfft(wait, size, axis=1)[:, :k], 0.0)
        return out

    def _wait_pmfs(self, grid: Grid, waits: Sequence[WaitModel], lengths: IntArray, columns: int = 0) -> FloatArray:
        """Grid pmfs of the waits (atom 1 - sigma at 0, gamma body of shape 1 / c_D^2), row r on
        its first ``lengths[r]`` points (0 beyond, up to ``columns`` if that is more: zero padding
        for an FFT), memoised per (points, mean, sigma, c_D^2).

        The cdf is 1 - sigma Q(shape, x / scale) with Q the regularised upper incomplete gamma
        function. Where sigma Q is below 2^-56 the cdf rounds to exactly 1, so Q is evaluated
        only before that point (``gammainccinv``), which changes no value; for shape 1 (c_D^2 = 1:
        M/M/1, and M/G/1 with exponential service) Q(1, x) = e^-x, to a few ulps of ``gammaincc``
        and cheaper."""
        width = int(lengths.max()) if len(lengths) else 0
        out = np.zeros((len(waits), max(width, columns)))
        missing: list[int] = []
        for i, (w, k) in enumerate(zip(waits, lengths.tolist(), strict=True)):
            found = self._waits.get((k, w.mean, w.sigma, w.cd2))
            if found is None:
                missing.append(i)
            else:
                out[i, :k] = found
        if not missing:
            return out
        ws = [waits[i] for i in missing]
        k_of = lengths[missing]
        edges = np.maximum((np.arange(width + 1, dtype=np.float64) - 0.5) * grid.step, 0.0)
        shape = np.array([1.0 / w.cd2 for w in ws])
        sigma = np.array([w.sigma for w in ws])
        scale = np.array([w.mean / w.sigma for w in ws]) / shape
        with np.errstate(all="ignore"):
            cut = special.gammainccinv(shape, 2.0**-56 / sigma) * scale
        stop = np.where(np.isfinite(cut), np.searchsorted(edges, cut, side="right") + 1, width + 1)
        stop = np.minimum(stop, k_of + 1)
        # Row r on its first stop[r] edges, as one flat array (not the ufunc's where=: with
        # broadcast inputs, scipy 1.17's gammaincc writes out of bounds).
        row = np.repeat(np.arange(len(ws)), stop)
        col = np.arange(len(row)) - np.repeat(np.cumsum(stop) - stop, stop)
        x = edges[col] / scale[row]
        expo = np.abs(shape[row] - 1.0) <= 1e-12
        q = np.zeros((len(ws), width + 1))
        q[row[expo], col[expo]] = np.exp(-x[expo])
        q[row[~expo], col[~expo]] = special.gammaincc(shape[row[~expo]], x[~expo])
        c = 1.0 - sigma[:, None] * q
        c[:, 0] = 0.0
        fresh = np.maximum(np.diff(c, axis=1), 0.0)
        fresh[np.arange(width)[None, :] >= k_of[:, None]] = 0.0
        out[missing, :width] = fresh
        for j, (w, k) in enumerate(zip(ws, k_of.tolist(), strict=True)):
            self._waits[(k, w.mean, w.sigma, w.cd2)] = fresh[j, :k]
        return out

    def departures(self, m: int, delay: FloatArray) -> FloatArray:
        """Per node, the pmf of (publication to departure from the node's broker) on m points
        (:meth:`departure_table`, as one row per node)."""
        table = self.departure_table(m, delay)
        out: FloatArray = table.flat.reshape(-1, m)[table.off // m]
        return out

    def departure_table(self, m: int, delay: FloatArray, lengths: IntArray | None = None) -> Ragged:
        """Per node, the pmf of (publication to departure from the node's broker), m points:
        level by level, each node's departure is its parent's convolved with its link's delay
        and its broker's delay, a hop (batched FFTs). ``lengths`` may ask for fewer points per
        node (never fewer for a parent than for its children; :func:`fft_lengths` rounds them
        up), and for none (0). A node behind a broker whose delay pmf is all zero (rho >= 1)
        stays 0 without any work. ``delay`` is read on as many points as the nodes at its broker
        ask for; a hop is worked out on as many points as the nodes behind its link ask for.

        The nodes are laid out by depth and length, so that each batch of an FFT is one block
        of the table (no scatter) and the table holds each node on its own length only."""
        tree, paths = self.tree, self.paths
        n_nodes = len(tree.node_link)
        size = fft_lengths(m, lengths) if lengths is not None else np.full(n_nodes, m, dtype=np.int64)
        live_broker: NDArray[np.bool_] = np.asarray(delay.any(axis=1))
        live = live_broker[tree.node_broker] & (size > 0)
        for d in range(1, len(paths.depth_start) - 1):
            idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
            live[idx] &= live[tree.node_parent[idx]]
        keep = lengths is None  # every queue state of the reliability pass reads the same link pmfs
        table = Ragged.of(size, 2 * tree.node_depth + ~live)  # per depth, the live nodes first
        row, _, _ = self._link_rows()
        link_row = row[tree.node_link]
        # Per length, the hop of every link row that a live node (below the roots) of that length uses.
        spectra: dict[int, tuple[IntArray, NDArray[np.complex128]]] = {}
        below = live & (tree.node_depth > 0)
        for k in np.unique(size[below]).tolist():
            rows = np.unique(link_row[below & (size == k)])
            fft = sfft.next_fast_len(2 * k - 1, real=True)
            spec = populated_zeros((len(rows), fft // 2 + 1), np.complex128)
            step = _batch_rows(fft)
            for lo in range(0, len(rows), step):
                spec[lo : lo + step] = sfft.rfft(self.hops(rows[lo : lo + step], k, delay, keep, True), axis=1)
            where = np.full(len(row), -1, dtype=np.int64)
            where[rows] = np.arange(len(rows))
            spectra[k] = (where, spec)
        for first, count, k in table.runs:
            nodes = table.order[first : first + count]
            if not live[nodes[0]]:
                continue
            at = int(table.off[nodes[0]])
            if tree.node_depth[nodes[0]] == 0:  # the publishers' own links
                table.flat[at : at + len(nodes) * k] = self.hops(link_row[nodes], k, delay, keep).reshape(-1)
                continue
            fft = sfft.next_fast_len(2 * k - 1, real=True)
            where, spec_of = spectra[k]
            # The parents' rows, zero-padded to the FFT's length in one buffer for the whole run
            # (rfft's own padding allocates and zeroes a new array per call, as much as the FFT).
            step = _batch_rows(fft)
            padded = np.zeros((min(len(nodes), step), fft))
            for lo in range(0, len(nodes), step):
                batch = nodes[lo : lo + step]
                parents, inverse = _distinct(tree.node_parent[batch])
                distinct = len(parents) == len(batch)
                if distinct:  # each its own parent: in the batch's order, no gather after the FFT
                    parents = tree.node_parent[batch]
                rows = padded[: len(parents)]
                rows[:, :k] = sliding_rows(table.flat, k)[table.off[parents]]
                spec = sfft.rfft(rows, axis=1)
                if not distinct:
                    spec = spec[inverse]
                spec *= spec_of[where[link_row[batch]]]
                block = table.flat[at + lo * k : at + (lo + len(batch)) * k].reshape(len(batch), k)
                np.maximum(sfft.irfft(spec, fft, axis=1)[:, :k], 0.0, out=block)
        return table


def _distinct(x: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(x, return_inverse=True)``, without sorting when x is already in order (as
    the parents of the nodes of one depth are where the route tree lists children parent by
    parent)."""
    if len(x) and bool((x[1:] >= x[:-1]).all()):
        new = np.empty(len(x), dtype=np.bool_)
        new[0] = True
        np.not_equal(x[1:], x[:-1], out=new[1:])
        inverse: IntArray = np.cumsum(new) - 1
        return x[new], inverse
    values, inverse = np.unique(x, return_inverse=True)
    return values, inverse.reshape(-1)


def sliding_rows(flat: FloatArray, k: int) -> FloatArray:
    """Every run of k consecutive values of a contiguous 1-d array, as a read-only view (row j:
    ``flat[j:j + k]``): ``sliding_window_view`` without its argument checks, which cost more
    than the reads in the loops that use this."""
    step = flat.strides[0]
    out: FloatArray = np.ndarray((len(flat) - k + 1, k), dtype=flat.dtype, buffer=flat, strides=(step, step))
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class Ragged:
    """Per node a row of its own length in one flat array: row n is ``flat[off[n]:off[n] +
    size[n]]`` (no row where size is 0). The rows lie in ``order``, in runs of equal length
    (``runs``: first position in ``order``, count, length)."""

    flat: FloatArray
    off: IntArray
    size: IntArray
    order: IntArray
    runs: list[tuple[int, int, int]]

    @classmethod
    def of(cls, size: IntArray, group: IntArray) -> Ragged:
        """Zero rows of these sizes, laid out by group and then size (a run never spans two
        groups)."""
        order = np.lexsort((size, group))
        order = order[size[order] > 0]
        sizes = size[order]
        off = np.zeros(len(size), dtype=np.int64)
        off[order] = np.cumsum(sizes) - sizes
        change = (np.diff(sizes, prepend=-1) != 0) | (np.diff(group[order], prepend=-1) != 0)
        first = np.flatnonzero(change)
        count = np.diff(np.append(first, len(order)))
        runs = list(zip(first.tolist(), count.tolist(), sizes[first].tolist(), strict=True))
        return cls(populated_zeros(int(sizes.sum())), off, size, order, runs)

    def rows(self, index: IntArray, k: int) -> FloatArray:
        """The first k points of these rows (each at least k long), as a new array."""
        out: FloatArray = sliding_rows(self.flat, k)[self.off[index]]
        return out

    def cumsum(self) -> None:
        """Every row, in place, by its cumulative sum."""
        for first, count, k in self.runs:
            at = int(self.off[self.order[first]])
            block = self.flat[at : at + count * k].reshape(count, k)
            np.cumsum(block, axis=1, out=block)


def fft_lengths(m: int, lengths: IntArray) -> IntArray:
    """The points :meth:`Evaluator.departure_table` works out per node for ``lengths``: rounded
    up to a multiple of about m / 32, so that nodes of one size share their FFT size and hop
    spectra. (Coarser steps share more parent transforms but make every row longer:
    docs/decisions/qos-prediction-fft-batches.md.)"""
    step = 1 << max(int(m).bit_length() - 6, 5)
    out: IntArray = np.where(lengths > 0, np.minimum(m, -(-np.maximum(lengths, 1) // step) * step), 0)
    return out


def lifetime_cells(grid: Grid, lifetimes: FloatArray) -> tuple[IntArray, FloatArray]:
    """Per lifetime, (i, f) with P(X <= lifetime) = (1 - f) cum[i] + f cum[i + 1] as
    :meth:`Grid.cdf_at` interpolates (i = -1: before the first cell edge, probability 0)."""
    edges = (np.arange(grid.n, dtype=np.float64) + 0.5) * grid.step
    i = np.searchsorted(edges, lifetimes, side="right") - 1
    top = i >= grid.n - 1
    i = np.minimum(i, grid.n - 1)
    safe = np.clip(i, 0, grid.n - 2) if grid.n > 1 else np.zeros_like(i)
    f = np.where(
        (i < 0) | top, 0.0, (lifetimes - edges[safe]) / (edges[np.minimum(safe + 1, grid.n - 1)] - edges[safe])
    )
    return i.astype(np.int64), f


def on_time_probabilities(
    ev: Evaluator, m: int, departures: Sequence[FloatArray], cells: tuple[IntArray, FloatArray]
) -> FloatArray:
    """P(departure + subscriber link <= lifetime) per (queue state, leaf, lifetime class): per
    broker one matrix product of the departure cdfs around each lifetime with the subscriber
    links' pmfs there (the on-time point of the convolution, not all of it).

    At lifetime cell i with interpolation f (:func:`lifetime_cells`), P = sum over link cells
    u of L[u] ((1 - f) C[i - u] + f C[i + 1 - u]) (C[< 0] = 0, C[>= m] = C[m - 1]): the cdf's
    cells i - top .. i + 1 (top = min(i + 1, m - 1)) weighted by (1 - f) L and f L reversed."""
    tree = ev.tree
    cell, frac = cells
    n_t, n_e = len(cell), len(departures)
    n_nodes = len(tree.node_link)
    out = populated_zeros((len(tree.leaf_node), n_e, n_t))
    alive = np.zeros(n_nodes, dtype=np.bool_)
    for dep in departures:
        alive |= dep.any(axis=1)
    if not alive.any():  # every path crosses an overloaded broker: nothing is ever on time
        return out.transpose(1, 0, 2)
    cum = populated_zeros((n_nodes, n_e, m + 2))  # cum[:, e, j + 1] = C[j], and C[m - 1] once more at the end
    for e, dep in enumerate(departures):
        np.cumsum(dep, axis=1, out=cum[:, e, 1 : m + 1])
    cum[:, :, m + 1] = cum[:, :, m]
    link_row, link_pmf = ev.subscriber_link_pmfs(m)
    for t in range(n_t):
        i, f = int(cell[t]), float(frac[t])
        if i < 0:
            continue
        top = min(i + 1, m - 1)  # highest u with a nonzero term
        reversed_pmf = link_pmf[:, top::-1]
        weight = np.zeros((len(link_pmf), top + 2))  # on the cdf's cells i - top .. i + 1
        weight[:, : top + 1] = (1.0 - f) * reversed_pmf
        if f > 0.0:
            weight[:, 1:] += f * reversed_pmf
        for g in ev.groups:
            if not alive[g.nodes].any():
                continue
            lhs = cum[g.nodes, :, i - top + 1 : i + 3].reshape(len(g.nodes) * n_e, top + 2)
            product = (lhs @ weight[link_row[g.subs]].T).reshape(len(g.nodes), n_e, len(g.subs))
            out[g.leaves, :, t] = product[g.node_pos, :, g.sub_pos]
    transposed: FloatArray = out.transpose(1, 0, 2)
    return transposed


def reliability_from_on_time(
    paths: Paths, tree: RouteTree, on_time: FloatArray, lg_class: IntArray, n_subs: int
) -> FloatArray:
    """R'_s from P(on time) per (leaf, lifetime class): per (subscriber, group) the chance that
    some copy is on time (several copies when several paths reach the subscriber), weighted by
    the group's matching rate."""
    ok = np.minimum(paths.leaf_reach[paths.lg_leaf] * on_time[paths.lg_leaf, lg_class], 1.0)
    sub = tree.leaf_subscriber[paths.lg_leaf]
    if paths.single_path:
        on_rate = np.bincount(sub, weights=paths.lg_rate * ok, minlength=n_subs)
        with np.errstate(invalid="ignore", divide="ignore"):
            single: FloatArray = np.where(paths.matching_rate > 0, on_rate / paths.matching_rate, np.nan)
        return single
    pair = sub * max(len(paths.group_lifetime), 1) + paths.lg_group
    order = np.argsort(pair, kind="stable")
    pair, ok_sorted, sub_sorted, rate = pair[order], ok[order], sub[order], paths.lg_rate[order]
    starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1]))) if len(pair) else np.zeros(0, np.int64)
    got = 1.0 - np.multiply.reduceat(1.0 - ok_sorted, starts) if len(starts) else np.zeros(0)
    on_rate = np.bincount(sub_sorted[starts], weights=rate[starts] * got, minlength=n_subs)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(paths.matching_rate > 0, on_rate / paths.matching_rate, np.nan)
    return out


class LinkCdf:
    """P(D <= (i - 1/2) h) of distinct delays D (rows of ``table``) at cells i (0 at cell 0:
    the first point takes [0, h/2)). The first columns asked for every row are kept, and
    later questions about them read the copy.

    >>> import math
    >>> from routing.stats.distributions import Exponential
    >>> cdf = LinkCdf(CdfTable([Exponential(2.0)]), 1.0)
    >>> bool(np.allclose(cdf.prefix(3), [[0.0, 1 - math.exp(-0.25), 1 - math.exp(-0.75)]]))
    True
    >>> bool(np.array_equal(cdf.at(np.array([0]), np.array([2, 5])), cdf.prefix(6)[:, [2, 5]]))
    True
    """

    def __init__(self, table: CdfTable, step: float) -> None:
        self.table, self.step = table, step
        self.kept = np.zeros((len(table.dists), 1))

    def _compute(self, rows: IntArray, cells: IntArray) -> FloatArray:
        out = self.table.rows(rows, np.maximum((cells - 0.5) * self.step, 0.0))
        out[:, cells == 0] = 0.0
        return out

    def prefix(self, n: int) -> FloatArray:
        """Every row at cells 0 .. n - 1 (kept)."""
        have = self.kept.shape[1]
        every = np.arange(len(self.table.dists))
        if n > have == 1:  # only cell 0 (0) so far: all at once, without a copy
            self.kept = self._compute(every, np.arange(n))
        elif n > have:
            self.kept = np.concatenate((self.kept, self._compute(every, np.arange(have, n))), axis=1)
        return self.kept[:, :n]

    def at(self, rows: IntArray, cells: IntArray) -> FloatArray:
        """These rows at these cells."""
        out = np.empty((len(rows), len(cells)))
        kept = cells < self.kept.shape[1]
        if kept.any():
            out[:, kept] = self.kept[rows[:, None], cells[kept]]
        if not kept.all():
            out[:, ~kept] = self._compute(rows, cells[~kept])
        return out
