"""Distribution planning (issue 6): Chen et al. 2004, Figs. 8-11, and the planners' speed.

Workloads (Chen et al. §4.2-§4.3; instances from ``routing.micpice.chen_instance``: one
primitive event per publisher with rate uniform in (0, 1), composites in three levels with 1-3
components, popular with probability alpha = 0.2, interest p_pop = 0.6 / p_unp = 0.1, each
(link, event) forbidden with probability p_c):

- Fig. 8: a fresh flat random graph per instance (12 nodes, 18 links, unit costs; 3 publishers,
  3 subscribers, 6 brokers), |E_p| = 3, |E_c| = 2. For each p_c in 0, 0.1, ..., 0.9 the first
  ``--fig8-instances`` draws that are feasible and have at least one interest (an instance with
  no interest costs 0 for every method and says nothing). Error ratio r = E[c_app] / E[c_opt]
  for the greedy heuristic and the enhanced one with Φ_M, against the exact optimum
  (``routing.micpice_exact``, HiGHS). The paper: r < 1.08 (greedy) and < 1.012 (enhanced) at
  every p_c, and c_app = c_opt at p_c = 0.9.
- Fig. 9: the application networks of §4.3.2 over one 100-node transit-stub graph and one
  100-node flat graph (|P| = |S| = 10, |B| = 20, unit physical costs), |E_p| = |E_c| = 10, no
  policy constraints; mean cost of greedy, enhanced Φ_M, Φ_L, and Φ_R (mean and best of
  ``--random-reps`` random orders per instance) over ``--instances`` draws.
- Fig. 10: the same networks, |E_c| varied; enhanced with Φ_L on flat and Φ_M on transit-stub
  (the paper's choice). The paper: cost grows sublinearly in |E_c|.
- Fig. 11: the same physical graphs, |P| = |S| = |E_p| = |E_c| = 10, |B| varied (brokers
  nested: the overlay with more brokers keeps the ones before); the paper: cost falls as |B|
  grows (|B| = 80 is the whole physical graph).
- Speed: enhanced (Φ_M) per plan on the Fig. 9 networks (20 events); greedy and enhanced on a
  1,000-node transit-stub graph (2 transit domains x 5 transit nodes x 3 stubs x 33 nodes, unit
  costs, all nodes application nodes: 100 publishers, 100 subscribers, 800 brokers) with 200
  events (100 primitive + 100 composite); the exact method per 12-node instance (from Fig. 8).
  Targets: <= 100 ms, <= 5 s, <= 1 s.

Run: ``.venv/bin/python bench/distribution.py [--quick] [--plots bench/out]`` (about 10 minutes
with the defaults on 2 cores; ``--quick`` takes about one).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.micpice import Instance, Plan, chen_instance, plan_enhanced, plan_greedy
from routing.micpice_check import check_plan
from routing.micpice_exact import plan_exact
from routing.topology import (
    DEFAULT_TS_COSTS,
    Topology,
    application_overlay,
    chen_flat_12,
    chen_flat_100,
    chen_transit_stub_100,
    transit_stub,
)

PC_VALUES = [round(0.1 * i, 1) for i in range(10)]


def _checked(inst: Instance, plan: Plan) -> Plan:
    verdict = check_plan(inst, plan)
    if not verdict.ok:
        raise AssertionError(f"{plan.method} plan fails the checker: {verdict.problems}")
    return plan


def _cost(plan: Plan) -> float:
    assert plan.cost is not None
    return plan.cost


# --------------------------------------------------------------------------------------------
# Fig. 8
# --------------------------------------------------------------------------------------------


def fig8(instances: int, max_draws: int, components_from: str) -> dict[str, Any]:
    print(
        f"\n== Fig. 8: error ratio vs p_c (12 nodes, 18 links, |E_p|=3, |E_c|=2, {instances} instances per p_c; "
        f"composite components from the {'lower levels' if components_from == 'lower' else 'level just below'})"
    )
    print(
        f"{'p_c':>4} {'drawn':>6} {'r greedy':>9} {'r enh(M)':>9} {'max greedy':>11} {'max enh':>8} "
        f"{'=opt enh':>9} {'exact ms med/max':>17}"
    )
    rows = []
    exact_times: list[float] = []
    for p_c in PC_VALUES:
        greedy, enhanced, exact, times = [], [], [], []
        drawn = 0
        seed = 0
        while len(exact) < instances and drawn < max_draws:
            seed += 1
            drawn += 1
            topo = chen_flat_12(seed * 7 + 1)
            inst = chen_instance(topo, composites=2, p_c=p_c, seed=seed, components_from=components_from)
            if not inst.interests or inst.infeasibility():
                continue
            t0 = time.perf_counter()
            opt = _checked(inst, plan_exact(inst))
            times.append(time.perf_counter() - t0)
            exact.append(_cost(opt))
            greedy.append(_cost(_checked(inst, plan_greedy(inst))))
            enhanced.append(_cost(_checked(inst, plan_enhanced(inst, "min-cost"))))
        g, e, o = np.array(greedy), np.array(enhanced), np.array(exact)
        ok = o > 0
        row = {
            "p_c": p_c,
            "n": len(o),
            "drawn": drawn,
            "r_greedy": float(g.sum() / o.sum()),
            "r_enhanced": float(e.sum() / o.sum()),
            "max_greedy": float((g[ok] / o[ok]).max()) if ok.any() else 1.0,
            "max_enhanced": float((e[ok] / o[ok]).max()) if ok.any() else 1.0,
            "enh_at_opt": float(np.mean(np.isclose(e, o, rtol=1e-9, atol=1e-12))),
        }
        rows.append(row)
        exact_times.extend(times)
        print(
            f"{p_c:>4.1f} {drawn:>6} {row['r_greedy']:>9.4f} {row['r_enhanced']:>9.4f} {row['max_greedy']:>11.3f} "
            f"{row['max_enhanced']:>8.3f} {row['enh_at_opt']:>8.0%} "
            f"{1000 * statistics.median(times):>8.1f}/{1000 * max(times):<8.1f}"
        )
    worst_g = max(r["r_greedy"] for r in rows)
    worst_e = max(r["r_enhanced"] for r in rows)
    print(
        f"worst r: greedy {worst_g:.4f} (paper < 1.08), enhanced {worst_e:.4f} (paper < 1.012); "
        f"exact per instance: median {1000 * statistics.median(exact_times):.1f} ms, "
        f"max {1000 * max(exact_times):.1f} ms over {len(exact_times)} instances (target <= 1 s)"
    )
    return {"rows": rows, "exact_times": exact_times}


# --------------------------------------------------------------------------------------------
# Figs. 9-11
# --------------------------------------------------------------------------------------------


def _networks(seed: int) -> dict[str, Topology]:
    return {"transit-stub": chen_transit_stub_100(seed, overlay=True), "flat": chen_flat_100(seed, overlay=True)}


def _physical(seed: int) -> dict[str, Topology]:
    return {"transit-stub": chen_transit_stub_100(seed), "flat": chen_flat_100(seed)}


def _mean_cost(topo: Topology, instances: int, composites: int, method: Callable[[Instance], Plan]) -> float:
    costs = [_cost(method(chen_instance(topo, composites=composites, seed=k))) for k in range(instances)]
    return float(np.mean(costs))


def fig9(instances: int, reps: int, seed: int) -> dict[str, Any]:
    print(
        f"\n== Fig. 9: mean cost by method (|P|=|S|=|E_p|=|E_c|=10, |B|=20, {instances} instances, "
        f"Φ_R over {reps} orders)"
    )
    print(f"{'network':>13} {'greedy':>8} {'enh Φ_M':>8} {'enh Φ_L':>8} {'Φ_R avg':>8} {'Φ_R min':>8} {'best':>8}")
    out: dict[str, Any] = {}
    times: list[float] = []
    for name, topo in _networks(seed).items():
        sums: dict[str, list[float]] = {k: [] for k in ("greedy", "Φ_M", "Φ_L", "Φ_R avg", "Φ_R min")}
        for k in range(instances):
            inst = chen_instance(topo, composites=10, seed=k)
            sums["greedy"].append(_cost(plan_greedy(inst)))
            t0 = time.perf_counter()
            sums["Φ_M"].append(_cost(plan_enhanced(inst, "min-cost")))
            times.append(time.perf_counter() - t0)
            sums["Φ_L"].append(_cost(plan_enhanced(inst, "longest")))
            rand = [_cost(plan_enhanced(inst, "random", seed=r)) for r in range(reps)]
            sums["Φ_R avg"].append(float(np.mean(rand)))
            sums["Φ_R min"].append(min(rand))
        means = {k: float(np.mean(v)) for k, v in sums.items()}
        best = min(("Φ_M", "Φ_L", "Φ_R avg"), key=lambda k: means[k])
        out[name] = means
        print(f"{name:>13} " + " ".join(f"{means[k]:>8.2f}" for k in sums) + f" {best:>8}")
    median, worst = 1000 * statistics.median(times), 1000 * max(times)
    print(f"enhanced Φ_M per plan on these 40-node overlays (20 events): median {median:.1f} ms, max {worst:.1f} ms")
    out["times"] = times
    return out


def fig10(instances: int, seed: int, counts: list[int]) -> dict[str, Any]:
    print(f"\n== Fig. 10: mean cost vs |E_c| (enhanced: Φ_L flat, Φ_M transit-stub; {instances} instances)")
    print(f"{'|E_c|':>6} " + " ".join(f"{n:>13}" for n in ("transit-stub", "flat")))
    orders = {"transit-stub": "min-cost", "flat": "longest"}
    nets = _networks(seed)
    out: dict[str, list[float]] = {name: [] for name in nets}
    for count in counts:
        for name, topo in nets.items():
            out[name].append(_mean_cost(topo, instances, count, lambda i, o=orders[name]: plan_enhanced(i, o)))
        print(f"{count:>6} " + " ".join(f"{out[n][-1]:>13.2f}" for n in nets))
    for name in nets:
        c = out[name]
        slope_first = (c[1] - c[0]) / (counts[1] - counts[0])
        slope_last = (c[-1] - c[-2]) / (counts[-1] - counts[-2])
        print(
            f"{name}: marginal cost per composite {slope_first:.2f} at the start, {slope_last:.2f} at the end "
            f"({'sublinear' if slope_last < slope_first else 'not sublinear'})"
        )
    return {"counts": counts, **out}


def _nested_overlays(physical: Topology, brokers: list[int], seed: int) -> list[Topology]:
    rng = np.random.default_rng(seed)
    ids = [physical.nodes[int(i)].id for i in rng.permutation(len(physical.nodes))]
    return [application_overlay(physical, 10, 10, b, chosen=ids[: 20 + b]) for b in brokers]


def fig11(instances: int, seed: int, brokers: list[int]) -> dict[str, Any]:
    print(f"\n== Fig. 11: mean cost vs |B| (|P|=|S|=|E_p|=|E_c|=10; {instances} instances)")
    print(f"{'|B|':>6} " + " ".join(f"{n:>13}" for n in ("transit-stub", "flat")))
    orders = {"transit-stub": "min-cost", "flat": "longest"}
    phys = _physical(seed)
    overlays = {name: _nested_overlays(topo, brokers, seed) for name, topo in phys.items()}
    out: dict[str, list[float]] = {name: [] for name in phys}
    for i, b in enumerate(brokers):
        for name in phys:
            topo = overlays[name][i]
            out[name].append(_mean_cost(topo, instances, 10, lambda x, o=orders[name]: plan_enhanced(x, o)))
        print(f"{b:>6} " + " ".join(f"{out[n][-1]:>13.2f}" for n in phys))
    for name in phys:
        c = out[name]
        mono = all(b <= a + 1e-9 for a, b in itertools.pairwise(c))
        trend = "falls monotonically" if mono else "does not fall monotonically"
        print(f"{name}: {trend} from {c[0]:.2f} to {c[-1]:.2f}")
    return {"brokers": brokers, **out}


# --------------------------------------------------------------------------------------------
# Speed at scale
# --------------------------------------------------------------------------------------------


def large(seed: int, plans: int) -> dict[str, Any]:
    print("\n== 1,000-node transit-stub: 100 publishers, 100 subscribers, 800 brokers, 200 events")
    t0 = time.perf_counter()
    physical = transit_stub(2, 5, 3, 33, seed=seed, costs=dict.fromkeys(DEFAULT_TS_COSTS, 1.0))
    overlay = application_overlay(physical, 100, 100, 800, seed=seed + 1)
    built = time.perf_counter() - t0
    print(f"network: {len(overlay.nodes)} nodes, {len(overlay.links)} directed links (built in {built:.1f} s)")
    out: dict[str, list[float]] = {}
    for k in range(plans):
        inst = chen_instance(overlay, composites=100, seed=seed + k)
        size = inst.size()
        for label, fn in (
            ("greedy", plan_greedy),
            ("enhanced Φ_M", lambda i: plan_enhanced(i, "min-cost")),
            ("enhanced Φ_L", lambda i: plan_enhanced(i, "longest")),
            ("enhanced Φ_R", lambda i: plan_enhanced(i, "random", seed=1)),
        ):
            t0 = time.perf_counter()
            p = fn(inst)
            elapsed = time.perf_counter() - t0
            out.setdefault(label, []).append(elapsed)
            print(
                f"instance {k}: {size['interests']} interests; {label:>13}: {elapsed:6.2f} s, cost {_cost(p):9.1f}, "
                f"{len(p.transmissions)} transmissions"
            )
            _checked(inst, p)
    for label, times in out.items():
        print(f"{label:>13}: max {max(times):.2f} s per plan over {len(times)} plans (target <= 5 s)")
    return out


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------


def plots(results: dict[str, Any], folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    if "fig8" in results:
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for key, style, note in (("fig8", "-", "any lower level"), ("fig8-below", "--", "level below")):
            rows = results[key]["rows"]
            pcs = [r["p_c"] for r in rows]
            ax.plot(pcs, [r["r_greedy"] for r in rows], "o" + style, label=f"greedy ({note})")
            ax.plot(pcs, [r["r_enhanced"] for r in rows], "s" + style, label=f"enhanced Φ_M ({note})")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set(xlabel="p_c", ylabel="E[c_app] / E[c_opt]", title="Fig. 8: error ratio (12 nodes)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(folder / "distribution_fig8.png", dpi=120)
    if "fig9" in results:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        labels = ["greedy", "Φ_M", "Φ_L", "Φ_R avg", "Φ_R min"]
        for i, name in enumerate(("transit-stub", "flat")):
            means = results["fig9"][name]
            ax.bar(np.arange(len(labels)) + 0.4 * i, [means[k] for k in labels], 0.4, label=name)
        ax.set_xticks(np.arange(len(labels)) + 0.2, labels)
        ax.set(ylabel="mean cost", title="Fig. 9: heuristic cost")
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / "distribution_fig9.png", dpi=120)
    for key, xkey, xlabel, title in (
        ("fig10", "counts", "|E_c|", "Fig. 10: cost vs composite events"),
        ("fig11", "brokers", "|B|", "Fig. 11: cost vs brokers"),
    ):
        if key in results:
            res = results[key]
            fig, ax = plt.subplots(figsize=(5, 3.5))
            for name in ("transit-stub", "flat"):
                ax.plot(res[xkey], res[name], "o-", label=name)
            ax.set(xlabel=xlabel, ylabel="mean cost", title=title)
            ax.legend()
            fig.tight_layout()
            fig.savefig(folder / f"distribution_{key}.png", dpi=120)
    print(f"\nplots written to {folder}/distribution_fig*.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer instances (about a minute)")
    ap.add_argument("--fig8-instances", type=int, default=100)
    ap.add_argument("--fig8-max-draws", type=int, default=200_000, help="give up on a p_c after this many draws")
    ap.add_argument("--instances", type=int, default=200, help="instances per point of Figs. 9-11 (paper: 1000)")
    ap.add_argument("--random-reps", type=int, default=20, help="random orders per instance for Φ_R (paper: 100)")
    ap.add_argument("--large-plans", type=int, default=3, help="plans timed on the 1,000-node network")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["fig8", "fig9", "fig10", "fig11", "large"], action="append")
    ap.add_argument("--plots", default=str(Path(__file__).parent / "out"), help="folder for the PNG plots")
    args = ap.parse_args()
    if args.quick:
        args.fig8_instances, args.instances, args.random_reps, args.large_plans = 20, 20, 5, 1
    todo = set(args.only or ["fig8", "fig9", "fig10", "fig11", "large"])
    started = time.perf_counter()
    results: dict[str, Any] = {}
    if "fig8" in todo:
        results["fig8"] = fig8(args.fig8_instances, args.fig8_max_draws, "lower")
        results["fig8-below"] = fig8(args.fig8_instances, args.fig8_max_draws, "below")
    if "fig9" in todo:
        results["fig9"] = fig9(args.instances, args.random_reps, args.seed)
    if "fig10" in todo:
        results["fig10"] = fig10(args.instances, args.seed, [0, 5, 10, 15, 20, 30, 40])
    if "fig11" in todo:
        results["fig11"] = fig11(args.instances, args.seed, [0, 5, 10, 20, 40, 60, 80])
    if "large" in todo:
        results["large"] = large(args.seed + 11, args.large_plans)
    plots(results, Path(args.plots))
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
