"""The 95th-percentile delay of every subscriber's delivered events, by a search on the cdf.

The p95 pass of :func:`routing.reliability.prediction.predict`. A subscriber's delivered
events are a mixture over its leaves of the route tree, weighted by rate times reach, of the
departure delay from its broker plus its own link's delay; its p95 is the 0.95 quantile of
that mixture as :meth:`routing.reliability.grid.Grid.quantile` interpolates it (None beyond the
grid). Reliability needs the delay distributions only up to the longest lifetime; the p95s
need more of the grid, so they are searched for rather than convolved whole:

- the mixture's cdf is G(i) = sum over link cells u of L[u] M(i - u), with M the cumulative
  departure mixture; per broker, matrix products give M on a coarse grid (every
  ``_P95_COARSE``-th cell), which brackets each quantile within a few dozen cells, then on each
  subscriber's bracket (:func:`_p95_batch`), and bisection finds the first cell where G reaches
  0.95 of the delivered mass (:func:`_p95_quantiles`); every G read is exact;
- the link pmf L is summed cell by cell down to survival 1e-8, and in geometric blocks beyond,
  each at its middle cell, down to 1e-10 (:func:`_link_atoms`): the quantiles are within about
  1e-9 of the whole convolution in probability;
- departure cdfs are first worked out on a guess of the cells the search reads (mean + 2.5 sd
  of every delay, :func:`_p95_lengths`); the brokers where that falls short are searched again
  on the whole grid (:func:`p95_pass`).

Symbols: M and G as above, ``q_cell`` the first cell by which a link has 0.999 of its
cell-by-cell mass, ``q_mass`` that mass; a "part" is the subscribers of one broker
(:class:`_P95Rows`), a batch a few thousand subscribers of several brokers (:class:`_P95Batch`).

Examples
--------
>>> from routing.reliability.prediction import predict
>>> exp = lambda mean: {"kind": "exponential", "mean": mean}
>>> zero = {"kind": "deterministic", "value": 0}
>>> system = {"brokers": [{"id": "b1", "service_ms": exp(5)}],
...           "links": [{"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": zero},
...                     {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": zero}],
...           "publishers": [{"id": "p1", "broker": "b1", "interarrival_ms": exp(10),
...                           "content": [{"p": 1.0, "lifetime_ms": 20, "attributes": {"t": 1}}]}],
...           "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}]}
>>> p95 = predict(system).subscribers["s1"].p95_delay_ms  # M/M/1, rho 0.5: T ~ Exp(mean 10 ms)
>>> round(p95, 1), round(-10.0 * math.log(0.05), 1)
(30.0, 30.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from routing.reliability.delay_distributions import Evaluator, LinkCdf, Ragged, fft_lengths, sliding_rows
from routing.reliability.grid import Grid
from routing.reliability.propagation import Paths, Queues, delay_spans, wait_variance
from routing.reliability.system import Overlay, RouteTree

__all__ = ["p95_pass"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_P95_LEVEL = 0.95
_P95_GUESS_SD = 2.5  # the p95 pass first covers mean + this many sd of every delay (then checks)
_P95_DENSE_SURVIVAL = 1e-8  # p95: a subscriber link's pmf is kept cell by cell down to this survival...
_P95_BLOCK_GROWTH = 1.25  # then in blocks this much longer each
_P95_TAIL_SURVIVAL = 1e-10  # down to this survival (the rest is dropped)
_P95_BATCH_ROWS = 4096  # subscribers searched together
_P95_SHARED_ATOMS = 20_000_000  # one atom layout for all subscriber links while the table stays this small
_P95_LINK_LEVEL = 0.999  # the search's upper bound: where every link has this much of its mass
_P95_COARSE = 16  # the search first reads each subscriber's departure mixture at every 16th cell
_P95_CHUNK = 128  # subscribers of a broker whose brackets start within this many cells share one window


def p95_pass(ev: Evaluator, model: str, rho: FloatArray, q: Queues, weight: FloatArray, out: FloatArray) -> None:
    """The p95s of the point prediction: departure cdfs on as much of the grid as the search
    can read (:func:`_p95_lengths`), and on the whole grid where that first guess falls short.
    Each broker's delay is worked out on as many points as its nodes need."""
    tree, paths, grid = ev.tree, ev.paths, ev.grid
    broker_len = _p95_lengths(ev.ov, tree, paths, grid, rho, q)
    parts = _p95_rows(ev, weight)
    redo = list(range(len(parts)))
    stops = [int(broker_len[p.broker]) for p in parts]
    while redo:
        lengths = _node_lengths(tree, paths, broker_len)
        delay = ev.broker_delays(grid.n, model, rho, q, _broker_need(ev, grid.n, lengths))
        cdf = ev.departure_table(grid.n, delay, lengths)
        cdf.cumsum()
        short = _p95(ev, cdf, [parts[k] for k in redo], [stops[k] for k in redo], out)
        redo = [redo[k] for k in short]  # again, with their nodes on the whole grid
        broker_len = np.zeros_like(broker_len)
        broker_len[[parts[k].broker for k in redo]] = grid.n
        for k in redo:
            stops[k] = grid.n


