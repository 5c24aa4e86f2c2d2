"""Benchmark of the channel planner: false positives of every method, and the time to re-cluster.

Workloads (printed with the numbers; all from ``--seed``):

- **WL1**, **WL2** and **WL2 hot** (preset ``clusters``, Tariq §3.3.2 and §3.6, the preset's
  thesis parameters): 5 integer attributes ``x1..x5`` on [0, 30], each subscription a box of
  ``between`` predicates sized so an event matches ~5% of subscriptions. WL1: subscriptions and
  events uniform. WL2 as in the thesis's false-positive experiment (§3.3.2, Fig. 3.2c-d):
  subscriptions uniform, events around five Zipf-popular hotspots, so that the structural
  baselines get no head start from subscriptions piled on the hotspots. WL2 hot: subscriptions
  and events both around the hotspots. Domains for ``ck``/``ov``: ``x1..x5`` = {min 0, max 30}.
- **Gryphon 0.78** and **Gryphon 0.88** (preset ``gryphon``, Opyrchal et al. §3.1): 15 attributes
  ``a0..a14`` x 4 Zipf values, equality or don't-care, decay 0.78 (~2% match rate) or 0.88
  (~0.2%). Domains: ``a0..a14`` = {min 1, max 4} (no regionalism, so no ``region``).

Part 1, false positives. Per workload, ``--subs`` subscriptions and a sample of ``--events``
events (psi = ``--psi``), for each K in ``--ks``: FP of every bounded method (flooding, exact,
ck, ov, kmeans, spectral-rassoc, spectral-ncut, approx) computed on one shared match matrix and
similarity (the ``ov`` overlap matrix is built once per workload), then ``auto`` through
``plan_channels`` with its default budget (its own full run, timed: it shows which method it
chose and how many candidates fitted in the budget), and the channels job's choice (``job``:
``routing.channels.recluster`` with ``auto``, the filters and the domains, as ``siftstream
channels-job --domains`` re-clusters; the line is marked ``WORSE`` when it has more FP than
``ck``, ``ov`` or ``approx``). ``exact`` runs only when the instance has at
most ``EXACT_LIMIT`` distinct match sets (else ``n/a``). Each line gives, for spectral-ncut
(``ncut``) and spectral-rassoc (``rassoc``), the reduction 1 - FP(method)/FP(baseline) against
``ck`` and ``ov``. The last line counts, per method, the instances where it had the fewest FP
(ties count for every tied method; ``auto`` is left out: it is a choice among the others).

Part 2, time. On Gryphon 0.88 samples of ``--scale-sizes`` subscriptions (``--scale-events``
events), the time to derive the match matrix (``derive_hits``), the similarity J, and to
re-cluster with spectral-ncut (J included), approx, and auto (default budget, its own full run;
no domains, so ck/ov are not candidates). The issue's target is N = 32,000 in <= 2 s.
spectral-ncut, kmeans and auto build a dense N x N J (float64: 8 N^2 bytes per copy, ~3 copies
while J is built); a size whose J would not fit in ``--max-dense-gb`` is capped (printed
``capped``), not run. The match matrix is measured at every size, approx up to
``--approx-max-distinct`` distinct match sets, auto up to ``--auto-max`` subscriptions (its
k-means candidate alone takes many seconds beyond). Then the join rule
(``routing.channels.methods.join_isolated``, target <= 1 ms per placement): it is a batch
function (it rebuilds every channel's union before placing the unplaced subscriptions), so it
is timed two ways over ``--placements`` new subscriptions on the largest uncapped size: one
``join_isolated`` call per new subscription (everything else placed by spectral-ncut), and
``ChannelUnions.place`` (the same step, ΔFP over the K channels, argmin, update) on unions kept
between placements, as the channels job will keep them.

Times are wall clock on this machine; in part 2 the best of ``--repeat`` runs (auto: one run). No assertion on time.

``--oos`` (instead of parts 1 and 2): false positives out of sample. Per workload, ``--subs``
subscriptions; every bounded method fitted on the first ``--events`` events of the stream and
scored on the next ``--oos-events``; beside them ``in-sample auto`` (the candidate with the fewest
FP on the events it was fitted to, the rule auto had before it held events out) and ``held-out
auto`` (``routing.channels.recluster`` with ``auto``, the filters and the domains: the job's
choice), each line marked ``WORSE`` when the job's choice has more later FP than ``ck``, ``ov``
or ``approx``; then per method how often it had the fewest later FP, both autos' tallies, and
spectral-rassoc with unit-length rows (``spectral_rassoc(..., unit_rows=True)``, not a contract
method) against ck and ov per workload. In part 1 the job's choice is scored on its own sample,
which it was no longer chosen on: its ``WORSE`` marks there are in-sample readings.

``--job-check``: ``auto`` at the channels job's scale, offline: Gryphon 0.88 with ``--job-subs``
(100,000) subscriptions, the first 2,000 matched events as the sample, K = 32; flooding, approx,
spectral-ncut and auto (``--job-budget-ms``, default 2000; no domains, as the delivery bench runs
the job) each timed, with FP on the sample and on the next ``--oos-events`` matched events, the
deliveries and the channels per event there; once per ``--job-seeds``.

``--scale`` (instead of parts 1 and 2): the channels job's re-clustering at N = ``--scale-sizes``
(default 8,000, 16,000, 32,000) on ``--scale-workload`` (default Gryphon 0.88; WL1, WL2, Gryphon
0.78 as in part 1) with ``--scale-events`` events (2,000), psi =
``--psi``, K = ``--scale-k`` (32 with ``--scale``): per N, ``routing.channels.recluster`` with
``spectral-ncut`` (the sparse path from ``SPARSE_NCUT_FROM`` subscriptions, with the job's
``RECLUSTER_RESTARTS`` k-means restarts and ``RECLUSTER_EIGEN_TOL``), with ``approx`` and
with ``auto`` (the job's default; no domains, default budget), each timed (best of ``--repeat``)
with its FP; ``spectral_ncut_sparse`` with the contract's 10 restarts and a converged ``eigsh``
(``plan ncut``: what ``siftstream plan channels`` runs from ``SPARSE_NCUT_FROM`` subscriptions),
timed once; and the dense ``spectral-ncut``
steps (N x N J, ``eigh``) where their J fits in ``--max-dense-gb``, for the FP of the dense path.
Then ``ChannelUnions.place`` per placement at the largest N, on the unions of the default plan.
The header names the BLAS thread setting (``OPENBLAS_NUM_THREADS``), which matters on a shared
machine. The compiled kernels (numba, ``approx``) are loaded before the first timing.

Run: ``.venv/bin/python bench/channels.py`` (a few minutes; ``--quick``: small sizes, seconds;
``--scale``: the re-clustering target; ``--oos``: about 5 minutes; ``--job-check``: about a
minute per seed). Readings: docs/results/channels.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from producers.workloads import ClustersWorkload, GryphonWorkload
from routing.channels import (
    EXACT_LIMIT,
    ChannelInstance,
    ChannelUnions,
    derive_hits,
    exact,
    jaccard,
    join_isolated,
    plan_channels,
    plan_metrics,
    recent_windows,
    recluster,
)
from routing.channels.match_sets import false_positives
from routing.channels.methods import (
    _distinct_rows,
    approx,
    ck,
    flooding,
    kmeans_on_rows,
    overlap,
    spectral_ncut,
    spectral_ncut_sparse,
    spectral_rassoc,
)

METHODS = ("flooding", "exact", "ck", "ov", "kmeans", "spectral-rassoc", "spectral-ncut", "approx")
SHORT = {
    "flooding": "flood",
    "exact": "exact",
    "ck": "ck",
    "ov": "ov",
    "kmeans": "kmeans",
    "spectral-rassoc": "rassoc",
    "spectral-ncut": "ncut",
    "approx": "approx",
}


def workload(name: str, subs: int, seed: int) -> tuple[Any, dict[str, Any], str]:
    """The preset, its ``domains`` document and a one-line description."""
    if name.startswith("WL"):
        events, placed = name.split()[0], "WL2" if name.endswith("hot") else "WL1"
        w = ClustersWorkload(subscriptions=subs, distribution=events, subscriptions_distribution=placed, seed=seed)
        doms = {f"x{d + 1}": {"min": 0, "max": 30} for d in range(w.dims)}
        shape = {
            "WL1": "uniform",
            "WL2": "uniform subscriptions, events around 5 Zipf hotspots",
            "WL2 hot": "subscriptions and events around 5 Zipf hotspots",
        }[name]
        desc = f"{name}: clusters preset, {subs} subs, 5 dims on [0,30], match rate 5%, {shape}"
        return w, doms, desc
    decay = float(name.split()[-1])
    w = GryphonWorkload(brokers=1, clients_per_broker=max(1, subs // 5), subs_per_client=5, decay=decay, seed=seed)
    doms = {f"a{j}": {"min": 1, "max": 4} for j in range(w.k)}
    desc = f"{name}: gryphon preset, {len(w.sub_matrix)} subs, 15 attrs x 4 Zipf values, decay {decay}"
    return w, doms, desc


def instance(w: Any, doms: dict[str, Any], events: int, k: int, psi: int, seed: int) -> ChannelInstance:
    doc = {
        "k": k,
        "psi": psi,
        "seed": seed,
        "subscriptions": [
            {"subscription_id": s["subscription_id"], "subscriber_id": s["subscriber_id"], "filter": s["filter"]}
            for s in w.subscriptions()
        ],
        "events": [{"event_id": e["event_id"], "attributes": e["attributes"]} for e in w.batch(events)],
        "domains": doms,
    }
    return ChannelInstance.from_json(doc)


def reduction(fp: int | None, base: int | None) -> str:
    if fp is None or base is None:
        return "  n/a"
    if base == 0:
        return "  0/0" if fp == 0 else " -inf"
    return f"{1 - fp / base:+.0%}".rjust(5)


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def method_runners(
    hits: Any, sim: Any, ov_w: Any, inst: ChannelInstance, k: int, seed: int, distinct: int
) -> dict[str, Callable[[], Any]]:
    """Each bounded method on one shared match matrix, similarity J and overlap O (``exact``: None
    beyond its limit)."""
    ids, filters, domains = inst.subscription_ids, inst.filters, inst.domains
    return {
        "flooding": lambda: flooding(len(ids)),
        "exact": lambda: exact(hits, k, ids) if distinct <= EXACT_LIMIT else None,
        "ck": lambda: ck(filters, domains, k, ids, seed),
        "ov": lambda: spectral_ncut(hits, ov_w, k, ids, seed),
        "kmeans": lambda: kmeans_on_rows(sim, k, ids, seed),
        "spectral-rassoc": lambda: spectral_rassoc(hits, sim, k, ids, seed),
        "spectral-ncut": lambda: spectral_ncut(hits, sim, k, ids, seed),
        "approx": lambda: approx(hits, k, ids),
    }


def fp_workload(name: str, args: argparse.Namespace, wins: dict[str, int], worse_count: list[int]) -> int:
    """Part 1 for one workload: a line per K; adds to ``wins`` and, where the job's choice has more
    FP than ck, ov or approx, to ``worse_count[0]``; returns the number of instances."""
    instances = 0
    w, doms, desc = workload(name, args.subs, args.seed)
    base = instance(w, doms, args.events, 1, args.psi, args.seed)
    t_hits, hits = timed(lambda b=base: derive_hits(b.filters, b.events))
    t_sim, sim = timed(lambda h=hits: jaccard(recent_windows(h, args.psi)))
    distinct = len(_distinct_rows(hits)[0])
    ids, filters, domains = base.subscription_ids, base.filters, base.domains
    t_ov, ov_w = timed(lambda f=filters, d=domains: overlap(f, d))
    matched = int(hits.any(axis=0).sum())
    print(
        f"-- {desc}; {base.events.__len__()} events ({matched} matched), {hits.sum()} matches, "
        f"{distinct} distinct match sets; hits {t_hits:.2f}s, J {t_sim:.2f}s, overlap O {t_ov:.2f}s"
    )
    header = " ".join(f"{SHORT[m]:>7}" for m in METHODS)
    print(
        f"   {'K':>3} {header} | {'auto':>6} {'(chose, ran, s)':<26} | {'job':>7} {'(chose, s)':<22} "
        "| ncut/ck rassoc/ck ncut/ov rassoc/ov"
    )
    for k in args.ks:
        fps: dict[str, int | None] = {}
        secs: dict[str, float] = {}
        runners = method_runners(hits, sim, ov_w, base, k, args.seed, distinct)
        for m in METHODS:
            secs[m], labels = timed(runners[m])
            fps[m] = None if labels is None else plan_metrics(hits, labels).false_positives
        t_auto, doc = timed(lambda k=k: plan_channels(base.with_k(k), "auto"))
        chose = f"({doc['chosen']}, {len(doc['candidates'])}/{len(METHODS)}, {t_auto:.1f}s)"
        t_job, (job_labels, job_used) = timed(
            lambda k=k: recluster(hits, ids, k, "auto", args.psi, args.seed, filters=filters, domains=domains)
        )
        job_fp = plan_metrics(hits, job_labels).false_positives
        job = f"({job_used}, {t_job:.1f}s)"
        worse = [m for m in ("ck", "ov", "approx") if fps[m] is not None and job_fp > fps[m]]
        if worse:
            worse_count[0] += 1
        best = min(v for v in fps.values() if v is not None)
        for m in METHODS:
            if fps[m] == best:
                wins[m] += 1
        instances += 1
        cells = " ".join(f"{'n/a' if fps[m] is None else fps[m]:>7}" for m in METHODS)
        red = " ".join(
            reduction(fps[a], fps[b]).rjust(width)
            for (a, b), width in (
                (("spectral-ncut", "ck"), 7),
                (("spectral-rassoc", "ck"), 9),
                (("spectral-ncut", "ov"), 7),
                (("spectral-rassoc", "ov"), 9),
            )
        )
        flag = f"  WORSE than {', '.join(worse)}" if worse else ""
        print(
            f"   {k:>3} {cells} | {doc['summary']['false_positives']:>6} {chose:<26} | {job_fp:>7} {job:<22} "
            f"| {red}  [{name}]{flag}"
        )
        slow = ", ".join(f"{SHORT[m]} {secs[m]:.2f}s" for m in METHODS if secs[m] >= 0.5)
        if slow:
            print(f"       (methods over 0.5 s at K={k}: {slow}; ov excludes its overlap O)")
    return instances


def part_fp(args: argparse.Namespace) -> None:
    print(f"== false positives: {args.subs} subs, {args.events} events, psi={args.psi}, K in {args.ks}")
    print("   (reductions: 1 - FP(method)/FP(baseline); 'auto' = plan_channels(method='auto'), default budget)")
    wins = dict.fromkeys(METHODS, 0)
    worse = [0]
    instances = sum(fp_workload(name, args, wins, worse) for name in args.workloads)
    tally = ", ".join(f"{m} {wins[m]}" for m in METHODS)
    print(f"== fewest FP over {instances} instances (ties count for each): {tally}")
    print(f"== the channels job's choice had more FP than ck, ov or approx on {worse[0]} of {instances} instances")


def later_metrics(later: Any, labels: Any) -> tuple[int, int, int, int]:
    """FP, deliveries D, writes W and matched events of ``labels`` on the later events ``later`` (csr)."""
    from scipy import sparse

    fp = false_positives(later, labels)
    _, channel = np.unique(labels, return_inverse=True)
    member = sparse.csr_matrix((np.ones(len(labels), dtype=np.float32), (channel, np.arange(len(labels)))))
    writes = int(((member @ later) > 0).sum())
    return fp, fp + int(later.nnz), writes, int((later.getnnz(axis=0) > 0).sum())


def oos_workload(
    name: str,
    args: argparse.Namespace,
    wins: dict[str, int],
    tally: dict[str, int],
    unit_fp: dict[str, list[tuple[int, int, int]]],
) -> int:
    """``--oos`` for one workload: every method fitted on the first ``--events`` events of the stream
    and scored on the next ``--oos-events``; ``auto`` judged on the sample as before (``in-sample``:
    the candidate with the fewest FP on the events it was fitted to) and as now (``held-out``:
    ``recluster(..., "auto")``, fitted on the sample's older 75% and judged on its newest 25%). Adds
    to ``unit_fp[name]`` the later FP of spectral-rassoc with unit rows (not a contract method), ck's
    and ov's."""
    from scipy import sparse

    w, doms, desc = workload(name, args.subs, args.seed)
    whole = instance(w, doms, args.events + args.oos_events, 1, args.psi, args.seed)
    all_hits = derive_hits(whole.filters, whole.events)
    hits = np.ascontiguousarray(all_hits[:, : args.events])
    later = sparse.csr_matrix(all_hits[:, args.events :], dtype=np.float32)
    sim = jaccard(recent_windows(hits, args.psi))
    ids, filters, domains = whole.subscription_ids, whole.filters, whole.domains
    ov_w = overlap(filters, domains)
    distinct = len(_distinct_rows(hits)[0])
    print(
        f"-- {desc}; fitted on events 1..{args.events} ({int(hits.sum())} matches), scored on the next "
        f"{args.oos_events} ({int(later.nnz)} matches)"
    )
    methods = [m for m in METHODS if m != "exact" or distinct <= EXACT_LIMIT]
    header = " ".join(f"{SHORT[m]:>8}" for m in methods)
    print(f"   {'K':>3} {header} | {'in-sample auto':<24} | {'held-out auto (job)':<28} | later FP vs ck/ov")
    for k in args.ks:
        runners = method_runners(hits, sim, ov_w, whole, k, args.seed, distinct)
        labels = {m: runners[m]() for m in methods}
        inside = {m: false_positives(hits, labels[m]) for m in methods}
        after = {m: false_positives(later, labels[m]) for m in methods}
        old = min(methods, key=lambda m: (inside[m], METHODS.index(m)))
        unit = false_positives(later, spectral_rassoc(hits, sim, k, ids, args.seed, unit_rows=True))
        unit_fp[name].append((unit, after["ck"], after["ov"]))
        job_labels, job = recluster(hits, ids, k, "auto", args.psi, args.seed, filters=filters, domains=domains)
        job_fp = false_positives(later, job_labels)
        best = min(after.values())
        for m in methods:
            wins[m] += after[m] == best
        tally["instances"] += 1
        tally["old_best"] += after[old] == best
        tally["new_best"] += job_fp == best
        worse = [m for m in ("ck", "ov", "approx") if job_fp > after[m]]
        tally["worse"] += bool(worse)
        tally["old_worse"] += any(after[old] > after[m] for m in ("ck", "ov", "approx"))
        cells = " ".join(f"{after[m]:>8}" for m in methods)
        flag = f"  WORSE than {', '.join(worse)}" if worse else ""
        print(
            f"   {k:>3} {cells} | {old + ' ' + str(after[old]):<24} | {job + ' ' + str(job_fp):<28} | "
            f"ncut {reduction(after['spectral-ncut'], after['ck'])}/{reduction(after['spectral-ncut'], after['ov'])}"
            f" rassoc {reduction(after['spectral-rassoc'], after['ck'])}/"
            f"{reduction(after['spectral-rassoc'], after['ov'])}  [{name}]{flag}"
        )
    return len(args.ks)


def part_oos(args: argparse.Namespace) -> None:
    print(
        f"== false positives out of sample: {args.subs} subs, fit on {args.events} events, scored on the next "
        f"{args.oos_events}; psi={args.psi}, K in {args.ks}, seed {args.seed}"
    )
    wins = dict.fromkeys(METHODS, 0)
    tally = dict.fromkeys(("instances", "old_best", "new_best", "worse", "old_worse"), 0)
    unit_fp: dict[str, list[tuple[int, int, int]]] = {name: [] for name in args.workloads}
    for name in args.workloads:
        oos_workload(name, args, wins, tally, unit_fp)
    n = tally["instances"]
    tallied = ", ".join(f"{m} {wins[m]}" for m in METHODS)
    print(f"== fewest later FP over {n} instances (ties count for each): {tallied}")
    print(
        f"== in-sample auto: fewest later FP on {tally['old_best']} of {n}, worse than ck, ov or approx on "
        f"{tally['old_worse']}; held-out auto (the job's): fewest on {tally['new_best']} of {n}, "
        f"worse on {tally['worse']}"
    )
    for name, rows in unit_fp.items():
        vs_ck = np.mean([1 - u / c for u, c, _ in rows])
        vs_ov = np.mean([1 - u / o for u, _, o in rows])
        later = ", ".join(str(u) for u, _, _ in rows)
        print(
            f"== spectral-rassoc with unit rows (not the contract's), later FP {later} [{name}]: "
            f"mean reduction {vs_ck:+.0%} against ck, {vs_ov:+.0%} against ov"
        )


def part_job_check(args: argparse.Namespace) -> None:
    """``--job-check``: auto's choice at the channels job's scale, offline: Gryphon 0.88, ``--job-subs``
    subscriptions, a sample of the first 2,000 matched events (the job's ``sample_events``), K = 32,
    every candidate scored on the ``--oos-events`` matched events that follow; once per ``--job-seeds``."""
    for seed in args.job_seeds:
        job_check_seed(args, seed)


def job_check_seed(args: argparse.Namespace, seed: int) -> None:
    """One ``--job-check`` reading: the workload, the sample and the k-means all drawn from ``seed``."""
    from scipy import sparse

    k, size = 32, 2000
    w, _, desc = workload("Gryphon 0.88", args.job_subs, seed)
    inst = instance(w, {}, int((size + args.oos_events) * 1.1), k, args.psi, seed)
    t_hits, all_hits = timed(lambda: derive_hits(inst.filters, inst.events))
    all_hits = all_hits[:, all_hits.any(axis=0)]  # the matches topic: events some subscription matched
    hits = np.ascontiguousarray(all_hits[:, :size])
    later = sparse.csr_matrix(all_hits[:, size : size + args.oos_events], dtype=np.float32)
    ids = inst.subscription_ids
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    print(
        f"== auto at the job's scale: {desc}; sample = the first {size} matched events ({int(hits.sum())} matches), "
        f"later = the next {later.shape[1]} ({int(later.nnz)} matches); K={k}, psi={args.psi}, seed {seed}, "
        f"auto's budget {args.job_budget_ms:g} ms; hits {t_hits:.1f}s; OPENBLAS_NUM_THREADS={blas}"
    )
    print(f"   {'method':<22} {'time s':>7} {'sample FP':>11} {'later FP':>11} {'later D':>11} {'channels/event':>14}")
    sample_fp: dict[str, int] = {}
    for method in ("flooding", "approx", "spectral-ncut", "auto"):
        t, (labels, used) = timed(
            lambda m=method: recluster(hits, ids, k, m, args.psi, seed, budget_ms=args.job_budget_ms)
        )
        fp, d, writes, matched = later_metrics(later, labels)
        if method != "auto":
            sample_fp[method] = false_positives(hits, labels)
        name = method if method != "auto" else f"auto -> {used}"
        print(
            f"   {name:<22} {t:>7.2f} {false_positives(hits, labels):>11} {fp:>11} {d:>11} "
            f"{writes / max(matched, 1):>14.1f}"
        )
    old = min(sample_fp, key=lambda m: (sample_fp[m], METHODS.index(m)))
    print(f"   (auto judged on the sample it fits, as before, would choose {old}; no domains, as the e2e bench runs)")


def part_time(args: argparse.Namespace) -> None:
    k = args.scale_k
    print(
        f"== time to re-cluster, Gryphon 0.88, {args.scale_events} events, psi={args.psi}, K={k}; "
        f"dense J capped at {args.max_dense_gb:g} GB (3 copies of 8 N^2 bytes); target N=32000 in <= 2 s"
    )
    print(f"   {'N':>6} {'hits s':>7} {'J s':>7} {'ncut s':>8} {'approx s':>9} {'auto s':>8}  auto chose")
    keep: tuple[Any, ...] | None = None
    for n in args.scale_sizes:
        w, _, _ = workload("Gryphon 0.88", n, args.seed)
        inst = instance(w, {}, args.scale_events, k, args.psi, args.seed)
        ids = inst.subscription_ids
        t_hits, hits = timed(lambda i=inst: derive_hits(i.filters, i.events), args.repeat)
        distinct = len(_distinct_rows(hits)[0])
        if distinct <= args.approx_max_distinct:
            t_app, _ = timed(lambda h=hits, i=ids: approx(h, k, i), args.repeat)
            app = f"{t_app:>9.2f}"
        else:
            app = f"{'capped':>9}"
        fits = 3 * 8 * len(ids) ** 2 / 1e9 <= args.max_dense_gb
        if fits:
            t_sim, sim = timed(lambda h=hits: jaccard(recent_windows(h, args.psi)), args.repeat)
            t_ncut, labels = timed(lambda h=hits, s=sim, i=ids: spectral_ncut(h, s, k, i, args.seed), args.repeat)
            t_ncut += t_sim
            if len(ids) <= args.auto_max:
                t_auto, doc = timed(lambda i=inst: plan_channels(i, "auto"))
                auto = f"{t_auto:>8.2f}  {doc['chosen']} (ran {', '.join(doc['candidates'])})"
            else:
                auto = f"{'capped':>8}  (N > --auto-max {args.auto_max})"
            cells = f"{t_sim:>7.2f} {t_ncut:>8.2f} {app} {auto}"
            keep = (hits, labels, ids, n)
        else:
            cells = f"{'capped':>7} {'capped':>8} {app} {'capped':>8}  (dense J ~{3 * 8 * len(ids) ** 2 / 1e9:.0f} GB)"
        print(f"   {len(ids):>6} {t_hits:>7.2f} {cells}  [Gryphon 0.88, {hits.sum()} matches, {distinct} distinct]")
    if keep is None:
        return
    hits, labels, ids, n = keep
    rng = np.random.default_rng(args.seed)
    new = rng.choice(len(ids), size=min(args.placements, len(ids)), replace=False)
    t0 = time.perf_counter()
    for i in new:
        lab = labels.copy()
        lab[i] = -1
        join_isolated(hits, lab, ids, k)
    per_call = (time.perf_counter() - t0) / len(new)
    unions = ChannelUnions(k, hits.shape[1])
    for i, c in enumerate(labels.tolist()):
        unions.add(c, hits[i])
    t0 = time.perf_counter()
    for i in new:
        unions.place(hits[i])
    per_step = (time.perf_counter() - t0) / len(new)
    print(
        f"== join rule, Gryphon 0.88, N={len(ids)}, {hits.shape[1]} events, K={k}, "
        f"{len(new)} placements; target <= 1 ms"
    )
    print(f"   join_isolated call (rebuilds the K unions): {per_call * 1e3:.3f} ms per placement")
    print(f"   ChannelUnions.place on kept unions (ΔFP, argmin, update): {per_step * 1e3:.4f} ms per placement")


def part_scale(args: argparse.Namespace) -> None:
    """``--scale``: re-clustering with the job's entry point at the target sizes, and the join rule."""
    k = args.scale_k
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "unset (OpenBLAS default: all cores)")
    name = args.scale_workload
    print(
        f"== re-clustering for the channels job: {workload(name, 5, args.seed)[2].replace(', 5 subs', '')}, "
        f"{args.scale_events} events, psi={args.psi}, K={k}, seed {args.seed}; "
        f"routing.channels.recluster, best of {args.repeat}; OPENBLAS_NUM_THREADS={blas}; target <= 2 s at N=32000"
    )
    approx(np.eye(4, dtype=bool), 2, ["a", "b", "c", "d"])  # loads the compiled kernel before any timing
    print(
        f"   {'N':>6} {'matches':>8} {'distinct M':>10} {'distinct R':>10} | {'ncut s':>7} {'ncut FP':>10} | "
        f"{'approx s':>8} {'approx FP':>10} | {'auto s':>6} {'auto FP':>10} {'chose':<13} | "
        f"{'plan ncut s':>11} {'plan FP':>10} | {'dense ncut s':>12} {'dense FP':>10}"
    )
    keep: tuple[Any, ...] | None = None
    for n in args.scale_sizes:
        w, _, _ = workload(name, n, args.seed)
        inst = instance(w, {}, args.scale_events, k, args.psi, args.seed)
        ids = inst.subscription_ids
        hits = derive_hits(inst.filters, inst.events)
        distinct_m = len(_distinct_rows(hits)[0])
        distinct_r = len(_distinct_rows(recent_windows(hits, args.psi))[0])
        t_ncut, (ncut, used) = timed(
            lambda h=hits, i=ids: recluster(h, i, k, "spectral-ncut", args.psi, args.seed), args.repeat
        )
        t_app, (app, _) = timed(lambda h=hits, i=ids: recluster(h, i, k, "approx", args.psi, args.seed), args.repeat)
        t_auto, (auto, chose) = timed(
            lambda h=hits, i=ids: recluster(h, i, k, "auto", args.psi, args.seed), args.repeat
        )
        assert used == "spectral-ncut"
        fp_ncut, fp_app = plan_metrics(hits, ncut).false_positives, plan_metrics(hits, app).false_positives
        fp_auto = plan_metrics(hits, auto).false_positives
        t_plan, offline = timed(lambda h=hits, i=ids: spectral_ncut_sparse(h, args.psi, k, i, args.seed))
        plan_cells = f"{t_plan:>11.2f} {plan_metrics(hits, offline).false_positives:>10}"
        if 3 * 8 * len(ids) ** 2 / 1e9 <= args.max_dense_gb:
            t_dense, dense = timed(
                lambda h=hits, i=ids: spectral_ncut(h, jaccard(recent_windows(h, args.psi)), k, i, args.seed)
            )
            dense_cells = f"{t_dense:>12.2f} {plan_metrics(hits, dense).false_positives:>10}"
        else:
            dense_cells = f"{'capped':>12} {'':>10}"
        print(
            f"   {len(ids):>6} {int(hits.sum()):>8} {distinct_m:>10} {distinct_r:>10} | {t_ncut:>7.2f} {fp_ncut:>10} | "
            f"{t_app:>8.2f} {fp_app:>10} | {t_auto:>6.2f} {fp_auto:>10} {chose:<13} | {plan_cells} | {dense_cells}"
        )
        keep = (hits, ncut, ids)
    if keep is None:
        return
    hits, labels, ids = keep
    unions = ChannelUnions(k, hits.shape[1])
    for i, c in enumerate(labels.tolist()):
        unions.add(c, hits[i])
    rng = np.random.default_rng(args.seed)
    new = rng.choice(len(ids), size=min(args.placements, len(ids)), replace=False)
    t0 = time.perf_counter()
    for i in new:
        unions.place(hits[i])
    per_step = (time.perf_counter() - t0) / len(new)
    print(
        f"== join rule at N={len(ids)}, {hits.shape[1]} events, K={k}: ChannelUnions.place on the spectral-ncut plan's "
        f"unions, {len(new)} placements: {per_step * 1e3:.4f} ms per placement (target <= 1 ms)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subs", type=int, default=1000, help="subscriptions per FP instance")
    ap.add_argument("--events", type=int, default=3000, help="events in each sample")
    ap.add_argument("--psi", type=int, default=20, help="recent-event window psi")
    ap.add_argument("--ks", default="8,16,32", help="K values (comma list)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--scale-sizes",
        default=None,
        help="N for the timing part (comma list; 1000,...,32000, --scale 8000,16000,32000)",
    )
    ap.add_argument("--scale-events", type=int, default=2000, help="events in the timing samples")
    ap.add_argument("--scale-k", type=int, default=None, help="K for the timing part (16; --scale: 32)")
    ap.add_argument("--max-dense-gb", type=float, default=8.0, help="cap: largest 3 x 8 N^2 bytes to build J")
    ap.add_argument(
        "--approx-max-distinct", type=int, default=100_000, help="cap: approx only up to this many distinct match sets"
    )
    ap.add_argument("--auto-max", type=int, default=2000, help="cap: auto only up to this N in the timing part")
    ap.add_argument("--repeat", type=int, default=2, help="timing part: best of this many runs (auto: one)")
    ap.add_argument("--placements", type=int, default=200, help="new subscriptions placed by the join rule")
    ap.add_argument("--skip-fp", action="store_true", help="only the timing part")
    ap.add_argument("--skip-time", action="store_true", help="only the FP part")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run of seconds)")
    ap.add_argument(
        "--oos", action="store_true", help="only the out-of-sample FP part (fit on a sample, score on later events)"
    )
    ap.add_argument("--oos-events", type=int, default=3000, help="--oos/--job-check: later events scored")
    ap.add_argument("--job-check", action="store_true", help="only auto's choice at the job's scale (see above)")
    ap.add_argument("--job-subs", type=int, default=100_000, help="--job-check: subscriptions")
    ap.add_argument("--job-seeds", default="0", help="--job-check: seeds (comma list), one reading each")
    ap.add_argument(
        "--job-budget-ms", type=float, default=2000.0, help="--job-check: auto's budget (the job's default: 2000)"
    )
    ap.add_argument(
        "--scale-workload",
        default="Gryphon 0.88",
        choices=("WL1", "WL2", "WL2 hot", "Gryphon 0.78", "Gryphon 0.88"),
        help="--scale: the workload",
    )
    ap.add_argument(
        "--scale", action="store_true", help="only the job's re-clustering at 8k/16k/32k subscriptions (see above)"
    )
    args = ap.parse_args(argv)
    if args.scale_sizes is None:
        args.scale_sizes = "8000,16000,32000" if args.scale else "1000,2000,4000,8000,32000"
    if args.scale_k is None:
        args.scale_k = 32 if args.scale else 16
    if args.quick:
        args.subs, args.events, args.ks = 200, 600, "8,16"
        args.scale_sizes, args.scale_events, args.placements = "500,1000", 500, 50
        args.oos_events, args.job_subs = 600, 5000
    args.ks = [int(x) for x in str(args.ks).split(",")]
    args.scale_sizes = [int(x) for x in str(args.scale_sizes).split(",")]
    args.job_seeds = [int(x) for x in str(args.job_seeds).split(",")]
    args.workloads = ("WL1", "WL2", "WL2 hot", "Gryphon 0.78", "Gryphon 0.88")
    started = time.perf_counter()
    if args.oos or args.job_check:
        if args.oos:
            part_oos(args)
        if args.job_check:
            part_job_check(args)
        print(f"== total {time.perf_counter() - started:.0f} s")
        return 0
    if args.scale:
        part_scale(args)
        print(f"== total {time.perf_counter() - started:.0f} s")
        return 0
    if not args.skip_fp:
        part_fp(args)
    if not args.skip_time:
        part_time(args)
    print(f"== total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
