"""Time of the simulator's timing solver against its relaxation window (``solve(window_rows=...)``).

Workload: the reliability paper's 20-broker tree (``reliability_tree_system``, seed 1), whose
broker pairs carry events both ways and so form cyclic components that the windowed relaxation
solves. Publishers send ``rate`` events/s each, for rates 1, 10 and 100, with matching time
``1 / rate`` ms per stored subscription so that the brokers' load (rho) is the same at every rate;
each rate simulates ``--events`` events per publisher. The draws are made once per rate; then
``solve`` runs once per window size (best of ``--repeat``), and its CPU time (process time, steadier
than the wall clock on a shared machine) is printed with its ratio to the fastest window at that
rate. The result does not depend on the window (the tests check it
against the event-driven reference), only the time does.

Run: ``.venv/bin/python bench/simulator_window.py [--events 3000] [--repeat 3]``.
Readings: docs/decisions/simulator-relaxation-window.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from producers.overlay import filter_matcher
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.simulator import draw_inputs, solve
from routing.reliability.system import compile_system

WINDOWS = (64, 128, 256, 512, 1024, 2048, 4096)
RATES = (1.0, 10.0, 100.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=3000, help="events per publisher and rate")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"20-broker tree, 8 publishers, {args.events} events each; best of {args.repeat}")
    print(f"{'rate/s':>7} " + " ".join(f"{w:>12}" for w in WINDOWS))
    for rate in RATES:
        system = reliability_tree_system(1, rate_per_s=rate, ms_per_subscription=1.0 / rate)
        network = compile_system(system, filter_matcher())
        draws = draw_inputs(network, seconds=args.events / rate, seed=1)
        times = {}
        for window in WINDOWS:
            best = float("inf")
            for _ in range(args.repeat):
                start = time.process_time()
                solve(network, draws, window_rows=window)
                best = min(best, time.process_time() - start)
            times[window] = best
        fastest = min(times.values())
        cells = " ".join(f"{times[w]:6.2f}s {times[w] / fastest:4.2f}" for w in WINDOWS)
        print(f"{rate:7g} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
