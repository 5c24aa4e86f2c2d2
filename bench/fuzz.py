"""Fuzz the decoders, parsers, instance readers and telemetry checks (docs/guide/fuzzing.md).

Targets (``tests.fuzz.targets.TARGETS``): ``avro`` (framed Avro values), ``telemetry`` (the
QoS job's columnar LinkSample/BrokerSample checker against ``schemas.rules.classify``),
``filter`` (``parse_filter``/``validate_filter``), ``composite`` (``parse_composite``) and the
offline commands' JSON readers ``plan-instance``, ``channels-instance``, ``placement-instance``
and ``qos-system``, and ``plan-document`` (the plan that ``plan check`` reads).

Engines: ``atheris`` (coverage-guided, libFuzzer; ``pip install -e .[fuzz]``), the default where
it imports: each target runs in its own process over ``--runs`` inputs, seeded from a corpus the
runner writes under ``build/fuzz/<target>/corpus`` (libFuzzer adds what it finds there), with a
per-input time limit of ``--timeout`` seconds (a hang is a crash), and stops at its first crash,
whose input it leaves as ``build/fuzz/<target>/crash-*``. ``random`` (no coverage: random byte
mutations of the seeds, ``tests.fuzz.targets.mutate_bytes``) where atheris is not installed.

Prints, per target: inputs run, coverage edges and features (atheris), crashes, seconds.

Run: ``.venv/bin/python bench/fuzz.py --all --runs 125000`` (a million inputs over the nine
targets), ``--target filter --runs 10000``, ``--quick`` for a smoke run (2,000 per target).
Readings: docs/results/fuzzing.md.
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _child(target: str, argv: list[str]) -> None:
    """Run atheris over one target in this process (libFuzzer exits the process when done)."""
    import atheris

    # numba compiles schemas.columnar's kernels from their bytecode, which instrumented bytecode
    # breaks: it is imported (and so left uninstrumented) first
    import schemas.columnar  # noqa: F401

    with atheris.instrument_imports(include=["routing", "schemas", "tests.fuzz"]):
        from tests.fuzz.targets import TARGETS

    check, _seeds = TARGETS[target]
    atheris.Setup([sys.argv[0], *argv], check)
    atheris.Fuzz()


def _atheris(target: str, runs: int, timeout: int, out: Path) -> dict[str, object]:
    from tests.fuzz.targets import TARGETS

    corpus = out / target / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(TARGETS[target][1]()):
        (corpus / f"seed-{i}").write_bytes(seed)
    args = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        target,
        f"-runs={runs}",
        f"-timeout={timeout}",
        "-rss_limit_mb=4096",
        "-max_len=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={out / target}/",
        str(corpus),
    ]
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    (out / target / "log.txt").write_text(log)
    done = re.findall(r"Done (\d+) runs", log)
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    crashed = proc.returncode != 0
    return {
        "target": target,
        "inputs": int(done[-1]) if done else int(execs[-1]) if execs else 0,
        "edges": int(cov[-1][0]) if cov else None,
        "features": int(cov[-1][1]) if cov else None,
        "crashes": int(crashed),
        "seconds": seconds,
        "note": "" if not crashed else f"exit {proc.returncode}; see {out / target}/log.txt",
    }


def _random(target: str, runs: int, seed: int) -> dict[str, object]:
    from tests.fuzz.targets import TARGETS, mutate_bytes

    check, seeds = TARGETS[target]
    rng = random.Random(seed)
    pool = seeds()
    crashes = 0
    note = ""
    start = time.perf_counter()
    for _ in range(runs):
        data = mutate_bytes(rng.choice(pool), rng)
        try:
            check(data)
        except Exception as exc:  # a crash: the contract is broken
            crashes += 1
            note = note or f"{type(exc).__name__}: {exc!s:.200} on {data!r:.200}"
    return {
        "target": target,
        "inputs": runs,
        "edges": None,
        "features": None,
        "crashes": crashes,
        "seconds": time.perf_counter() - start,
        "note": note,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2:])
        return 0
    from tests.fuzz.targets import TARGETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    pick = ap.add_mutually_exclusive_group(required=True)
    pick.add_argument("--target", choices=sorted(TARGETS))
    pick.add_argument("--all", action="store_true", help="every target, one after another")
    ap.add_argument("--runs", type=int, default=100_000, help="inputs per target (default 100,000)")
    ap.add_argument("--quick", action="store_true", help="2,000 inputs per target")
    ap.add_argument("--engine", choices=("atheris", "random"), help="default: atheris where it imports")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take (atheris)")
    ap.add_argument("--seed", type=int, default=0, help="the random engine's seed")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz")
    args = ap.parse_args(argv)
    runs = 2_000 if args.quick else args.runs
    engine = args.engine
    if engine is None:
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    targets = sorted(TARGETS) if args.all else [args.target]
    print(f"engine {engine}, {runs:,} inputs per target, targets: {', '.join(targets)}", flush=True)
    print(f"{'target':20} {'inputs':>10} {'edges':>7} {'features':>9} {'crashes':>7} {'seconds':>8}", flush=True)
    total = crashes = 0
    for t in targets:
        row = _atheris(t, runs, args.timeout, args.out) if engine == "atheris" else _random(t, runs, args.seed)
        total += int(row["inputs"])  # type: ignore[call-overload]
        crashes += int(row["crashes"])  # type: ignore[call-overload]
        edges = "-" if row["edges"] is None else row["edges"]
        feats = "-" if row["features"] is None else row["features"]
        print(
            f"{t:20} {row['inputs']:>10,} {edges:>7} {feats:>9} {row['crashes']:>7} {row['seconds']:>8.1f}",
            row["note"],
            flush=True,
        )
    print(f"total {total:,} inputs, {crashes} crashes", flush=True)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
