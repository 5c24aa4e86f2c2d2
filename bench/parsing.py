"""Benchmark of filter parsing from text: ``parse_filter`` against the full parser alone.

Workloads (printed with the numbers):

- **W1**, the REIN benchmark shape of ``bench/matching.py``: 20 attributes, integer domain
  [0, 10^6], each filter 10 ``between`` predicates of width 5 * 10^5 on 10 of the attributes,
  written as canonical text; ``--w1`` distinct filters (default 20,000), so the predicate cache
  never helps.
- **Gryphon** (``producers.workloads.GryphonWorkload``, decay 0.88): 15 attributes x 4 Zipf
  values, equality or don't-care; ``--gryphon`` filters (default 20,000), sharing most predicates.

For each: filters per second of ``parse_filter`` (the simple path for the common shapes, the
parser for the rest) and of the full parser alone (``_Parser(text).filter()``, the reference the
simple path is tested against), best of ``--repeat`` runs, one process, CPU time
(``time.process_time``) so that other processes on the machine count less; every parsed filter
is kept alive, as an index keeps them, and every pass starts from empty predicate caches (so W1's
distinct predicates are made anew in every pass). ``parse_filter`` is timed three ways: with
Python's cyclic garbage collector on (a program's default), on with the heap frozen before the
pass (``gc.freeze()``, as after a cold start), and paused during the pass (``collector_paused``,
how the bulk paths of ``routing.matching`` run: docs/decisions/collector-paused.md): the
collector's passes over the growing set of live predicates and their tests cost several times
the parse itself. Targets (one quiet core): W1 >= 30,000 filters/s,
Gryphon >= 150,000.

Run: ``.venv/bin/python bench/parsing.py`` (``--quick`` for a smoke run). Readings: docs/decisions/filter-parser.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.matching import w1_filters
from producers.workloads import GryphonWorkload
from routing.matching import language
from routing.matching.collector import collector_paused
from routing.matching.language import _Parser, parse_filter


def rate(texts: list[str], parse: Callable[[str], object], repeat: int, collector: str = "on") -> float:
    """Best filters per CPU second over ``repeat`` passes, keeping every parsed filter alive (as
    an index does), each pass from empty predicate caches. ``collector``: ``on`` (Python's cyclic
    garbage collector as a program has it), ``frozen`` (on, with everything alive before the pass
    frozen by ``gc.freeze()``, as after a cold start's load) or ``paused`` (``collector_paused``
    around the pass, as the bulk paths of ``routing.matching`` run)."""
    best = 0.0
    for _ in range(repeat):
        kept: list[object] = []
        language._SIMPLE_PREDICATES.clear()
        language._PREDICATES.clear()
        gc.collect()
        if collector == "frozen":
            gc.freeze()
        try:
            with collector_paused() if collector == "paused" else contextlib.nullcontext():
                t0 = time.process_time()
                for text in texts:
                    kept.append(parse(text))
                best = max(best, len(texts) / max(time.process_time() - t0, 1e-9))
        finally:
            gc.unfreeze()
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--w1", type=int, default=20_000, help="W1 filters")
    ap.add_argument("--gryphon", type=int, default=20_000, help="Gryphon filters")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 filters of each, 2 passes (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.w1, args.gryphon, args.repeat = 2_000, 2_000, 2
    w1 = [str(f) for f in w1_filters(args.w1, 1)]
    gryphon = [
        s["filter"]
        for s in GryphonWorkload(
            brokers=1, clients_per_broker=args.gryphon // 5, subs_per_client=5, decay=0.88, seed=0
        ).subscriptions()
    ]
    print(
        f"== filter parsing, one process, CPU time, best of {args.repeat}, each pass from empty predicate caches; "
        f"load average {os.getloadavg()[0]:.1f}; garbage collector: on / on with the heap frozen before the pass "
        f"(gc.freeze) / paused (collector_paused, the bulk paths)"
    )
    for name, texts, target in (("W1", w1, 30_000), ("Gryphon 0.88", gryphon, 150_000)):
        on, frozen, paused = (rate(texts, parse_filter, args.repeat, mode) for mode in ("on", "frozen", "paused"))
        full = rate(texts, lambda t: _Parser(t).filter(), max(1, args.repeat // 2), "paused")
        print(
            f"   {name:<13} {len(texts):>7,} filters, e.g. {texts[0][:40]!r}: "
            f"parse_filter {on:>9,.0f}/s (collector on), "
            f"{frozen:,.0f}/s (heap frozen), {paused:,.0f}/s (paused); the parser alone {full:>8,.0f}/s (paused); "
            f"target {target:,}/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
