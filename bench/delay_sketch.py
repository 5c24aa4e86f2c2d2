"""Accuracy of delay sketches where the reliability predictor reads them (1 - F near 0.01).

Data: 10^5 delays per case, 5 seeds each, of three kinds: lognormal with mean 100 ms and cv 1,
exponential with mean 100 ms, and an M/M/1-like wait (exponential, mean 500 ms, with an atom of
0.2 at 0). Against the exact empirical CDF F of the same data, for each sketch:

- ``max |dF|``: the largest |F_sketch(x) - F(x)| at the 0.9, 0.95, 0.99, 0.995 and 0.999 quantiles;
- ``|dF| / (1 - F) at 0.99``: that error at the 0.99 quantile as a fraction of 1 - F = 0.01
  (range over kinds and seeds).

Sketches: :class:`routing.stats.delay_sketch.DelaySketch` at alpha = 0.5 %, and, when installed,
``datasketches`` KLL (k = 200 and 1000) and REQ (k = 12, high-rank accuracy) and ``ddsketch``
(alpha = 1 %, rank by bins). Then the compaction of a DelaySketch into an empirical distribution of
200 values (``DelaySketch.to_distribution``) against grouping its buckets by log value alone: the
largest CDF error at 21 points around the 0.99 quantile, as a fraction of 1 - F.

Run: ``.venv/bin/python bench/delay_sketch.py [--seeds 5]``; for the other sketches first
``.venv/bin/pip install datasketches==5.2.0 ddsketch==3.0.1`` (in a scratch environment: they are
no dependency of SiftStream). Readings: docs/decisions/delay-sketch.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.stats.delay_sketch import DelaySketch
from routing.stats.distributions import Empirical

FloatArray = NDArray[np.float64]
QS = np.array([0.9, 0.95, 0.99, 0.995, 0.999])
KINDS = ("lognormal", "exponential", "wait")


def delays(kind: str, seed: int, n: int = 100_000) -> FloatArray:
    rng = np.random.default_rng(seed)
    if kind == "lognormal":  # mean 100, cv 1
        s2 = math.log(2.0)
        return rng.lognormal(math.log(100.0) - s2 / 2, math.sqrt(s2), n)
    if kind == "exponential":
        return rng.exponential(100.0, n)
    x = rng.exponential(500.0, n)  # an M/M/1 wait at rho 0.8: an atom of 0.2 at 0
    x[rng.random(n) < 0.2] = 0.0
    return x


def ours(x: FloatArray) -> Callable[[FloatArray], FloatArray]:
    s = DelaySketch(relative_accuracy=0.005)
    s.add(x)
    return s.cdf


def kll(k: int) -> Callable[[FloatArray], Callable[[FloatArray], FloatArray]]:
    from datasketches import kll_floats_sketch  # type: ignore[import-not-found]

    def build(x: FloatArray) -> Callable[[FloatArray], FloatArray]:
        s = kll_floats_sketch(k)
        s.update(x.astype(np.float32))
        return lambda p: np.array([s.get_rank(float(v), True) for v in p])

    return build


def req(x: FloatArray) -> Callable[[FloatArray], FloatArray]:
    from datasketches import req_floats_sketch  # type: ignore[import-not-found]

    s = req_floats_sketch(12, True)
    for v in x.astype(np.float32):
        s.update(float(v))
    return lambda p: np.array([s.get_rank(float(v), True) for v in p])


def dd(x: FloatArray) -> Callable[[FloatArray], FloatArray]:
    from ddsketch import DDSketch  # type: ignore[import-not-found]

    s = DDSketch(relative_accuracy=0.01)
    for v in x.tolist():
        s.add(v)
    store, mapping = s._store, s._mapping  # the bins themselves: the package has no CDF at a point
    below = np.cumsum(np.array(store.bins, dtype=np.float64))
    zero, total = float(s._zero_count), float(s.count)

    def cdf(p: FloatArray) -> FloatArray:
        out = []
        for v in p.tolist():
            if v <= 0.0:
                out.append(zero if v == 0.0 else 0.0)
                continue
            j = min(mapping.key(v) - store.offset, len(below) - 1)
            out.append(zero + (below[j] if j >= 0 else 0.0))
        return np.array(out) / total

    return cdf


def log_grouped(sketch: DelaySketch, max_points: int) -> Empirical:
    """The alternative compaction: buckets grouped by equal steps of log value alone."""
    state = sketch.to_state()
    index, counts = state["index"], state["counts"].astype(np.float64)
    ln_gamma = math.log((1 + sketch.relative_accuracy) / (1 - sketch.relative_accuracy))
    mid = 0.5 * (np.exp(index * ln_gamma) + np.exp((index + 1) * ln_gamma))
    zero = int(state["zero"][0])
    room = max_points - (zero > 0)
    u = np.log(mid)
    scale = (room - 1) / float(u[-1] - u[0])
    inverse = np.unique(np.floor((u - u[0]) * scale).astype(np.int64), return_inverse=True)[1]
    mass = np.bincount(inverse, weights=counts)
    values = ([0.0] if zero else []) + (np.bincount(inverse, weights=counts * mid) / mass).tolist()
    weights = ([float(zero)] if zero else []) + mass.tolist()
    total = math.fsum(weights)
    return Empirical(tuple(values), tuple(w / total for w in weights))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()

    builders: dict[str, Callable[[FloatArray], Callable[[FloatArray], FloatArray]]] = {
        "DelaySketch, alpha = 0.5 %": ours
    }
    try:
        import datasketches  # type: ignore[import-not-found]  # noqa: F401

        builders |= {"datasketches KLL, k = 200": kll(200), "datasketches KLL, k = 1000": kll(1000)}
        builders["datasketches REQ, k = 12, high ranks"] = req
    except ImportError:
        print("datasketches not installed: KLL and REQ skipped")
    try:
        import ddsketch  # type: ignore[import-not-found]  # noqa: F401

        builders["ddsketch, alpha = 1 % (rank by bins)"] = dd
    except ImportError:
        print("ddsketch not installed: skipped")

    print(f"10^5 delays, {args.seeds} seeds per kind ({', '.join(KINDS)})")
    print(f"{'sketch':<40} {'max |dF|':>10} {'|dF|/(1-F) at 0.99':>22}")
    for name, build in builders.items():
        worst, rel = 0.0, []
        for kind in KINDS:
            for seed in range(args.seeds):
                x = delays(kind, seed)
                points = np.quantile(x, QS)
                exact = np.searchsorted(np.sort(x), points, side="right") / len(x)
                error = np.abs(build(x)(points) - exact)
                worst = max(worst, float(error.max()))
                rel.append(float(error[2] / (1.0 - exact[2])))
        print(f"{name:<40} {worst:>10.1e} {100 * min(rel):>9.1f}-{100 * max(rel):.1f} %")

    print("\nDelaySketch compacted to 200 values: CDF error around the 0.99 quantile / (1 - F)")
    q = 0.99
    for method in ("to_distribution", "log value alone"):
        rel = []
        for kind in KINDS:
            for seed in range(args.seeds):
                x = delays(kind, seed)
                s = DelaySketch()
                s.add(x)
                dist = s.to_distribution(200) if method == "to_distribution" else log_grouped(s, 200)
                near = np.quantile(x, np.linspace(q - (1 - q) / 2, q + (1 - q) / 2, 21))
                exact = np.searchsorted(np.sort(x), near, side="right") / len(x)
                rel.append(float(np.abs(dist.cdf(near) - exact).max() / (1 - q)))
        print(f"  {method:<20} {100 * min(rel):.1f}-{100 * max(rel):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
