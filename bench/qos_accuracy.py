"""Accuracy of the reliability predictor against the overlay simulator.

For each scenario and seed, the simulator (routing.reliability.simulator, the ground truth of
``siftstream qos simulate``) measures every subscriber's R_s, and ``qos predict`` predicts R'_s
with the paper's M/M/1 method and with the G/G/1 model. Printed per scenario: mean and 95th
percentile absolute error, mean signed error (bias), the G/G/1 error as a fraction of the M/M/1
error, how often the 90% interval covers the measured R_s, and the simulation's own standard
error. "cover90" counts a subscriber as covered when the predicted interval, widened by the
measured R_s's own 90% binomial band, holds the measured value; "(raw)" leaves the band out.
Subscribers with fewer than ``--min-events`` matching events are left out (their measured
R_s is too noisy to judge a prediction).

Scenarios (docs/reference/reliability-model.md §8.3-8.4): the paper's Table 3 tree (20 brokers, 8 publishers at
1 event/s, 100 subscribers, 4 topics, 21 attributes, lifetime 1 s, matching 1 ms per stored
subscription) with publishers exponential, uniform or deterministic and matching exponential or
uniform (the paper's six combinations); then a link-dominated variant (lognormal links with
medians 200-400 ms, matching 0.5 ms per subscription, lifetime 1.5 s), the same with periodic
publishers, and one with lossy links (reliability 0.85-1).

Run: ``.venv/bin/python bench/qos_accuracy.py [--seeds 3] [--seconds 10000] [--plots DIR]``
(``--quick`` for one seed of 3,000 s). Readings: docs/results/qos-accuracy.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.reliability.allocation import bulk_allocation
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.prediction import filter_matcher, predict
from routing.reliability.simulator import simulate


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "poisson", "link", "periodic": which accuracy target applies
    params: dict[str, Any]


SCENARIOS = [
    Scenario("table3 exp/exp", "poisson", {"publishing": "exponential", "matching": "exponential"}),
    Scenario("table3 exp/unif", "poisson", {"publishing": "exponential", "matching": "uniform"}),
    Scenario("table3 unif/exp", "periodic", {"publishing": "uniform", "matching": "exponential"}),
    Scenario("table3 unif/unif", "periodic", {"publishing": "uniform", "matching": "uniform"}),
    Scenario("table3 det/exp", "periodic", {"publishing": "deterministic", "matching": "exponential"}),
    Scenario("table3 det/unif", "periodic", {"publishing": "deterministic", "matching": "uniform"}),
    Scenario(
        "links exp/exp",
        "link",
        {
            "publishing": "exponential",
            "matching": "exponential",
            "link_median_ms": (200.0, 400.0),
            "ms_per_subscription": 0.5,
            "lifetime_ms": 1500.0,
        },
    ),
    Scenario(
        "links det/unif",
        "link",
        {
            "publishing": "deterministic",
            "matching": "uniform",
            "link_median_ms": (200.0, 400.0),
            "ms_per_subscription": 0.5,
            "lifetime_ms": 1500.0,
        },
    ),
    Scenario(
        "lossy exp/exp",
        "poisson",
        {"publishing": "exponential", "matching": "exponential", "link_reliability": (0.85, 1.0)},
    ),
]

TARGETS = {"poisson": (0.02, 0.05), "link": (0.02, 0.05), "periodic": (0.05, 0.10)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10_000.0)
    ap.add_argument("--min-events", type=int, default=500)
    ap.add_argument("--plots", default="bench/out", help="folder for the scatter plots (PNG)")
    ap.add_argument("--quick", action="store_true", help="one seed, 3,000 simulated seconds")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.seconds = 1, 3000.0

    matcher = filter_matcher()
    print(
        f"workload: {len(SCENARIOS)} scenarios x {args.seeds} seeds, {args.seconds:,.0f} simulated seconds each; "
        f"subscribers with >= {args.min_events} matching events"
    )
    header = (
        f"{'scenario':18} {'n':>4} {'sim SE':>7} | {'M/M/1 MAE':>9} {'p95':>6} {'bias':>7} | "
        f"{'G/G/1 MAE':>9} {'p95':>6} {'bias':>7} {'cover90':>7} {'(raw)':>6} | {'ratio':>5} {'target':>11}"
    )
    print(header)
    print("-" * len(header))
    points: dict[str, list[tuple[float, float, float]]] = {}
    failures: list[str] = []
    started = time.perf_counter()
    predict_s: list[float] = []
    for sc in SCENARIOS:
        truth_all, mm_all, gg_all, lo_all, hi_all, se_all = [], [], [], [], [], []
        # seeds 1-2 calibrated _SOURCE_BLEND in routing/reliability/propagation.py: held out here
        for seed in range(11, 11 + args.seeds):
            system = reliability_tree_system(seed, **sc.params)
            sim = simulate(system, args.seconds, seed + 100, matcher)
            with bulk_allocation():  # as siftstream qos predict runs a prediction
                t0 = time.perf_counter()
                gg = predict(system, model="gg1")
                predict_s.append(time.perf_counter() - t0)
                mm = predict(system, model="mm1")
            for sid, st in sim.subscribers.items():
                g, m = gg.subscribers[sid], mm.subscribers[sid]
                if st.matching < args.min_events or g.reliability is None or m.reliability is None:
                    continue
                truth_all.append(st.reliability)
                se_all.append(math.sqrt(max(st.reliability * (1 - st.reliability), 1e-9) / st.matching))
                gg_all.append(g.reliability)
                mm_all.append(m.reliability)
                lo_all.append(g.reliability_low)
                hi_all.append(g.reliability_high)
        truth = np.array(truth_all)
        eg, em = np.array(gg_all) - truth, np.array(mm_all) - truth
        # The measured R_s is itself a binomial estimate: a 90% interval for the long-run R_s
        # covers it when widened by the measurement's own 90% noise band (1.645 standard errors).
        noise = 1.645 * np.array(se_all)
        cover = float(np.mean((truth >= np.array(lo_all) - noise) & (truth <= np.array(hi_all) + noise)))
        raw_cover = float(np.mean((truth >= np.array(lo_all)) & (truth <= np.array(hi_all))))
        ratio = np.abs(eg).mean() / np.abs(em).mean()
        mae_t, p95_t = TARGETS[sc.kind]
        ok = np.abs(eg).mean() <= mae_t and np.percentile(np.abs(eg), 95) <= p95_t and cover >= 0.85
        if sc.params["publishing"] != "exponential" or sc.params["matching"] != "exponential":
            ok = ok and ratio <= 0.5
        if not ok:
            failures.append(sc.name)
        print(
            f"{sc.name:18} {len(truth):>4} {np.mean(se_all):>7.4f} | {np.abs(em).mean():>9.4f} "
            f"{np.percentile(np.abs(em), 95):>6.3f} {em.mean():>+7.3f} | {np.abs(eg).mean():>9.4f} "
            f"{np.percentile(np.abs(eg), 95):>6.3f} {eg.mean():>+7.3f} {cover:>7.2f} {raw_cover:>6.2f} | {ratio:>5.2f} "
            f"{f'<={mae_t}/{p95_t}':>11} {'ok' if ok else 'MISSED'}"
        )
        points[sc.name] = list(zip(truth_all, mm_all, gg_all, strict=True))
    print(
        f"\nqos predict on the 20-broker tree: median {np.median(predict_s):.2f} s per call; "
        f"total {time.perf_counter() - started:.0f} s"
    )
    print("targets: MAE/p95 per scenario kind, cover90 >= 0.85, G/G/1 MAE <= 0.5 x M/M/1 MAE when not exp/exp")
    print("all targets met" if not failures else f"targets missed: {', '.join(failures)}")
    plot(points, Path(args.plots))
    return 0


def plot(points: dict[str, list[tuple[float, float, float]]], folder: Path) -> None:
    """The paper's Figures 4/5: predicted against measured R_s, one panel per scenario."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[dev]'); no plots")
        return
    folder.mkdir(parents=True, exist_ok=True)
    names = list(points)
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        data = np.array(points[name])
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.scatter(data[:, 0], data[:, 1], s=8, marker="x", label="M/M/1 (paper)", color="tab:red")
        ax.scatter(data[:, 0], data[:, 2], s=8, marker="o", label="G/G/1", color="tab:blue")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("measured R_s (simulator)")
        ax.set_ylabel("predicted R'_s")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.tight_layout()
    out = folder / "qos_scatter.png"
    fig.savefig(out, dpi=110)
    print(f"scatter plots: {out}")


if __name__ == "__main__":
    raise SystemExit(main())
