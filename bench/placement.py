"""Composite detection placement on the overlay: adaptive vs joint-point vs optimal.

Li & Jacobsen §4: where should the operators of a composite subscription be detected? The
joint point (the topology-only baseline) detects an operator where its inputs' paths to the
subscriber meet; Algorithm 2 (``adaptive``) moves it towards the heavier input; ``optimal`` is
the minimum of docs/reference/placement.md's traffic cost. The target, reported at the end of a run: with
component rates imbalanced 1:10, adaptive sends >= 40% less inter-broker traffic than
joint-point placement, and at 1:1 it is never worse than the baseline beyond noise.

Workload (all from ``--seed``):

- overlay: Chen et al.'s 100-broker transit-stub graph (``chen_transit_stub_100``, unit link
  costs); ``--costs gt-itm`` uses the same shape with ``DEFAULT_TS_COSTS`` (transit 10,
  transit-stub 5, stub 1). Every link's delay is ``--ms-per-cost`` (5) ms x its cost;
- ``--composites`` (200) composite subscriptions, subscriber and each leaf's source at uniformly
  random brokers. ``1 - --nested`` (75%) are ``and(L1, L2)``; the rest have 3 leaves, one of
  ``and(L1, or(L2, L3))``, ``or(and(L1, L2), L3)``, ``and(and(L1, L2), L3)`` (uniform). Every
  ``and`` has ``within_ms`` = ``--within-ms`` (1000);
- rates: one leaf per composite (chosen at random) publishes at ``--lam`` (20/s), the others at
  ``lam / r`` for imbalance r in ``--imbalances`` (1, 10, 100); Poisson streams over
  ``--seconds`` (60). The overlay, trees, brokers and heavy leaves are the same for every r.

For each imbalance and placement the events are replayed (``routing.composite.replay``): every
leaf event crosses the links from its source to its operator's broker, every detection from
its operator's broker to its parent's (the root's to the subscriber's). Detections come from
``routing.composite.detection.CompositeDetector``, fed in each placement's arrival order with a watermark
that lags by the largest path delay: they must not depend on the placement (checked: same
detection ids, nothing late). Placements are planned with ``routing.composite.placement.place`` from the
true rates and, marked ``~est``, from rates counted over the first ``--estimate-s`` (10) s.

Columns: ``tx/s`` link transmissions per second (events and detections); ``vs JP`` its ratio
to joint-point and ``saved`` the saving, with a 95% bootstrap interval over composites;
``model/s`` docs/reference/placement.md's traffic cost of the placements at the true rates (``Σ traffic_cost``:
unit costs make it transmissions per second) and ``meas/model`` the measured cost-weighted
traffic over it; ``delay`` mean and p95 of detection delay (arrival at the subscriber's broker
minus the last component's publication; network only, no watermark wait); ``at JP`` the share
of operators placed at their joint point.

Run: ``.venv/bin/python bench/placement.py`` (``--quick``: 60 composites over 20 s, a run of
seconds rather than minutes). Exits 1 when a sanity check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.composite.placement import PlacementInstance, place, traffic_cost
from routing.composite.replay import (
    Composite,
    Network,
    component_matches,
    detect,
    detect_in_arrival_order,
    replay,
)
from routing.composite.trees import Leaf, parse_composite, to_placement_tree
from routing.planning.named_topologies import chen_transit_stub_100
from routing.planning.topology import DEFAULT_TS_COSTS, Topology, transit_stub

SHAPES_2 = ({"op": "and", "children": ["L", "L"]},)
SHAPES_3 = (
    {"op": "and", "children": ["L", {"op": "or", "children": ["L", "L"]}]},
    {"op": "or", "children": [{"op": "and", "children": ["L", "L"]}, "L"]},
    {"op": "and", "children": [{"op": "and", "children": ["L", "L"]}, "L"]},
)
METHODS = ("joint-point", "adaptive", "optimal")
TARGET_SAVING_AT_10 = 0.40


@dataclass(frozen=True)
class Config:
    seed: int = 0
    composites: int = 200
    nested: float = 0.25
    within_ms: int = 1000
    lam: float = 20.0
    seconds: float = 60.0
    imbalances: tuple[int, ...] = (1, 10, 100)
    estimate_s: float = 10.0
    ms_per_cost: float = 5.0
    costs: str = "unit"
    bootstrap: int = 2000


@dataclass(frozen=True)
class Shape:
    """A composite's placement-independent part: tree, subscriber, sources, heavy leaf."""

    tree_doc: dict[str, Any]
    subscriber: str
    sources: dict[str, str]
    heavy: str


