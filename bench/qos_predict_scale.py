"""Speed of ``qos predict`` at scale (the target: 1,000 brokers and 100,000 subscribers in
<= 5 s on one core), and on the paper's 20-broker tree.

Workloads (``routing.reliability.evaluation_system.reliability_tree_system``, printed with the numbers):

- **table3**: the paper's Table 3 tree, 20 brokers, 8 publishers x 40 content entries,
  100 subscribers (seed 1). The hop-by-hop reference implementation (``predict_reference``) is
  timed beside it on the same machine, and the two predictions are compared.
- **1000/100k**: ``brokers=1000, subscribers=100_000``, the other parameters at their defaults.
  Matching costs 1 ms per stored subscription there, so E[S] = 100 s and every broker is
  overloaded (rho >> 1): every R'_s is 0 and the delay distributions are all zero.
- **1000/100k loaded**: the same tree with ``ms_per_subscription=0.001``, so E[S] = 100 ms as in
  Table 3: the brokers are loaded but stable, and every delay distribution is worked out.

For each: *compile* is ``compile_prediction`` (validation, matching, the route tree),
*predict* is ``predict(system, compiled=...)`` (the queueing model, four evaluations for
the gg1 interval, p95s, the result objects), *total* is ``predict(system)``, each inside
``bulk_allocation()`` as ``siftstream qos predict`` runs it; each is the best
of ``--repeat`` runs (default 2), as wall-clock time and as the process's CPU time (the same on
an idle machine; on a shared one the CPU time is what one core spent, and the target is checked
against it). Building the system document is not timed. Everything runs in one thread (BLAS is
limited to one before numpy loads; ``--pin`` also pins the process to one CPU).

Usage: ``.venv/bin/python bench/qos_predict_scale.py [--repeat 2] [--pin] [--skip-large] [--skip-loaded]
[--skip-overloaded] [--plain]`` (``--plain``: every call outside ``bulk_allocation()``).
Readings: docs/results/qos-predict-scale.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: BLAS single-threaded, set before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.reliability.allocation import bulk_allocation
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.prediction import CompiledSystem, Prediction, compile_prediction, predict
from routing.reliability.reference_predictor import predict_reference

TARGET_S = 5.0


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Best wall-clock and best CPU seconds over ``repeat`` runs, and the last result."""
    wall = cpu = math.inf
    out = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def bulk(fn: Callable[[], Any], enter: bool = True) -> Callable[[], Any]:
    """``fn`` inside :func:`bulk_allocation`, as ``siftstream qos predict`` runs a prediction
    (``enter=False``: as a library call, e.g. inside the QoS job's driver, runs it)."""

    def call() -> Any:
        with bulk_allocation() if enter else contextlib.nullcontext():
            return fn()

    return call


def describe(name: str, system: dict[str, Any], compiled: CompiledSystem, prediction: Prediction) -> None:
    ov, tree = compiled.overlay, compiled.routes
    r = np.array([s.reliability for s in prediction.subscribers.values() if s.reliability is not None])
    rho = np.array([b.rho for b in prediction.brokers.values()])
    p95 = [s.p95_delay_ms for s in prediction.subscribers.values()]
    print(
        f"{name}: {len(ov.broker_ids):,} brokers, {len(ov.link_from):,} links, {len(ov.publisher_ids)} publishers x "
        f"{len(ov.content_p) // max(len(ov.publisher_ids), 1)} content entries, {len(ov.subscriber_ids):,} subscribers "
        f"({compiled.matching.table.shape[1]:,} distinct filters, {compiled.matching.table.shape[0]} distinct "
        f"attribute sets, {int(compiled.matching.dense().sum()):,} matching (entry, subscriber) pairs)"
    )
    print(
        f"  route tree: {len(tree.node_link):,} (publisher, broker) paths, depth <= {int(tree.node_depth.max())}, "
        f"{len(tree.leaf_node):,} (path, subscriber) leaves; E[S] {ov.service[0].mean:g} ms, rho median "
        f"{np.median(rho):.2f} (max {rho.max():.2f}, {int((rho >= 1).sum())} brokers >= 1)"
    )
    print(
        f"  R'_s: mean {r.mean():.3f}, min {r.min():.3f}, max {r.max():.3f} over {len(r):,} defined; "
        f"p95 defined for {sum(x is not None for x in p95):,}; {len(prediction.warnings):,} warnings"
    )


def run(name: str, system: dict[str, Any], repeat: int, plain: bool = False) -> float:
    """Time one workload; returns the best total CPU time (what one core spent: on a shared
    machine the wall-clock time also counts the other processes' turns)."""
    compile_s, compile_cpu, compiled = best_of(repeat, bulk(lambda: compile_prediction(system), not plain))
    predict_s, predict_cpu, prediction = best_of(repeat, bulk(lambda: predict(system, compiled=compiled), not plain))
    total_s, total_cpu, _ = best_of(repeat, bulk(lambda: predict(system), not plain))
    describe(name, system, compiled, prediction)
    verdict = "ok" if total_cpu <= TARGET_S else "MISSED"
    print(
        f"  compile {compile_s:.2f} s + predict {predict_s:.2f} s; total (predict) {total_s:.2f} s (best of {repeat})"
    )
    print(
        f"  CPU time: compile {compile_cpu:.2f} s + predict {predict_cpu:.2f} s; total {total_cpu:.2f} s "
        f"(target <= {TARGET_S:g} s of one core: {verdict})"
    )
    return total_cpu


def table3(repeat: int, plain: bool) -> None:
    system = reliability_tree_system(1)
    run("table3", system, repeat, plain)
    ref_s, _ref_cpu, ref = best_of(repeat, lambda: predict_reference(system))
    fast = predict(system)
    diff = max(
        abs((fast.subscribers[s].reliability or 0.0) - (ref.subscribers[s].reliability or 0.0)) for s in ref.subscribers
    )
    print(f"  reference implementation (predict_reference): {ref_s:.2f} s; max |R'_s difference| {diff:.1e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pin", action="store_true", help="pin the process to one CPU")
    ap.add_argument("--skip-large", action="store_true", help="only the 20-broker tree")
    ap.add_argument("--skip-loaded", action="store_true", help="leave out the 1000/100k loaded variant")
    ap.add_argument("--skip-overloaded", action="store_true", help="leave out the 1000/100k variant at its defaults")
    ap.add_argument("--plain", action="store_true", help="time the calls outside bulk_allocation(), as a library")
    args = ap.parse_args()
    if args.pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    print(
        f"one thread{' pinned to one CPU' if args.pin else ''}, best of {args.repeat}; seed {args.seed}; "
        f"{'outside' if args.plain else 'inside'} bulk_allocation()"
    )
    predict(reliability_tree_system(2, brokers=3, subscribers=5))  # load the compiled matching kernels
    table3(args.repeat, args.plain)
    if args.skip_large:
        return 0
    missed = False
    variants: list[tuple[str, dict[str, Any]]] = [] if args.skip_overloaded else [("1000/100k", {})]
    if not args.skip_loaded:
        variants.append(("1000/100k loaded", {"ms_per_subscription": 0.001}))
    for name, extra in variants:
        t0 = time.perf_counter()
        system = reliability_tree_system(args.seed, brokers=1000, subscribers=100_000, **extra)
        print(f"(built the {name} system in {time.perf_counter() - t0:.1f} s, not timed)")
        missed |= run(name, system, args.repeat, args.plain) > TARGET_S
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
