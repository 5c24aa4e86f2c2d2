"""Producer-side benchmark: workload generators to file and to the local broker, and the overlay
simulator's event-hops per second. Prints the workload and the numbers.

Run: ``.venv/bin/python bench/producers.py [--events N]`` (starts its own broker on free ports,
or uses --bootstrap-servers). Readings: docs/results/ingest.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra import kafka
from infra.jars import ensure_jars
from infra.topics import ensure_topics
from producers.overlay import filter_matcher
from producers.sinks import JsonlSink, KafkaSink, run_workload
from producers.workloads import PRESETS
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.simulator import simulate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--sim-seconds", type=float, default=3600.0)
    ap.add_argument("--bootstrap-servers")
    args = ap.parse_args()

    print(f"workload: every preset with its default parameters, {args.events:,} events each; 2-core machine")
    for name, cls in PRESETS.items():
        out = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        r = run_workload(cls(seed=1), JsonlSink(folder=out), args.events, progress=False)
        print(
            f"  to file  {name:12} {r.events_per_s:>10,.0f} events/s  ({r.written['bytes'] / r.seconds / 1e6:.1f} MB/s)"
        )

    with kafka.broker_or(args.bootstrap_servers, ensure_jars(), heap="1g") as conn:
        for name in ("gryphon", "sensors"):
            prefix = f"bp{uuid.uuid4().hex[:6]}."
            ensure_topics(conn, prefix)
            r = run_workload(PRESETS[name](seed=1), KafkaSink(conn, prefix), args.events, progress=False)
            print(f"  to Kafka {name:12} {r.events_per_s:>10,.0f} events/s  (acks=all, idempotent, single process)")

    system = reliability_tree_system(1)
    start = time.perf_counter()
    result = simulate(system, args.sim_seconds, 1, filter_matcher())
    secs = time.perf_counter() - start
    print(
        f"simulator: reliability tree (20 brokers, 8 publishers at 1 event/s, 100 subscribers), "
        f"{args.sim_seconds:g} s simulated: {result.event_hops:,} event-hops in {secs:.2f} s = "
        f"{result.event_hops / secs:,.0f} event-hops/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