def build_topology(cfg: Config) -> Topology:
    if cfg.costs == "unit":
        return chen_transit_stub_100(cfg.seed)
    return transit_stub(1, 4, 3, 8, seed=cfg.seed, transit_alpha=0.6, stub_alpha=0.42, costs=DEFAULT_TS_COSTS)


def fill(doc: Any, counter: list[int], within_ms: int) -> Any:
    """Give every leaf placeholder a distinct filter and every ``and`` its window."""
    if doc == "L":
        counter[0] += 1
        return f"k = {counter[0]}"
    out = {"op": doc["op"], "children": [fill(c, counter, within_ms) for c in doc["children"]]}
    if doc["op"] == "and":
        out["within_ms"] = within_ms
    return out


def make_shapes(cfg: Config, brokers: Sequence[str]) -> list[Shape]:
    rng = np.random.default_rng([cfg.seed, 7])
    shapes: list[Shape] = []
    for _ in range(cfg.composites):
        pool = SHAPES_3 if rng.random() < cfg.nested else SHAPES_2
        doc = fill(pool[int(rng.integers(len(pool)))], [0], cfg.within_ms)
        tree = parse_composite(doc)
        leaves = [leaf.id for leaf in tree.leaf_nodes]
        sources = {leaf: brokers[int(rng.integers(len(brokers)))] for leaf in leaves}
        subscriber = brokers[int(rng.integers(len(brokers)))]
        shapes.append(Shape(doc, subscriber, sources, leaves[int(rng.integers(len(leaves)))]))
    return shapes


def make_composites(cfg: Config, shapes: Sequence[Shape], r: int) -> tuple[list[Composite], list[dict[str, float]]]:
    rng = np.random.default_rng([cfg.seed, 11, r])
    out: list[Composite] = []
    rates: list[dict[str, float]] = []
    span_ms = int(cfg.seconds * 1000)
    for i, s in enumerate(shapes):
        tree = parse_composite(s.tree_doc)
        lam = {leaf.id: cfg.lam if leaf.id == s.heavy else cfg.lam / r for leaf in tree.leaf_nodes}
        times = {}
        for leaf, rate in lam.items():
            n = int(rng.poisson(rate * cfg.seconds))
            times[leaf] = np.sort(rng.integers(0, span_ms, n)).astype(np.int64)
        out.append(Composite(f"cs{i}", tree, s.subscriber, s.sources, times))
        rates.append(lam)
    return out, rates


def instance(
    brokers: Sequence[str], links: list[dict[str, Any]], comp: Composite, rates: Mapping[str, float]
) -> PlacementInstance:
    return PlacementInstance.from_json(
        {
            "brokers": list(brokers),
            "links": links,
            "sources": [{"leaf": leaf, "broker": comp.sources[leaf], "rate": rate} for leaf, rate in rates.items()],
            "subscription": {
                "id": comp.subscription_id,
                "broker": comp.subscriber,
                "tree": to_placement_tree(comp.tree),
            },
        }
    )


def model_input_traffic(
    net: Network, comp: Composite, rates: Mapping[str, float], placement: Mapping[str, str]
) -> float:
    """The leaf-input part of docs/reference/placement.md's cost: Σ_leaf rate × D[source, P[its operator]]."""
    idx = {b: i for i, b in enumerate(net.brokers)}
    total = 0.0
    for n in comp.tree.operators():
        for c in n.children:
            if isinstance(c, Leaf):
                total += rates[c.id] * float(net.cost[idx[comp.sources[c.id]], idx[placement[n.id]]])
    return total


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, b: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(num), (b, len(num)))
    ratios = num[pick].sum(axis=1) / den[pick].sum(axis=1)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return float(lo), float(hi)


