"""Benchmark of subscription churn from filter text, through the matching job's path, and of a cold start.

Workloads (printed with the numbers):

- **W1** (the REIN shape of ``bench/matching.py``): 20 attributes over [0, 10^6], each filter 10
  ``between`` predicates of width 5 * 10^5 on 10 distinct attributes, as canonical text; every
  filter distinct (its predicates nearly so).
- **Gryphon** (``producers.workloads.GryphonWorkload``, decay 0.88): 15 attributes x 4 Zipf
  values, equality and don't-care, as the workload writes them.

**Churn.** ``--live`` subscriptions (default 100,000) are loaded, then ``--ops`` operations
(default 200,000) alternate unsubscribing a random live subscription and subscribing a new id
with a new filter text, in micro-batches of ``--batch`` operations (default 5,000). Each batch
takes the matching job's path: decoded records as columns (``RecordColumns``, as the job's
``SubscriptionRows.columns`` gives them; made from ``SubscriptionRecord`` values) ->
``plan_columns`` (a filter of the numeric form recognised from its bytes, any other parsed to
validate it) -> ``SubscriptionTable.apply`` (a snapshot
when ``due_for_snapshot``, as the job's shipper then broadcasts a new base and the bridge to it)
-> ``IndexReplica.sync`` (the worker's side: the deltas, across a new base by the bridge, parsed
again and applied to the ``MatchIndex``)
-> ``flush`` (the bit work, which the batch's first match would do). The driver's and the
worker's sides run in separate processes in the job, so each is timed apart (CPU seconds of
this process, ``time.process_time``), and their sum is the one-core total. A 64-event match
after each batch is not timed.

**After the churn** (W1): the index's fragmentation (free fid slots among the fids, member and
predicate-store garbage), then the match time per event of the churned index against a freshly
built index of the same live set (best of ``--repeat`` passes over the same W1 events, the two
alternating), and both compared with ``BruteForceIndex`` on a sample of events.

**Cold start** (``--cold N``, e.g. 1,000,000; off by default): N W1 subscribe records encoded
with the subscriptions topic's schema (``schemas.codec``), then timed: decoding the record bytes,
``plan_columns``, ``SubscriptionTable.apply``, a replica's first ``sync`` (the rebuild), its
``flush`` and the first match of one event (the numba kernels compiled before), and the table's
``pack`` of its texts (which the matching job makes once its first batch is out); then, on a
tenth as many records, the memory the table (packed, and before) and the replica hold once built
(``tracemalloc``'s traced memory: Python objects and numpy arrays). Reading the records from Kafka is not included.
Then a restart's worker with a compiled index (``MatchIndex.to_arrays``, saved by
``streaming.subscription_store.CompiledIndexFolder`` in a temporary folder, as the job's workers
do): the save (``to_arrays``, then the file written), a new replica's first ``sync`` that loads it
and applies what differs from the snapshot (nothing here), its flush and first match, in wall
seconds (the load reads the file) and CPU seconds; the loaded index answers 64 events as the
built one does. Then the restart by the snapshot's digest (docs/decisions/compiled-index.md):
``texts_digest`` of the N texts (what the driver adds to a run's first batch) and a new
replica's ``sync`` shipped it, which loads the index without the snapshot or the saved texts.

**Replica memory** (``--replica-memory N``, off by default): a worker's replica built from a
snapshot of N W1 texts, then the snapshot dropped, as a worker drops a broadcast once a new base
replaces it: the process's resident set (``VmRSS``) over its baseline, per subscription, with the
snapshot, with both, and with the replica alone.

Run: ``.venv/bin/python bench/churn.py`` (``--quick`` for a smoke run; ``--workloads w1`` for
one). Readings: docs/results/matching.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.matching import churn_changes, w1_events
from producers.workloads import GryphonWorkload
from routing.matching.collector import collector_paused
from routing.matching.digest import texts_digest
from routing.matching.index import BruteForceIndex, EventBatch, MatchIndex
from routing.matching.table import (
    Delta,
    IndexReplica,
    RecordColumns,
    SubscriptionRecord,
    SubscriptionTable,
    plan_columns,
)

DOMAIN = 10**6


def w1_texts(n: int, seed: int) -> list[str]:
    """``n`` W1 filters as canonical text (the text of ``bench.matching.w1_filters``' shape)."""
    rng = np.random.default_rng(seed)
    attrs = np.argsort(rng.random((n, 20)), axis=1)[:, :10].tolist()
    lows = rng.integers(0, DOMAIN // 2 + 1, (n, 10)).tolist()
    half = DOMAIN // 2
    return [
        " and ".join(f"a{a} between {lo} and {lo + half}" for a, lo in zip(attrs[i], lows[i], strict=True))
        for i in range(n)
    ]


def gryphon_texts(n: int, seed: int) -> list[str]:
    w = GryphonWorkload(brokers=1, clients_per_broker=max(1, n // 5), subs_per_client=5, decay=0.88, seed=seed)
    return [str(s["filter"]) for s in w.subscriptions()][:n]


def subscribe(sid: str, text: str) -> SubscriptionRecord:
    return SubscriptionRecord(key=sid, op="subscribe", subscription_id=sid, filter=text)


def unsubscribe(sid: str) -> SubscriptionRecord:
    return SubscriptionRecord(key=sid, op="unsubscribe", subscription_id=sid)


class Job:
    """The matching job's subscription path in one process: the driver's table and shipper, a
    worker's replica (``streaming.matching_job`` and ``streaming.arrow_matching``, without Spark)."""

    def __init__(self) -> None:
        self.table = SubscriptionTable()
        self.replica = IndexReplica(freeze_first_build=False)
        self.base: dict[str, str] = {}
        self.base_version = 0
        self.bridge: tuple[int, tuple[Delta, ...]] = (0, ())
        self.driver_s = self.worker_s = self.flush_s = 0.0
        self.snapshots = 0

    def batch(self, records: RecordColumns) -> None:
        t0 = time.process_time()
        changes = plan_columns(records)[0]
        self.table.apply(changes)
        if self.table.due_for_snapshot():
            self.table.snapshot()
        if self.table.base_version > self.base_version:  # the shipper broadcasts a new base and its bridge
            start, bridge = self.table.bridge()
            self.base, self.bridge = dict(self.table.filters), (start, bridge + self.table.deltas())
            self.base_version = self.table.version
            self.snapshots += 1
        deltas = self.table.deltas(after=self.base_version)
        t1 = time.process_time()
        base, (start, bridge) = self.base, self.bridge
        self.replica.sync(self.base_version, lambda: base.items(), deltas, self.table.version, (start, lambda: bridge))
        t2 = time.process_time()
        self.replica.index.flush()
        t3 = time.process_time()
        self.driver_s += t1 - t0
        self.worker_s += t2 - t1
        self.flush_s += t3 - t2


def churn_records(live: dict[str, str], texts: list[str], ops: int, seed: int) -> list[tuple[str, str | None]]:
    """``ops`` changes alternating an unsubscribe of a random live id and a subscribe of a new id
    with the next of ``texts`` (``bench.matching.churn_changes``); ``live`` follows them. Each
    micro-batch's records are made from them just before it (``as_records``, not timed): the job
    holds one micro-batch's decoded records at a time, not the whole run's."""
    return [
        (sid, None if text is None else str(text))
        for sid, text in churn_changes(live, texts, ops, seed=seed, prefix="c", offset=0)
    ]


def as_records(changes: list[tuple[str, str | None]]) -> list[SubscriptionRecord]:
    """The decoded records of ``churn_records``' changes."""
    return [unsubscribe(sid) if text is None else subscribe(sid, text) for sid, text in changes]


def per_event_ms(index: MatchIndex, batch: EventBatch, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        index.match(batch)
        best = min(best, time.process_time() - t)
    return best / len(batch) * 1e3


def fragmentation(index: MatchIndex) -> str:
    n_fids = index._n_fids
    free = len(index._free_fids)
    return (
        f"fid slots {n_fids:,} ({free:,} free, {free / max(n_fids, 1):.1%}); member pool {index._m_used:,} "
        f"({index._m_garbage:,} garbage); predicate store {index._p_used:,} records ({index._p_garbage:,} garbage)"
    )


def bench_churn(
    name: str, texts: list[str], live_n: int, ops: int, batch: int, events: EventBatch | None, repeat: int
) -> None:
    job = Job()
    live = {f"s{i}": text for i, text in enumerate(texts[:live_n])}
    t = time.process_time()
    job.batch(RecordColumns.of([subscribe(sid, text) for sid, text in live.items()]))
    load_s = time.process_time() - t
    records = churn_records(live, texts[live_n:], ops, seed=5)
    job.driver_s = job.worker_s = job.flush_s = 0.0
    job.snapshots = 0
    rebuilds = job.replica.rebuilds
    probe = w1_events(64, 10) if events is not None else None
    for k in range(0, ops, batch):
        job.batch(RecordColumns.of(as_records(records[k : k + batch])))
        if probe is not None:
            job.replica.index.match(probe)
    total = job.driver_s + job.worker_s + job.flush_s
    print(
        f"   {name}: {live_n:,} live (loaded in {load_s:.1f} s of CPU), {ops:,} operations in batches of {batch:,}: "
        f"{ops / total:,.0f} operations/s on one core (driver {ops / job.driver_s:,.0f}/s: plan_columns + table; "
        f"worker {ops / (job.worker_s + job.flush_s):,.0f}/s: sync {job.worker_s:.2f} s + flush {job.flush_s:.2f} s); "
        f"{job.snapshots} new bases, {job.replica.rebuilds - rebuilds} loaded by the replica, "
        f"{job.replica.bridges} crossed by a bridge"
    )
    index = job.replica.index
    assert isinstance(index, MatchIndex)
    print(f"      after: {fragmentation(index)}")
    if events is None:
        return
    fresh = MatchIndex()
    with collector_paused():
        fresh.apply(job.table.filters.items())
        fresh.flush()
    print(f"      fresh: {fragmentation(fresh)}")
    churned_ms, fresh_ms = float("inf"), float("inf")
    for _ in range(2):
        churned_ms = min(churned_ms, per_event_ms(index, events, repeat))
        fresh_ms = min(fresh_ms, per_event_ms(fresh, events, repeat))
    sample = [events.event(i) for i in range(8)]
    oracle = BruteForceIndex()
    oracle.apply(job.table.filters.items())
    expected = oracle.match(sample).all_ids()
    same = index.match(sample).all_ids() == expected == fresh.match(sample).all_ids()
    print(
        f"      matching {len(events):,} W1 events: churned {churned_ms:.3f} ms/event, fresh {fresh_ms:.3f} ms/event "
        f"({churned_ms / fresh_ms - 1:+.1%}); both equal to the oracle on 8 events: {same}"
    )


def cold_start(n: int, measure_memory: bool) -> dict[str, float]:
    """The cold start's steps over ``n`` W1 subscribe records (see the module docstring): CPU
    seconds per step, or with ``measure_memory`` the bytes per subscription that the table and
    the replica hold once built (``tracemalloc``'s traced memory, so the time is not reported)."""
    from schemas.codec import codec_for, decode

    codec = codec_for("Subscription")
    raw = [
        codec.encode({"type": "subscribe", "subscription_id": f"s{i}", "subscriber_id": "u", "filter": t})
        for i, t in enumerate(w1_texts(n, 21))
    ]
    gc.collect()
    if measure_memory:
        tracemalloc.start()
    m0 = tracemalloc.get_traced_memory()[0] if measure_memory else 0
    t0 = time.process_time()
    with collector_paused():
        values = [decode(b, "Subscription")[1] for b in raw]
        t1 = time.process_time()
        changes = plan_columns(RecordColumns.of([subscribe(v["subscription_id"], v["filter"]) for v in values]))[0]
        del values
        t2 = time.process_time()
        table = SubscriptionTable()
        table.apply(changes)
        table.snapshot(bridge=False)  # as the job's head start: no reader has seen the deltas
        del changes
    t3 = time.process_time()
    m1 = tracemalloc.get_traced_memory()[0] if measure_memory else 0
    replica = IndexReplica(freeze_first_build=not measure_memory)
    filters = table.filters
    replica.sync(table.version, lambda: filters.items(), (), table.version)
    t4 = time.process_time()
    replica.index.flush()
    t5 = time.process_time()
    first = replica.index.match(w1_events(1, 3))
    t6 = time.process_time()
    m2 = tracemalloc.get_traced_memory()[0] if measure_memory else 0
    table.pack(limit=len(table))  # as the job does once the first batch is out
    t7 = time.process_time()
    m3 = tracemalloc.get_traced_memory()[0] if measure_memory else 0
    if measure_memory:
        tracemalloc.stop()
    index = replica.index
    assert isinstance(index, MatchIndex)
    out = {
        "record_bytes": sum(map(len, raw)) / n, "decode": t1 - t0, "plan": t2 - t1, "table": t3 - t2,
        "sync": t4 - t3, "flush": t5 - t4, "match": t6 - t5, "ids": len(first.ids(0)),
        "pack": t7 - t6, "table_b": (m1 - m0 + m3 - m2) / n, "unpacked_b": (m1 - m0) / n, "replica_b": (m2 - m1) / n,
        "arrays_b": index.memory_bytes() / n,
    }  # fmt: skip
    if not measure_memory:
        out.update(compiled_restart(index, table))
    return out


def compiled_restart(index: MatchIndex, table: SubscriptionTable) -> dict[str, float]:
    """A worker's save of ``index`` (equal to ``table``) and a new replica's load of it (module
    docstring): wall and CPU seconds per step, the file's size, answers checked on 64 events."""
    from streaming.subscription_store import CompiledIndexFolder

    with tempfile.TemporaryDirectory(prefix="churn-compiled-") as tmp:
        folder = CompiledIndexFolder(Path(tmp))
        w0, c0 = time.perf_counter(), time.process_time()
        arrays = index.to_arrays()
        w1, c1 = time.perf_counter(), time.process_time()
        del arrays
        folder.save(index, table.filters, table.version)
        w2, c2 = time.perf_counter(), time.process_time()
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        replica = IndexReplica(compiled=folder)
        filters = table.filters
        replica.sync(table.version, lambda: filters.items(), (), table.version)
        w3, c3 = time.perf_counter(), time.process_time()
        replica.index.flush()
        first = replica.index.match(w1_events(1, 3))
        w4, c4 = time.perf_counter(), time.process_time()
        digest = texts_digest(filters)  # the driver's, once per run
        w5, c5 = time.perf_counter(), time.process_time()
        by_digest = IndexReplica(compiled=folder)
        by_digest.sync(table.version, lambda: filters.items(), (), table.version, base_digest=digest)
        w6, c6 = time.perf_counter(), time.process_time()
        same_digest = by_digest.digest_loads == 1 and by_digest.index.match(w1_events(64, 5)).all_ids() == (
            index.match(w1_events(64, 5)).all_ids()
        )
        del by_digest
    events = w1_events(64, 5)
    same = replica.index.match(events).all_ids() == index.match(events).all_ids() and first.ids(0) is not None
    return {
        "to_arrays": w1 - w0, "to_arrays_cpu": c1 - c0, "save": w2 - w0, "save_cpu": c2 - c0, "file_mb": size / 2**20,
        "load": w3 - w2, "load_cpu": c3 - c2, "first": w4 - w3, "first_cpu": c4 - c3,
        "loads": replica.compiled_loads, "same": float(same), "digest": w5 - w4, "digest_cpu": c5 - c4,
        "load_digest": w6 - w5, "load_digest_cpu": c6 - c5, "same_digest": float(same_digest),
    }  # fmt: skip


def bench_cold(n: int) -> None:
    warm = MatchIndex()  # the kernels compiled (or loaded from numba's cache) before the timing
    warm.apply([("w", w1_texts(1, 0)[0])])
    warm.match(w1_events(2, 0))
    c = cold_start(n, measure_memory=False)
    gc.unfreeze()
    gc.collect()
    m = cold_start(max(1, n // 10), measure_memory=True)
    print(
        f"   cold start, {n:,} W1 subscribe records ({c['record_bytes']:.0f} bytes each), CPU seconds: decode "
        f"{c['decode']:.1f}, plan_columns {c['plan']:.1f}, table {c['table']:.1f}; replica sync {c['sync']:.1f}, "
        f"flush {c['flush']:.1f}, first match {c['match']:.3f} ({c['ids']:,.0f} ids): "
        f"{sum(c[k] for k in ('decode', 'plan', 'table', 'sync', 'flush', 'match')):.1f} s in all (driver "
        f"{c['decode'] + c['plan'] + c['table']:.1f}, worker {c['sync'] + c['flush'] + c['match']:.1f}); memory "
        f"held (tracemalloc, {max(1, n // 10):,} subscriptions): table {m['table_b']:,.0f} B/subscription "
        f"({m['unpacked_b']:,.0f} before its pack, which took {c['pack']:.1f} s at {n:,}), "
        f"replica {m['replica_b']:,.0f} B/subscription (its index's arrays and maps {m['arrays_b']:,.0f})"
    )
    print(
        f"   restart from a compiled index, wall (CPU) seconds: to_arrays {c['to_arrays']:.2f} "
        f"({c['to_arrays_cpu']:.2f}), whole save {c['save']:.2f} ({c['save_cpu']:.2f}) of a {c['file_mb']:,.0f} MB "
        f"file; a new replica's sync that loads it {c['load']:.2f} ({c['load_cpu']:.2f}), flush and first match "
        f"{c['first']:.2f} ({c['first_cpu']:.2f}); compiled loads {c['loads']:.0f}; answers equal to the built "
        f"index on 64 events: {bool(c['same'])}"
    )
    print(
        f"   restart by the snapshot's digest, wall (CPU) seconds: the digest of the {n:,} texts (the driver's, "
        f"once per run) {c['digest']:.2f} ({c['digest_cpu']:.2f}); a new replica's sync that loads the index by "
        f"it, snapshot and saved texts unread, {c['load_digest']:.2f} ({c['load_digest_cpu']:.2f}); equal answers "
        f"on 64 events: {bool(c['same_digest'])}"
    )


def _resident_bytes() -> int:
    """This process's resident set (``VmRSS``), in bytes."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))


def bench_replica_memory(n: int) -> None:
    """A worker replica's resident memory per subscription: built from a snapshot of ``n`` W1
    texts, flushed and matched, then the snapshot dropped (as a worker drops a broadcast that a
    new base replaced); ``VmRSS`` over the resident set before the texts were made."""
    warm = MatchIndex()  # the kernels compiled before the baseline
    warm.apply([("w", w1_texts(1, 0)[0])])
    warm.match(w1_events(2, 0))
    del warm
    gc.collect()
    r0 = _resident_bytes()
    held = [{f"s{i}": text for i, text in enumerate(w1_texts(n, 21))}]  # the broadcast's value
    r1 = _resident_bytes()
    replica = IndexReplica()
    replica.sync(1, lambda: held[0].items(), (), 1)
    replica.index.flush()
    replica.index.match(w1_events(4, 3))
    gc.collect()
    r2 = _resident_bytes()
    held.clear()
    gc.collect()
    r3 = _resident_bytes()
    index = replica.index
    assert isinstance(index, MatchIndex)
    print(
        f"   replica memory, {n:,} W1 (VmRSS over the baseline, B/subscription): snapshot {(r1 - r0) / n:,.0f}; "
        f"snapshot and replica {(r2 - r0) / n:,.0f}; the replica once the snapshot is dropped {(r3 - r0) / n:,.0f} "
        f"(its index's arrays and maps {index.memory_bytes() / n:,.0f})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live", type=int, default=100_000, help="live subscriptions before the churn")
    ap.add_argument("--ops", type=int, default=200_000, help="churn operations")
    ap.add_argument("--batch", type=int, default=5_000, help="operations per micro-batch")
    ap.add_argument("--workloads", default="w1,gryphon", help="comma list: w1, gryphon")
    ap.add_argument("--events", type=int, default=2_000, help="W1 events matched after the churn")
    ap.add_argument("--repeat", type=int, default=3, help="passes of each match timing")
    ap.add_argument("--cold", type=int, default=0, help="W1 subscriptions of the cold start (0: skip it)")
    ap.add_argument("--replica-memory", type=int, default=0, help="W1 subscriptions of the replica memory (0: skip)")
    ap.add_argument("--quick", action="store_true", help="10,000 live, 20,000 operations, 200 events")
    args: Any = ap.parse_args(argv)
    if args.quick:
        args.live, args.ops, args.events, args.repeat = 10_000, 20_000, 200, 1
        args.cold = min(args.cold, 20_000)
    kinds = [k for k in args.workloads.split(",") if k]
    print(
        f"== subscription churn from text through the matching job's path, one process, CPU time; load average "
        f"{os.getloadavg()[0]:.1f}; garbage collector as the job runs it (paused in plan_columns, apply, sync, flush)"
    )
    need = args.live + args.ops // 2 + 1
    if "w1" in kinds:
        bench_churn("W1", w1_texts(need, 7), args.live, args.ops, args.batch, w1_events(args.events, 9), args.repeat)
    if "gryphon" in kinds:
        bench_churn("Gryphon 0.88", gryphon_texts(need, 7), args.live, args.ops, args.batch, None, args.repeat)
    if args.cold:
        bench_cold(args.cold)
    if args.replica_memory:
        bench_replica_memory(args.replica_memory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
