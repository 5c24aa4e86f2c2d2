"""What a micro-batch's checkpoint logs cost: a query that does nothing, with the local file
system SiftStream's sessions use (no ``.crc`` side files) and with Hadoop's default checksummed
one, alternating (docs/decisions/spark-session-settings.md).

Workload: Spark's ``rate`` source at ``--rows-per-second`` (default 100) into a ``foreachBatch``
that does nothing, ``trigger(processingTime=--trigger)`` (default 200 ms), for ``--seconds`` (45)
per run, checkpoint in a fresh local folder. Printed per run: the medians of ``walCommit``
(the offset-log entry written before a batch), ``commitOffsets`` (the commit-log entry after it),
``addBatch`` and the whole ``triggerExecution`` over the progress reports after the first
``--skip`` (20), and the number of ``.crc`` files left in the checkpoint.

Run: ``.venv/bin/python bench/checkpoint_logs.py [--runs 2]`` (one session per run, the two file
systems alternating; about a minute per run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STEPS = ("walCommit", "commitOffsets", "addBatch", "triggerExecution")
CHECKSUMMED = {
    "fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}


def one_run(checksummed: bool, rows_per_second: int, trigger: str, seconds: float, skip: int) -> dict[str, float]:
    """One query in this process's session; the medians of its trigger steps in ms."""
    from infra.jars import ensure_jars
    from streaming.session import SparkConfig, build_session

    spark = build_session(SparkConfig(app_name="bench-checkpoint-logs"), ensure_jars())
    if checksummed:  # before any file is touched: Hadoop's defaults, as without the session's settings
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        for key, value in CHECKSUMMED.items():
            conf.set(key, value)
    folder = tempfile.mkdtemp(prefix="bench-checkpoint-")
    source = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    query = (
        source.writeStream.foreachBatch(lambda batch, batch_id: None)
        .option("checkpointLocation", folder)
        .trigger(processingTime=trigger)
        .start()
    )
    time.sleep(seconds)
    reports = [json.loads(p.json) for p in query.recentProgress][skip:]
    query.stop()
    spark.stop()
    out = {k: float(statistics.median(p["durationMs"].get(k, 0) for p in reports)) for k in STEPS} if reports else {}
    out["reports"] = len(reports)
    out["crc_files"] = sum(name.endswith(".crc") for _, _, names in os.walk(folder) for name in names)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs of each file system, alternating")
    ap.add_argument("--rows-per-second", type=int, default=100)
    ap.add_argument("--trigger", default="200 milliseconds")
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--skip", type=int, default=20, help="progress reports left out at the start")
    ap.add_argument("--one", choices=("raw", "checksummed"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # a child: one session, one query
        result = one_run(args.one == "checksummed", args.rows_per_second, args.trigger, args.seconds, args.skip)
        print(json.dumps(result))
        return 0
    print(
        f"workload: rate source {args.rows_per_second} rows/s -> foreachBatch doing nothing, trigger "
        f"{args.trigger}, {args.seconds:g} s per run, medians after the first {args.skip} reports; "
        f"{args.runs} run(s) of each local file system, alternating",
        flush=True,
    )
    for _ in range(args.runs):
        for fs in ("checksummed", "raw"):
            cmd = [sys.executable, __file__, "--one", fs, "--rows-per-second", str(args.rows_per_second)]
            cmd += ["--trigger", args.trigger, "--seconds", str(args.seconds), "--skip", str(args.skip)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            steps = ", ".join(f"{k} {r[k]:.1f}" for k in STEPS if k in r)
            print(f"  {fs:>11}: {steps} ms ({r['reports']} reports, {r['crc_files']} .crc files)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