def _broker_need(ev: Evaluator, m: int, lengths: IntArray) -> IntArray:
    """Per broker, the points of its delay that :meth:`Evaluator.departures` reads for these
    node ``lengths``: the longest of its nodes, as rounded there."""
    need = np.zeros(len(ev.ov.broker_ids), dtype=np.int64)
    np.maximum.at(need, ev.tree.node_broker, fft_lengths(m, lengths))
    return need


def _p95_lengths(ov: Overlay, tree: RouteTree, paths: Paths, grid: Grid, rho: FloatArray, q: Queues) -> IntArray:
    """A first guess of how many grid points the p95 search reads per broker: the largest
    mean + 2.5 sd (``_P95_GUESS_SD``) of the delays to the subscribers there, plus 4 cells for
    the grid's rounding (a quantile of a mixture is at most the largest of its parts', and
    delays' 95% points lie below mean + 2.5 sd but for very skewed ones; :func:`_p95` checks,
    and the brokers where it falls short are done again on the whole grid). The whole grid
    where a path crosses a broker with rho >= 1, whose deliveries never arrive in the model."""
    n_b = len(ov.broker_ids)
    _, leaf_span = delay_spans(ov, tree, paths, q.mean_wait, wait_variance(q.waits), _P95_GUESS_SD)
    dead = rho[tree.node_broker] >= 1.0
    for d in range(1, len(paths.depth_start) - 1):
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        dead[idx] |= dead[tree.node_parent[idx]]
    need = np.zeros(n_b)
    np.maximum.at(need, tree.node_broker[tree.leaf_node], leaf_span)
    out: IntArray = np.minimum(np.ceil(need / grid.step) + 4, grid.n).astype(np.int64)
    out[np.unique(tree.node_broker[dead])] = grid.n
    return out


def _node_lengths(tree: RouteTree, paths: Paths, broker_len: IntArray) -> IntArray:
    """Per node, the points its departure pmf needs: its broker's, or more for its children."""
    out = broker_len[tree.node_broker].copy()
    for d in range(len(paths.depth_start) - 2, 0, -1):  # children first
        idx = np.arange(paths.depth_start[d], paths.depth_start[d + 1])
        np.maximum.at(out, tree.node_parent[idx], out[idx])
    return out