def run(cfg: Config) -> int:
    t0 = time.perf_counter()
    topo = build_topology(cfg)
    brokers = topo.ids()
    net = Network.from_links(brokers, [(k.src, k.dst, k.cost, cfg.ms_per_cost * k.cost) for k in topo.links])
    links = [{"from": k.src, "to": k.dst, "cost": k.cost} for k in topo.links]
    shapes = make_shapes(cfg, brokers)
    n_nested = sum(len(parse_composite(s.tree_doc).leaf_nodes) == 3 for s in shapes)
    finite = net.delay_ms[np.isfinite(net.delay_ms)]
    print(f"overlay: {topo.name}, {len(brokers)} brokers, {len(topo.links)} directed links, costs={cfg.costs}, ")
    print(
        f"  link delay {cfg.ms_per_cost:g} ms x cost; mean path {np.mean(net.hops[net.hops > 0]):.2f} hops, "
        f"diameter {int(net.hops.max())} hops / {float(finite.max()):g} ms"
    )
    print(
        f"workload: {cfg.composites} composites ({cfg.composites - n_nested} and(L1,L2), {n_nested} with 3 leaves "
        f"nested and/or), within_ms={cfg.within_ms}, heavy leaf {cfg.lam:g}/s, others {cfg.lam:g}/r per s, "
        f"Poisson over {cfg.seconds:g} s, seed {cfg.seed}; ~est = planned from the first {cfg.estimate_s:g} s"
    )
    failures: list[str] = []
    header = (
        f"{'r':>5} {'method':<15} {'tx/s':>9} {'vs JP':>6} {'saved':>6} {'95% CI saved':>14} {'model/s':>9} "
        f"{'meas/model':>10} {'in meas/model':>13} {'delay ms':>8} {'p95':>6} {'dets':>7} {'at JP':>6}"
    )
    summary: dict[tuple[int, str], float] = {}
    analysis: list[str] = []
    for r in cfg.imbalances:
        comps, true_rates = make_composites(cfg, shapes, r)
        est_rates = [
            {leaf: float(np.sum(c.times_ms[leaf] < cfg.estimate_s * 1000)) / cfg.estimate_s for leaf in c.times_ms}
            for c in comps
        ]
        true_inst = [instance(brokers, links, c, lam) for c, lam in zip(comps, true_rates, strict=True)]
        est_inst = [instance(brokers, links, c, lam) for c, lam in zip(comps, est_rates, strict=True)]
        rows: list[tuple[str, list[dict[str, str]]]] = []
        for method in METHODS:
            rows.append((method, [dict(place(i, method).placement) for i in true_inst]))
        for method in METHODS[1:]:
            rows.append((method + " ~est", [dict(place(i, method).placement) for i in est_inst]))
        jp = rows[0][1]
        matches = component_matches(comps)
        ref = detect(comps, matches)
        events = len(matches.pub_ms)
        print(
            f"\nimbalance 1:{r}: {events} events ({events / cfg.seconds:.0f}/s), "
            f"{len(ref.detection_ids)} operator detections"
        )
        print(header)
        jp_tx: np.ndarray | None = None
        for name, placements in rows:
            out = detect_in_arrival_order(net, comps, placements, matches)
            if out.detection_ids != ref.detection_ids:
                failures.append(f"1:{r} {name}: detections differ from the reference run")
            if out.stats.late:
                failures.append(f"1:{r} {name}: {out.stats.late} component matches arrived late")
            res = replay(net, comps, out, placements)
            tx = res.transmissions.astype(np.float64)
            if jp_tx is None:
                jp_tx = tx
            model = sum(traffic_cost(i, p) for i, p in zip(true_inst, placements, strict=True))
            model_in = sum(
                model_input_traffic(net, c, lam, p) for c, lam, p in zip(comps, true_rates, placements, strict=True)
            )
            meas_w = float(res.weighted.sum()) / cfg.seconds
            meas_in = 0.0
            if cfg.costs == "unit":
                meas_in = float(res.input_transmissions.sum()) / cfg.seconds
                if not np.allclose(res.weighted, res.transmissions):
                    failures.append(f"1:{r} {name}: unit costs but cost-weighted traffic != transmissions")
            ratio = float(tx.sum() / jp_tx.sum())
            lo, hi = bootstrap_ratio(tx, jp_tx, cfg.bootstrap, cfg.seed + r)
            roots = sum(len(out.per_operator[i][c.tree.root.id][0]) for i, c in enumerate(comps))
            ops = [(p[n], j[n]) for p, j in zip(placements, jp, strict=True) for n in p]
            at_jp = np.mean([a == b for a, b in ops])
            d = res.delays_ms
            in_col = f"{meas_in / model_in:>13.3f}" if cfg.costs == "unit" and model_in > 0 else f"{'-':>13}"
            ci = f"[{(1 - hi) * 100:+5.1f},{(1 - lo) * 100:+5.1f}]%"
            print(
                f"{'1:' + str(r):>5} {name:<15} {tx.sum() / cfg.seconds:>9.1f} {ratio:>6.3f} "
                f"{(1 - ratio) * 100:>5.1f}% "
                f"{ci:>14} {model:>9.1f} {meas_w / model:>10.3f} {in_col} {d.mean():>8.1f} "
                f"{np.quantile(d, 0.95):>6.1f} {roots:>7} {at_jp * 100:>5.1f}%"
            )
            summary[(r, name)] = ratio
            summary[(r, name + " lo")] = lo
            summary[(r, name + " hi")] = hi
            if cfg.costs == "unit" and model_in > 0 and abs(meas_in / model_in - 1) > 0.05:
                failures.append(f"1:{r} {name}: measured input traffic is {meas_in / model_in:.3f} x the model's")
        analysis.append(adaptive_analysis(r, true_inst, rows))
    print("\nadaptive vs optimal (true rates), per imbalance:")
    for line in analysis:
        print(line)
    verdicts = []
    if (10, "adaptive") in summary:
        saved = 1 - summary[(10, "adaptive")]
        ok = saved >= TARGET_SAVING_AT_10
        verdicts.append(
            f"1:10 adaptive saves {saved * 100:.1f}% vs joint-point (target >= 40%): {'MET' if ok else 'MISSED'}"
        )
    if (1, "adaptive") in summary:
        ratio, lo, hi = summary[(1, "adaptive")], summary[(1, "adaptive lo")], summary[(1, "adaptive hi")]
        worse = lo > 1.0 + 1e-12  # worse beyond noise: the whole 95% interval above joint-point
        verdicts.append(
            f"1:1 adaptive/joint-point traffic = {ratio:.3f} (95% CI {lo:.3f}-{hi:.3f}): "
            f"{'WORSE than' if worse else 'not worse than'} the baseline beyond noise"
        )
    print("\ntargets:")
    for v in verdicts:
        print("  " + v)
    print(f"\nsanity checks: {'all passed' if not failures else 'FAILED'}")
    for f in failures:
        print("  " + f)
    print(f"runtime {time.perf_counter() - t0:.1f} s")
    return 1 if failures else 0


