"""Benchmark of the matching index: W1, Gryphon, churn and memory, beside the oracle.

Workloads (printed with the numbers):

- **W1**, the public REIN benchmark shape: 20 attributes, integer domain [0, 10^6], each
  subscription 10 ``between`` predicates of width 0.5 x domain on distinct random attributes,
  every event carries all 20 attributes (~0.1% of subscriptions match an event). Matched in
  batches of ``--w1-batch`` events (the matching job hands the index whole Arrow batches, up to
  10,000 events). Beside it, in the same run, a vectorised numpy scan of the same subscriptions
  (``W1Scan``: every predicate's bounds as arrays, one vectorised compare per event) on the first
  events, with the ratio of their CPU times; the run stops if their per-event match counts differ.
- **Gryphon** (preset ``gryphon``, Opyrchal et al. §3.1): 15 attributes x 4 Zipf values,
  equality and don't-care, decay 0.78 (~2% match rate) and 0.88 (~0.2%).
- **Churn**: on the Gryphon index, alternating unsubscribe of a random subscription and subscribe
  of a fresh one (pre-parsed ``Filter`` objects), applied in batches (``MatchIndex.apply`` of
  ``--churn-batch`` operations, then ``flush``, as the matching job applies a micro-batch's
  changes), and beside it one ``add``/``remove`` call per operation with a flush every 1,000; the
  bit work is inside the timing, a match of 64 events after each flush is not; afterwards results
  are checked against the oracle.

The index runs on one core (numba kernels, no threads). Times are wall clock on this machine;
each line says what was timed (the lines give the process's CPU time too: on a shared machine,
wall clock also counts the time others held the core). ``match`` returns each event's matching
distinct filters, each standing for a run of its subscriptions (``Matches``); the Gryphon line
also gives the rate with every event's subscription slots spelled out (``Matches.slots``). The oracle
(``BruteForceIndex``: ``Filter.matches`` on every subscription) is timed on a sample of the same
events, and its answers are compared with the index's for that sample.

Usage: ``.venv/bin/python bench/matching.py [--w1 10000,100000,1000000] [--gryphon 100000]
[--w1-batch 4096] [--churn 200000] [--churn-batch 10000] [--churn-only | --w1-only] [--quick]``.
Readings and their history: docs/results/matching.md.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from producers.workloads import GryphonWorkload
from routing.matching.index import BruteForceIndex, EventBatch, MatchIndex
from routing.matching.language import Filter, Op, Predicate, parse_filter

DOMAIN = 10**6


def w1_bounds(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """W1's subscriptions as arrays: ``(attrs, lows)``, each ``(n, 10)``; subscription ``i`` is the
    ``between lows[i, j] and lows[i, j] + DOMAIN // 2`` on attribute ``a{attrs[i, j]}`` for every ``j``."""
    rng = np.random.default_rng(seed)
    attrs = np.argsort(rng.random((n, 20)), axis=1)[:, :10]
    lows = rng.integers(0, DOMAIN // 2 + 1, (n, 10))
    return attrs, lows


def w1_filters(n: int, seed: int) -> list[Filter]:
    attrs, lows = (x.tolist() for x in w1_bounds(n, seed))
    names = [f"a{i}" for i in range(20)]
    half = DOMAIN // 2
    return [
        Filter(tuple(Predicate(names[a], Op.BETWEEN, (lo, lo + half)) for a, lo in zip(attrs[i], lows[i], strict=True)))
        for i in range(n)
    ]


def w1_values(n: int, seed: int) -> np.ndarray:
    """``n`` W1 events as an ``(n, 20)`` matrix of attribute values."""
    return np.random.default_rng(seed).integers(0, DOMAIN + 1, (n, 20))


def w1_events(n: int, seed: int) -> EventBatch:
    ev = w1_values(n, seed)
    return EventBatch.from_columns(n, {f"a{j}": (ev[:, j], None) for j in range(20)})


class W1Scan:
    """The vectorised numpy scan W1 is compared with: every subscription's predicates as flat
    arrays (attribute, low, high; 10 per subscription, in subscription order), and per event one
    vectorised compare over all of them and an AND of each subscription's 10 outcomes."""

    def __init__(self, n: int, seed: int) -> None:
        attrs, lows = w1_bounds(n, seed)
        self.n = n
        self.attr = attrs.astype(np.intp).ravel()
        self.lo = lows.astype(np.int32).ravel()
        self.hi = (lows + DOMAIN // 2).astype(np.int32).ravel()

    def match(self, values: np.ndarray) -> np.ndarray:
        """The indices of the subscriptions that the event ``values`` (20 attribute values) satisfies."""
        x = values.astype(np.int32)[self.attr]
        ok = (x >= self.lo) & (x <= self.hi)
        return np.flatnonzero(ok.reshape(self.n, 10).all(axis=1))


def oracle_check(filters: dict[str, Filter], index: MatchIndex, batch: EventBatch, sample: int) -> tuple[float, bool]:
    """Seconds per event of the oracle on the first ``sample`` events, and whether answers agree."""
    oracle = BruteForceIndex()
    for sid, f in filters.items():
        oracle.add(sid, f)
    events = [batch.event(i) for i in range(sample)]
    t = time.perf_counter()
    expected = oracle.match(events).all_ids()
    per_event = (time.perf_counter() - t) / sample
    return per_event, expected == index.match(events).all_ids()


def bench_w1(n: int, events: int, batch_size: int, sample: int, scan_events: int) -> None:
    t = time.perf_counter()
    filters = w1_filters(n, seed=1)
    t_build = time.perf_counter() - t
    index = MatchIndex()
    t = time.perf_counter()
    for i, f in enumerate(filters):
        index.add(f"s{i}", f)
    index.match(w1_events(1, seed=3))  # applies the batched bit work
    t_add = time.perf_counter() - t
    values = w1_values(events, seed=2)
    batches = [
        EventBatch.from_columns(len(v), {f"a{j}": (v[:, j], None) for j in range(20)})
        for v in np.array_split(values, max(1, -(-events // batch_size)))
    ]
    index.match(w1_events(64, seed=4))  # warm
    clocks = _Clocks()
    results = [index.match(b) for b in batches]
    rate, rate_cpu = clocks.rates(events)
    counts = np.concatenate([r.counts() for r in results])
    per_event = 1 / rate
    stats = index.stats()
    # the vectorised numpy scan over the same subscriptions and the first scan_events events
    scan = W1Scan(n, seed=1)
    clocks = _Clocks()
    scan_counts = np.array([len(scan.match(values[e])) for e in range(scan_events)])
    _, scan_cpu = clocks.rates(scan_events)
    assert (scan_counts == counts[:scan_events]).all(), "the numpy scan and the index disagree on match counts"
    del scan
    oracle_s, same = oracle_check({f"s{i}": f for i, f in enumerate(filters)}, index, batches[0], sample)
    print(
        f"W1 N={n:>9,}: {per_event * 1e3:8.3f} ms/event ({1e3 / rate_cpu:.3f} of CPU time) over {events:,} events "
        f"in batches of {min(batch_size, events):,} ({counts.mean():.1f} matches/event, {counts.mean() / n:.3%}); "
        f"oracle {oracle_s * 1e3:9.1f} ms/event on {sample} events, {oracle_s / per_event:7.0f}x; "
        f"exact on the sample: {same}"
    )
    print(
        f"    numpy scan (all {10 * n:,} predicates compared per event): {1e3 / scan_cpu:.3f} ms/event of CPU time "
        f"on {scan_events} events; the index {rate_cpu / scan_cpu:.1f}x faster (CPU time); per-event match counts "
        f"agree on those events"
    )
    print(
        f"    memory {stats['bytes_per_subscription']:.0f} B/subscription ({stats['bytes'] / 2**20:.0f} MiB, "
        f"{stats['rows']} bitset rows); built {n:,} Filter objects in {t_build:.1f} s, "
        f"added them in {t_add:.1f} s ({n / t_add:,.0f}/s)"
    )


def gryphon(n: int, decay: float) -> tuple[GryphonWorkload, dict[str, Filter]]:
    w = GryphonWorkload(brokers=max(1, n // 125), decay=decay, seed=7)
    subs = {r["subscription_id"]: parse_filter(r["filter"]) for r in w.subscriptions()[:n]}
    return w, subs


def gryphon_batch(w: GryphonWorkload, n: int) -> EventBatch:
    vals, _ = w._event_matrix(n)
    return EventBatch.from_columns(n, {f"a{j}": (vals[:, j], None) for j in range(vals.shape[1])})


def bench_gryphon(
    n: int, decay: float, events: int, batch_size: int, sample: int
) -> tuple[MatchIndex, GryphonWorkload, dict[str, Filter]]:
    w, subs = gryphon(n, decay)
    index = MatchIndex()
    t = time.perf_counter()
    for sid, f in subs.items():
        index.add(sid, f)
    index.match(gryphon_batch(w, 1))
    t_add = time.perf_counter() - t
    batches = [gryphon_batch(w, batch_size) for _ in range(max(1, events // batch_size))]
    index.match(batches[0])  # warm
    matched = 0
    clocks = _Clocks()
    for b in batches:
        matched += int(index.match(b).counts().sum())
    total = batch_size * len(batches)
    rate, rate_cpu = clocks.rates(total)
    elapsed = total / rate
    # and with every event's subscription slots spelled out (Matches.slots, an int32 array)
    clocks = _Clocks()
    for b in batches:
        index.match(b).slots  # noqa: B018
    _, slots_cpu = clocks.rates(total)
    oracle_s, same = oracle_check(subs, index, batches[0], sample)
    stats = index.stats()
    print(
        f"Gryphon N={n:,} decay={decay}: {rate:,.0f} events/s ({rate_cpu:,.0f}/s of CPU time; {slots_cpu:,.0f}/s "
        f"with Matches.slots spelled out) over {total:,} events in batches of "
        f"{batch_size:,} ({matched / total:,.0f} matches/event, {matched / total / n:.2%}; output "
        f"{matched / elapsed / 1e6:.0f} M subscription ids/s); oracle {1 / oracle_s:,.0f} events/s, "
        f"{(total / elapsed) * oracle_s:,.0f}x; exact on {sample} events: {same}"
    )
    print(
        f"    {stats['distinct_filters']:,} distinct filters; memory {stats['bytes_per_subscription']:.0f} "
        f"B/subscription; added {n:,} in {t_add:.1f} s"
    )
    return index, w, subs


def churn_changes(
    subs: dict[str, Filter], pool: list[Filter], ops: int, seed: int, prefix: str, offset: int
) -> list[tuple[str, Filter | None]]:
    """``ops`` changes alternating between unsubscribing a random live subscription and
    subscribing a new one with the next pre-parsed filter of ``pool``; ``subs`` follows them."""
    rng = np.random.default_rng(seed)
    picks = rng.random(ops // 2 + 1).tolist()
    live = list(subs)
    changes: list[tuple[str, Filter | None]] = []
    for i in range(ops):
        if i % 2 == 0:
            j = int(picks[i // 2] * len(live))
            sid = live[j]
            live[j] = live[-1]
            live.pop()
            del subs[sid]
            changes.append((sid, None))
        else:
            sid = f"{prefix}{i}"
            f = pool[(offset + i // 2) % len(pool)]
            subs[sid] = f
            live.append(sid)
            changes.append((sid, f))
    return changes


class _Clocks:
    """Wall-clock and CPU seconds of this process, with stretches (the probe matches) left out."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def leave_out(self, run: Callable[[], object]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu

    def rates(self, ops: int) -> tuple[float, float]:
        """Operations per second of wall-clock time and of CPU time since the start."""
        return ops / (time.perf_counter() - self.wall), ops / (time.process_time() - self.cpu)


def bench_churn(
    index: MatchIndex, w: GryphonWorkload, subs: dict[str, Filter], ops: int, batch: int, sample: int
) -> None:
    pool_w = GryphonWorkload(brokers=max(1, ops // 250), decay=float(w.params["decay"]), seed=99)
    pool = [parse_filter(r["filter"]) for r in pool_w.subscriptions()]
    probe = gryphon_batch(w, 64)
    check = gryphon_batch(w, sample)
    # one call per operation (add and remove queue the change), a flush every 1,000 operations
    changes = churn_changes(subs, pool, ops, seed=11, prefix="c", offset=0)
    clocks = _Clocks()
    for i, (sid, f) in enumerate(changes):
        if f is None:
            index.remove(sid)
        else:
            index.add(sid, f)
        if i % 1000 == 999:
            index.flush()
            clocks.leave_out(lambda: index.match(probe))
    index.flush()
    per_op, per_op_cpu = clocks.rates(ops)
    _, same_per_op = oracle_check(subs, index, check, sample)
    # batches, as the matching job applies a micro-batch's changes: apply, then flush
    changes = churn_changes(subs, pool, ops, seed=12, prefix="d", offset=len(pool) // 2)
    clocks = _Clocks()
    for k in range(0, ops, batch):
        index.apply(changes[k : k + batch])
        index.flush()
        clocks.leave_out(lambda: index.match(probe))
    batched, batched_cpu = clocks.rates(ops)
    _, same = oracle_check(subs, index, check, sample)
    print(
        f"Churn: {batched:,.0f} subscribe/unsubscribe operations/s ({batched_cpu:,.0f}/s of CPU time) applied in "
        f"batches of {batch:,} (MatchIndex.apply, then flush; {ops:,} operations alternating unsubscribe of a "
        f"random subscription and subscribe of a new one, {len(subs):,} live; pre-parsed Filter objects: parsing "
        f"the filter text is excluded; the bookkeeping and bit work are timed, a 64-event match after each batch "
        f"is not); exact afterwards on {sample} events: {same}"
    )
    print(
        f"    one add/remove call per operation: {per_op:,.0f} operations/s ({per_op_cpu:,.0f}/s of CPU time) over "
        f"{ops:,} operations (each call queues its change; a flush every 1,000 operations applies them, timed; "
        f"a 64-event match after each flush is not); exact afterwards on {sample} events: {same_per_op}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--w1", default="10000,100000,1000000", help="W1 subscription counts (comma list)")
    ap.add_argument("--gryphon", type=int, default=100_000, help="Gryphon subscriptions")
    ap.add_argument("--churn", type=int, default=200_000, help="churn operations (of each kind of run)")
    ap.add_argument("--w1-batch", type=int, default=4096, help="W1 events per MatchIndex.match call")
    ap.add_argument("--churn-batch", type=int, default=10_000, help="churn operations per MatchIndex.apply")
    ap.add_argument("--churn-only", action="store_true", help="only the Gryphon index (decay 0.78) and churn")
    ap.add_argument("--w1-only", action="store_true", help="only W1 (with the numpy scan)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.w1.split(",") if x]
    if args.quick:
        sizes, args.gryphon, args.churn = [10_000], 10_000, 20_000
    print("matching benchmark: one core, numba kernels; times are wall clock", flush=True)
    if not args.w1_only:
        index, w, subs = bench_gryphon(args.gryphon, 0.78, 200_000, 4096, 20)
        bench_churn(index, w, subs, args.churn, args.churn_batch, 20)
        del index, subs
        if args.churn_only:
            return 0
        bench_gryphon(args.gryphon, 0.88, 200_000, 4096, 20)
    for n in sizes:
        gc.collect()
        bench_w1(
            n,
            events=max(args.w1_batch, min(20_000, 2 * 10**8 // n)),
            batch_size=args.w1_batch,
            sample=max(2, min(20, 10**6 // n * 2)),
            scan_events=max(10, min(200, 2 * 10**7 // n)),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