def _dense_cells(grid: Grid, cdf: LinkCdf) -> IntArray:
    """Per distribution of ``table``, the cells (a multiple of 4, at most the grid) by which
    its survival is down to 1e-8."""
    n = grid.n
    probes = np.arange(4, n + 4, 4)
    probes[-1] = min(probes[-1], n)
    found = np.full(len(cdf.table.dists), n, dtype=np.int64)
    todo = np.arange(len(cdf.table.dists))
    start = 0
    while len(todo) and start < len(probes):  # in chunks of probes: most links are short
        chunk = probes[start : start + 64]
        done = 1.0 - cdf.at(todo, chunk) <= _P95_DENSE_SURVIVAL
        hit = done.any(axis=1)
        found[todo[hit]] = chunk[np.argmax(done[hit], axis=1)]
        todo = todo[~hit]
        start += 64
    return found


def _link_atoms(grid: Grid, cdf: LinkCdf, rows: IntArray, dense: int) -> tuple[IntArray, FloatArray]:
    """Grid pmfs of (subscriber link) delays as masses at cells common to all of them: each of
    the first ``dense`` cells, then one per block of cells growing by a quarter, at the block's
    middle, until every survival is below 1e-10 (the rest is dropped). Returns the cells and the
    masses (one row per distribution).

    >>> from routing.reliability.grid import CdfTable
    >>> from routing.stats.distributions import Exponential
    >>> cdf = LinkCdf(CdfTable([Exponential(2.0)]), 1.0)
    >>> cells, masses = _link_atoms(Grid(1.0, 64), cdf, np.array([0]), 32)
    >>> cells[:3].tolist(), round(float(masses.sum()), 9)  # what is dropped is below 1e-10
    ([0, 1, 2], 1.0)
    """
    n = grid.n
    dense = max(min(dense, n), 1)
    edges = [dense]
    while edges[-1] < n:
        edges.append(min(n, max(edges[-1] + 1, math.ceil(edges[-1] * _P95_BLOCK_GROWTH))))
    cells = np.concatenate((np.arange(dense + 1), np.array(edges[1:], dtype=np.int64)))
    c = cdf.at(rows, cells)
    masses = np.maximum(np.diff(c, axis=1), 0.0)
    tail = 1.0 - c[:, dense:].min(axis=0, initial=1.0)  # worst survival at each block's start
    blocks = len(edges) - 1
    small = tail[:blocks] <= _P95_TAIL_SURVIVAL
    keep = int(np.argmax(small)) if small.any() else blocks
    bounds = np.array(edges[: keep + 1], dtype=np.int64)
    at = np.concatenate((np.arange(dense, dtype=np.int64), (bounds[:-1] + bounds[1:] - 1) // 2))
    return at, masses[:, : dense + keep]


@dataclass(frozen=True, eq=False)
class _Atoms:
    """Subscriber-link pmfs as atoms (:func:`_link_atoms`), in the form the p95 search reads:
    per row the first ``dense`` cells' masses, last cell first (``lrev``), the masses of the
    tail atoms at cells ``tail_at`` (common to the rows), the first cell by which the row has
    0.999 of its cell-by-cell mass and that mass (``q_cell``, ``q_mass``), and its mean cell."""

    lrev: FloatArray
    tail_at: IntArray
    tail_mass: FloatArray
    q_cell: IntArray
    q_mass: FloatArray
    mu: FloatArray

    @property
    def reach(self) -> int:
        """The farthest cell an atom stands for."""
        return max(int(self.tail_at.max(initial=0)), int(self.lrev.shape[1]) - 1)

    @classmethod
    def of(cls, at: IntArray, mass: FloatArray, dense: int) -> _Atoms:
        """From the cells and masses of :func:`_link_atoms` (the first ``dense`` cells one by one)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = np.where(mass.sum(axis=1) > 0, (mass @ at) / mass.sum(axis=1), 0.0)
        return cls(mass[:, dense - 1 :: -1].copy(), at[dense:], mass[:, dense:], *_bulk_of(mass, dense), mu)


class _LinkAtoms:
    """The subscriber links' atoms, worked out on first use: one layout for every link while
    that table stays small, one per broker otherwise (:func:`_link_atoms`)."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev
        self.cdf: LinkCdf | None = None
        self.dense_of = np.zeros(0, dtype=np.int64)
        self.shared: _Atoms | None = None

    def of(self, subs: IntArray) -> tuple[_Atoms, IntArray]:
        """The atoms of these subscribers' links, and the row of each there."""
        grid = self.ev.grid
        if self.cdf is None:
            self.cdf = self.ev.subscriber_link_cdf()
            self.dense_of = _dense_cells(grid, self.cdf)
            every = np.arange(len(self.cdf.table.dists))
            dense = int(self.dense_of.max())
            if len(every) * (dense + 64) <= _P95_SHARED_ATOMS:
                self.shared = _Atoms.of(*_link_atoms(grid, self.cdf, every, dense), dense)
        rows = self.ev.subscriber_link_row[subs]
        if self.shared is not None:
            return self.shared, rows
        dense = int(self.dense_of[rows].max())
        return _Atoms.of(*_link_atoms(grid, self.cdf, rows, dense), dense), np.arange(len(subs))


def _bulk_of(mass: FloatArray, dense: int) -> tuple[IntArray, FloatArray]:
    """Per row of link masses, the first cell by which it has 0.999 of its cell-by-cell mass,
    and the mass up to there."""
    bulk = mass[:, :dense].cumsum(axis=1)
    q_cell: IntArray = np.argmax(bulk >= _P95_LINK_LEVEL * bulk[:, -1:], axis=1).astype(np.int64)
    q_mass: FloatArray = bulk[np.arange(len(mass)), q_cell]
    return q_cell, q_mass


@dataclass(frozen=True, eq=False)
class _P95Rows:
    """The subscribers at one broker that get events, ready for the p95 search (independent of
    the departure distributions, so worked out once)."""

    broker: int
    subs: IntArray
    nodes: IntArray  # the broker's nodes that feed them
    w: FloatArray  # per subscriber and node: rate times reach
    total: FloatArray  # delivered rate: the mixture's mass
    atoms: _Atoms
    atom_row: IntArray  # per subscriber: its row of ``atoms``


def _p95_rows(ev: Evaluator, weight: FloatArray) -> list[_P95Rows]:
    """Per broker group with delivered events, its :class:`_P95Rows`."""
    atoms = _LinkAtoms(ev)
    out: list[_P95Rows] = []
    for group in ev.groups:
        n_nodes = len(group.nodes)
        cell = group.sub_pos * n_nodes + group.node_pos
        w = np.bincount(cell, weights=weight[group.leaves], minlength=len(group.subs) * n_nodes).reshape(-1, n_nodes)
        total = w.sum(axis=1)
        has = total > 0.0
        if not has.any():
            continue
        w, subs = w[has], group.subs[has]
        used = w.any(axis=0)
        broker = int(ev.tree.node_broker[group.nodes[0]])
        out.append(_P95Rows(broker, subs, group.nodes[used], w[:, used], total[has], *atoms.of(subs)))
    return out


@dataclass(frozen=True, eq=False)
class _P95Batch:
    """Subscribers of several brokers in one search, one row each: its bracket of cells, its
    window of the departure mixture's cdf M (cells a, a + 1, ... at ``flat[off:]``; cells below
    0 hold 0) and its link atoms (as :class:`_Atoms`, padded to the widest in the batch)."""

    sub: IntArray
    part: IntArray  # which of the batch's _P95Rows
    total: FloatArray  # the mixture's mass
    target: FloatArray  # 0.95 total
    low: IntArray  # M(low) < target, so G(low) < target (-1: before every cell)
    up: IntArray  # M(up) >= target
    high: IntArray  # G(high) >= target but for rounding, or the last valid cell
    stop: IntArray  # cells valid in the departure cdfs
    off: IntArray
    a: IntArray
    flat: FloatArray
    lrev: FloatArray
    tail_at: IntArray
    tail_mass: FloatArray
    mu: FloatArray  # the link's mean, in cells

    def g(self, i: IntArray, rows: IntArray | None = None) -> FloatArray:
        """G(i) = sum over link cells u of L[u] M(i - u), per row (all, or ``rows``)."""
        if rows is None:
            base, lrev, tail_at, tail_mass = self.off + i - self.a, self.lrev, self.tail_at, self.tail_mass
        else:
            base, lrev = self.off[rows] + i - self.a[rows], self.lrev[rows]
            tail_at, tail_mass = self.tail_at[rows], self.tail_mass[rows]
        dense = lrev.shape[1]
        value: FloatArray = np.einsum("rd,rd->r", sliding_rows(self.flat, dense)[base - (dense - 1)], lrev)
        if tail_at.shape[1]:
            value = value + np.einsum("rt,rt->r", self.flat[base[:, None] - tail_at], tail_mass)
        return value

    def m(self, i: IntArray) -> FloatArray:
        """M(i) per row."""
        out: FloatArray = self.flat[self.off + i - self.a]
        return out


def _atom_rows(parts: Sequence[_P95Rows], part: IntArray, local: IntArray) -> IntArray | None:
    """Rows of the one :class:`_Atoms` table the parts share (None if they do not) for these
    rows (subscriber ``local`` of ``parts[part]``)."""
    if any(p.atoms is not parts[0].atoms for p in parts):
        return None
    start = np.cumsum([0, *(len(p.subs) for p in parts)])
    at: IntArray = np.concatenate([p.atom_row for p in parts])[start[part] + local]
    return at


def _batch_bulk(parts: Sequence[_P95Rows], part: IntArray, local: IntArray) -> tuple[IntArray, FloatArray]:
    """``q_cell`` and ``q_mass`` (see :class:`_Atoms`) for these rows."""
    at = _atom_rows(parts, part, local)
    if at is not None:
        return parts[0].atoms.q_cell[at], parts[0].atoms.q_mass[at]
    q_cell, q_mass = np.empty(len(part), dtype=np.int64), np.empty(len(part))
    for k in np.unique(part).tolist():
        rows = np.flatnonzero(part == k)
        a, at_k = parts[k].atoms, parts[k].atom_row[local[rows]]
        q_cell[rows], q_mass[rows] = a.q_cell[at_k], a.q_mass[at_k]
    return q_cell, q_mass


def _batch_atoms(
    parts: Sequence[_P95Rows], part: IntArray, local: IntArray
) -> tuple[FloatArray, IntArray, FloatArray, FloatArray]:
    """``lrev``, ``tail_at`` (per row), ``tail_mass`` and ``mu`` of :class:`_P95Batch` for these
    rows: gathered from one table when the parts share it, else padded per part (a shorter
    dense part with zeros at its far end, missing tail atoms at cell 0 with no mass)."""
    at = _atom_rows(parts, part, local)
    if at is not None:
        first = parts[0].atoms
        tail_at = np.broadcast_to(first.tail_at, (len(at), len(first.tail_at)))
        return first.lrev[at], tail_at, first.tail_mass[at], first.mu[at]
    dense = max(p.atoms.lrev.shape[1] for p in parts)
    n_tail = max(len(p.atoms.tail_at) for p in parts)
    n = len(part)
    lrev, tail_at, tail_mass = np.zeros((n, dense)), np.zeros((n, n_tail), dtype=np.int64), np.zeros((n, n_tail))
    mu = np.empty(n)
    for k in np.unique(part).tolist():
        rows = np.flatnonzero(part == k)
        a, at_k = parts[k].atoms, parts[k].atom_row[local[rows]]
        d, t = a.lrev.shape[1], len(a.tail_at)
        lrev[rows, dense - d :] = a.lrev[at_k]
        tail_at[rows, :t] = a.tail_at
        tail_mass[rows, :t] = a.tail_mass[at_k]
        mu[rows] = a.mu[at_k]
    return lrev, tail_at, tail_mass, mu


def _coarse_mixtures(cdf: Ragged, parts: Sequence[_P95Rows], stops: Sequence[int]) -> tuple[FloatArray, IntArray]:
    """Per subscriber of ``parts`` (one row each), M at every ``_P95_COARSE``-th cell and at
    the last valid one (-inf beyond: never reached), one matrix product per broker; per part
    those cells. (Only those cells of the nodes' cdfs are read.)"""
    n_cols = max(-(-stop // _P95_COARSE) + 1 for stop in stops)
    coarse = np.full((sum(len(p.subs) for p in parts), n_cols), -np.inf)
    col_cell = np.zeros((len(parts), n_cols), dtype=np.int64)
    r = 0
    for k, (p, stop) in enumerate(zip(parts, stops, strict=True)):
        cols = np.arange(0, stop + _P95_COARSE - 1, _P95_COARSE)
        cols[-1] = stop - 1
        col_cell[k, : len(cols)] = cols
        c = cdf.flat[cdf.off[p.nodes][:, None] + cols]
        np.matmul(p.w, c, out=coarse[r : r + len(p.subs), : len(cols)])
        r += len(p.subs)
    return coarse, col_cell


def _windows(
    parts: Sequence[_P95Rows],
    cdf: Ragged,
    part: IntArray,
    local: IntArray,
    low: IntArray,
    high: IntArray,
) -> tuple[FloatArray, IntArray, IntArray]:
    """M on each row's cells low - reach .. high (rows sorted by part, then low), as ``flat``,
    ``off`` and ``a`` of :class:`_P95Batch`: rows of a part whose ``low`` lie within
    ``_P95_CHUNK`` cells share one window, worked out by one matrix product (of the nodes'
    cdfs, ``cdf``, on the window's cells only: they end within the cells valid for the part)."""
    new_part = np.diff(part, prepend=-1) != 0
    part_low = low[np.maximum.accumulate(np.where(new_part, np.arange(len(part)), 0))]
    first = np.flatnonzero(new_part | (np.diff((low - part_low) // _P95_CHUNK, prepend=-1) != 0))
    count = np.diff(np.append(first, len(part)))
    start = low[first] - max(p.atoms.reach for p in parts)
    width = np.maximum.reduceat(high, first) + 1 - start
    at = np.cumsum(count * width) - count * width
    flat = np.empty(int((count * width).sum()))
    for i, n, a, w, o in zip(first.tolist(), count.tolist(), start.tolist(), width.tolist(), at.tolist(), strict=True):
        k = int(part[i])
        block = flat[o : o + n * w].reshape(n, w)
        zero = min(max(-a, 0), w)  # cells below 0
        block[:, :zero] = 0.0
        if zero < w:
            nodes = sliding_rows(cdf.flat, w - zero)[cdf.off[parts[k].nodes] + a + zero]
            np.matmul(parts[k].w[local[i : i + n]], nodes, out=block[:, zero:])
    off = np.repeat(at - first * width, count) + np.arange(len(part)) * np.repeat(width, count)
    return flat, off, np.repeat(start, count)


def _p95_batch(
    ev: Evaluator, cdf: Ragged, parts: Sequence[_P95Rows], stops: Sequence[int], wide: bool
) -> tuple[_P95Batch | None, list[int]]:
    """Brackets and windows for the subscribers of ``parts`` (``cdf``: each node's departure
    cdf, valid on the first ``stops`` cells of its part): the batch (None if empty), and the
    parts whose valid cells are too few (some M below its target there while the grid goes
    on). Subscribers whose M stays below the target on the whole grid have no quantile and are
    left out.

    M on the coarse cells (:func:`_coarse_mixtures`) brackets each subscriber's quantile: G <
    target up to the last coarse cell where M < target, and G >= q M(i - q_cell) >= target
    from q_cell cells after the first coarse cell i where M reaches target / q (q: the link's
    mass within q_cell cells); with ``wide``, brackets end at the last valid cell. Then M on
    each bracket, less the link atoms' reach (:func:`_windows`)."""
    coarse, col_cell = _coarse_mixtures(cdf, parts, stops)
    size = np.array([len(p.subs) for p in parts])
    part = np.repeat(np.arange(len(parts)), size)
    local = np.arange(len(part)) - np.repeat(np.cumsum(size) - size, size)
    stop = np.asarray(stops, dtype=np.int64)[part]
    target = _P95_LEVEL * np.concatenate([p.total for p in parts])
    hit = coarse >= target[:, None]
    found = hit.any(axis=1)
    short = np.unique(part[~found & (stop < ev.grid.n)]).tolist()
    rows = np.flatnonzero(found & ~np.isin(part, short))
    if not len(rows):
        return None, short
    hit, coarse = hit[rows], coarse[rows]
    j = np.argmax(hit, axis=1)
    low = np.where(j > 0, col_cell[part[rows], np.maximum(j - 1, 0)], -1)
    up = col_cell[part[rows], j]
    high = stop[rows] - 1
    if not wide:
        q_cell, q_mass = _batch_bulk(parts, part[rows], local[rows])
        hit = coarse >= (target[rows] / q_mass)[:, None]
        j = np.argmax(hit, axis=1)
        high = np.where(hit.any(axis=1), np.minimum(col_cell[part[rows], j] + q_cell, high), high)
    order = np.lexsort((low, part[rows]))  # by part, then bracket
    low, up, high, rows = low[order], up[order], high[order], rows[order]
    part, local, stop, target = part[rows], local[rows], stop[rows], target[rows]
    flat, off, a = _windows(parts, cdf, part, local, low, high)
    lrev, tail_at, tail_mass, mu = _batch_atoms(parts, part, local)
    sub = np.concatenate([p.subs for p in parts])[np.cumsum(np.append(0, size))[part] + local]
    return _P95Batch(
        sub, part, target / _P95_LEVEL, target, low, up, high, stop, off, a, flat, lrev, tail_at, tail_mass, mu
    ), short


def _p95_quantiles(bt: _P95Batch, grid: Grid) -> tuple[NDArray[np.bool_], FloatArray]:
    """The search within the brackets of a batch: per row whether G reaches its target by the
    bracket's end, and the quantile (as :meth:`Grid.quantile` interpolates).

    The first cell where M reaches the target is found by bisection between the coarse cells.
    G is M smoothed by the link, so it first reaches the target about the link's mean later:
    G is evaluated there and one cell before, and where that guess misses, bisection goes on
    between the cells known to be below and above. Every G is evaluated exactly (the guess
    only saves evaluations), so the answer is the first cell where G reaches the target."""
    target = bt.target
    lo, hi = bt.low.copy(), bt.up.copy()
    m_lo, m_hi = bt.m(lo), bt.m(hi)
    while True:
        gap = hi - lo > 1
        if not gap.any():
            break
        mid = np.where(gap, (lo + hi) // 2, hi)
        m = bt.m(mid)
        up = gap & (m >= target)
        down = gap & ~up
        hi, m_hi = np.where(up, mid, hi), np.where(up, m, m_hi)
        lo, m_lo = np.where(down, mid, lo), np.where(down, m, m_lo)
    # G(lo) <= M(lo) < target: the quantile's cell is in [hi, high].
    with np.errstate(invalid="ignore", divide="ignore"):
        x = lo + np.where(m_hi > m_lo, (target - m_lo) / (m_hi - m_lo), 1.0) + bt.mu
    guess = np.minimum(np.maximum(np.ceil(x).astype(np.int64), hi), bt.high)
    g_before, g_at = bt.g(guess - 1), bt.g(guess)
    before = g_before >= target  # the quantile is before the guess: in [hi, guess - 1]
    after = ~before & (g_at < target)  # after it: in [guess + 1, high]
    low = np.where(before, lo, np.where(after, guess, guess - 1))
    g_low = np.where(before, np.nan, np.where(after, g_at, g_before))  # NaN: not evaluated
    top = np.where(before, guess - 1, np.where(after, bt.high, guess))
    g_high = np.where(before, g_before, np.where(after & (guess < bt.high), np.nan, g_at))
    rows = np.flatnonzero(top - low > 1)
    while len(rows):
        mid = (low[rows] + top[rows]) // 2
        g_mid = bt.g(mid, rows)
        up = g_mid >= target[rows]
        top[rows[up]], g_high[rows[up]] = mid[up], g_mid[up]
        low[rows[~up]], g_low[rows[~up]] = mid[~up], g_mid[~up]
        rows = rows[top[rows] - low[rows] > 1]
    todo = np.flatnonzero(np.isnan(g_high))  # the bracket's end, never evaluated
    if len(todo):
        g_high[todo] = bt.g(top[todo], todo)
    found = g_high >= target
    todo = np.flatnonzero(np.isnan(g_low) & found & (top > 0))
    if len(todo):
        g_low[todo] = bt.g(top[todo] - 1, todo)
    total = bt.total
    cum_i, cum_lo = g_high / total, np.where(top > 0, g_low, 0.0) / total
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cum_i > cum_lo, (_P95_LEVEL - cum_lo) / (cum_i - cum_lo), 0.5)
    value = np.where(top > 0, (top - 0.5 + frac) * grid.step, frac * 0.5 * grid.step)
    return found, value


def _p95(ev: Evaluator, cdf: Ragged, parts: Sequence[_P95Rows], stops: Sequence[int], out: FloatArray) -> list[int]:
    """Per subscriber of ``parts``, the 0.95 quantile of its delivered events' delay, written to
    ``out`` (as :meth:`Grid.quantile` of the mixture over its leaves, weighted by rate times
    reach, of departure plus subscriber link; left as it is, NaN, beyond the grid). ``cdf``
    holds each node's departure cdf, valid on the first ``stops`` cells of its part's broker;
    the parts for which that is too few are returned.

    The mixture's cdf G(i) = sum over link cells u of L[u] M(i - u), M the cumulative departure
    mixture, is searched instead of convolved whole (:func:`_p95_batch`, :func:`_p95_quantiles`):
    per broker, matrix products give M on a coarse grid, which brackets each quantile within a
    few dozen cells, then on each subscriber's bracket; the link pmf is summed cell by cell down
    to survival 1e-8 and in geometric blocks beyond (each at its middle cell): within ~1e-9 of
    the full convolution in probability. Brokers are searched together, a few thousand
    subscribers at a time."""
    short: list[int] = []
    todo, wide = list(range(len(parts))), False
    while todo:
        wider: list[int] = []
        lo = 0
        while lo < len(todo):  # batches of whole brokers, _P95_BATCH_ROWS subscribers or a few more
            hi = lo + 1 + int(np.searchsorted(np.cumsum([len(parts[k].subs) for k in todo[lo:]]), _P95_BATCH_ROWS))
            batch = todo[lo:hi]
            lo = hi
            bt, too_short = _p95_batch(ev, cdf, [parts[k] for k in batch], [stops[k] for k in batch], wide)
            short += [batch[k] for k in too_short]
            if bt is None:
                continue
            found, value = _p95_quantiles(bt, ev.grid)
            out[bt.sub[found]] = value[found]
            for k in np.unique(bt.part[~found]).tolist():
                miss = (bt.part == k) & ~found
                if not wide and bool((bt.high[miss] < bt.stop[miss] - 1).any()):
                    wider.append(batch[k])  # rounding kept G below its target at the bracket's end
                elif stops[batch[k]] < ev.grid.n:
                    short.append(batch[k])  # again, once its nodes are known on the whole grid
        todo, wide = wider, True
    return short