def adaptive_analysis(
    r: int, insts: Sequence[PlacementInstance], rows: Sequence[tuple[str, list[dict[str, str]]]]
) -> str:
    by = dict(rows)
    jp, ad, op = by["joint-point"], by["adaptive"], by["optimal"]
    n = len(insts)
    stay = sum(a == j for a, j in zip(ad, jp, strict=True))
    same = sum(a == o for a, o in zip(ad, op, strict=True))
    opt_stay = sum(o == j for o, j in zip(op, jp, strict=True))
    gap = [traffic_cost(i, a) - traffic_cost(i, o) for i, a, o in zip(insts, ad, op, strict=True)]
    worse = [g for g in gap if g > 1e-9]
    jp_cost = sum(traffic_cost(i, j) for i, j in zip(insts, jp, strict=True))
    return (
        f"  1:{r}: adaptive keeps the joint point in {stay}/{n} composites (optimal: {opt_stay}/{n}); "
        f"equals optimal in {same}/{n}; where it differs its model cost is {sum(worse):.1f}/s above optimal "
        f"({len(worse)} composites, {sum(worse) / jp_cost * 100:.1f}% of joint-point's model cost)"
    )


def parse_args(argv: Sequence[str] | None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--composites", type=int, default=200)
    p.add_argument("--nested", type=float, default=0.25, help="share of 3-leaf nested composites")
    p.add_argument("--within-ms", type=int, default=1000)
    p.add_argument("--lam", type=float, default=20.0, help="rate of the heavy leaf (events/s)")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--imbalances", type=str, default="1,10,100")
    p.add_argument("--estimate-s", type=float, default=10.0)
    p.add_argument("--ms-per-cost", type=float, default=5.0)
    p.add_argument("--costs", choices=("unit", "gt-itm"), default="unit")
    p.add_argument("--quick", action="store_true", help="60 composites over 20 s")
    a = p.parse_args(argv)
    cfg = Config(
        seed=a.seed,
        composites=60 if a.quick else a.composites,
        nested=a.nested,
        within_ms=a.within_ms,
        lam=a.lam,
        seconds=20.0 if a.quick else a.seconds,
        imbalances=tuple(int(x) for x in a.imbalances.split(",")),
        estimate_s=5.0 if a.quick else a.estimate_s,
        ms_per_cost=a.ms_per_cost,
        costs=a.costs,
    )
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
