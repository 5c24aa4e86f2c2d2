"""``siftstream serve --demo`` as one Spark application against one Spark application per job.

Both modes run the same code on a broker of their own (started here on free ports) with the same
demo feeds at the same rates; only the split into processes differs:

- ``one``: ``siftstream serve --demo`` (every job in one process, one SparkSession);
- ``separate``: ``siftstream serve --demo --jobs none`` (the feeds) and one
  ``siftstream serve --jobs JOB`` process per job, each with its own SparkSession.

Every serve process runs with ``--no-dashboard`` and its own ``/metrics``. After ``--warmup``
seconds the script samples, every ``--sample-s`` for ``--seconds``: the resident memory (RSS, from
``/proc``) of the JVMs, the Python drivers and the Python workers of the jobs (the feeds and the
broker are not counted), and each job's lag (``siftstream_job_consumer_lag_records``); at the
end of the window it reads each job's batches, mean batch duration (the histogram's change over
the window) and the records it processed, and the CPU seconds all job processes used. Prints
one table per mode and a JSON line.

Run: ``.venv/bin/python bench/serve_modes.py`` (about 10 minutes on two cores;
``--seconds``, ``--warmup``, ``--rate``, ``--modes``). docs/decisions/serve-one-spark-application.md
has its readings.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import command, cpu_seconds, descendants  # noqa: E402
from infra.jars import ensure_jars  # noqa: E402
from infra.kafka import broker_or, free_ports  # noqa: E402
from streaming.status import JOBS  # noqa: E402


def kind(pid: int) -> str | None:
    """``jvm``, ``worker`` (a pyspark daemon or worker), ``driver`` (a serve process) or None (feeds)."""
    cmd = command(pid)
    if not cmd or "streaming.feeds" in cmd:
        return None
    if cmd.split(" ", 1)[0].endswith("java"):
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "worker"
    if "serve" in cmd:
        return "driver"
    return None


def rss_and_cpu(pid: int) -> tuple[float, float]:
    """(RSS in MiB, CPU seconds so far) of one process."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return 0.0, 0.0
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return rss / 1024, cpu_seconds(pid)


def sample(roots: list[int]) -> tuple[dict[str, float], float]:
    """RSS by kind (MiB) and CPU seconds of every job process under ``roots``."""
    mem = {"jvm": 0.0, "driver": 0.0, "worker": 0.0}
    cpu = 0.0
    for root in roots:
        for pid in descendants(root):
            k = kind(pid)
            if k is None:
                continue
            rss, seconds = rss_and_cpu(pid)
            mem[k] += rss
            cpu += seconds
    return mem, cpu


def scrape(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("siftstream_job_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def job_value(samples: list[dict[str, float]], name: str, job: str) -> float:
    key = f'{name}{{job="{job}"}}'
    return sum(s.get(key, 0.0) for s in samples)


def run_mode(mode: str, bootstrap: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    prefix = f"bench-{mode}-{int(time.time())}."
    base = [sys.executable, "-m", "streaming.cli", "serve", "--bootstrap-servers", bootstrap]
    base += ["--topic-prefix", prefix, "--home", str(work / mode), "--no-dashboard"]
    base += ["--demo-rate", str(args.rate), "--trigger-interval", args.trigger_interval]
    if mode == "one":
        groups = [(JOBS, ["--demo"])]
    else:
        groups = [((), ["--demo", "--jobs", "none"])] + [((job,), ["--jobs", job]) for job in JOBS]
    procs, ports = [], {}
    log = (work / f"{mode}.log").open("ab")
    for jobs, extra in groups:
        (port,) = free_ports(1)
        for job in jobs:
            ports[job] = port
        procs.append(subprocess.Popen([*base, *extra, "--http-port", str(port)], cwd=ROOT, stdout=log, stderr=log))
    roots = [p.pid for p in procs]
    print(f"[{mode}] {len(procs)} serve processes started; warming up {args.warmup:.0f} s", file=sys.stderr)
    time.sleep(args.warmup)
    first = [scrape(p) for p in sorted(set(ports.values()))]
    _, cpu0 = sample(roots)
    started = time.monotonic()
    mems: list[dict[str, float]] = []
    lags: dict[str, list[float]] = {job: [] for job in JOBS}
    while time.monotonic() - started < args.seconds:
        mem, _ = sample(roots)
        mems.append(mem)
        now = [scrape(p) for p in sorted(set(ports.values()))]
        for job in JOBS:
            lags[job].append(job_value(now, "siftstream_job_consumer_lag_records", job))
        time.sleep(args.sample_s)
    last = [scrape(p) for p in sorted(set(ports.values()))]
    _, cpu1 = sample(roots)
    window = time.monotonic() - started
    stopped = time.monotonic()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
    stop_s = time.monotonic() - stopped
    jobs = {}
    for job in JOBS:
        batches = job_value(last, "siftstream_job_batches_total", job) - job_value(
            first, "siftstream_job_batches_total", job
        )
        dur = job_value(last, "siftstream_job_batch_duration_seconds_sum", job) - job_value(
            first, "siftstream_job_batch_duration_seconds_sum", job
        )
        rows = job_value(last, "siftstream_job_processed_records_total", job) - job_value(
            first, "siftstream_job_processed_records_total", job
        )
        jobs[job] = {
            "batches": int(batches),
            "mean_batch_s": round(dur / batches, 2) if batches else None,
            "records_per_s": round(rows / window, 1),
            "lag_mean": round(sum(lags[job]) / max(1, len(lags[job]))),
            "lag_max": round(max(lags[job], default=0)),
            "lag_last": round(lags[job][-1]) if lags[job] else None,
        }
    mem_mean = {k: round(sum(m[k] for m in mems) / len(mems)) for k in ("jvm", "driver", "worker")}
    mem_max_total = round(max(sum(m.values()) for m in mems))
    return {
        "mode": mode,
        "processes": len(procs),
        "window_s": round(window),
        "rss_mib_mean": mem_mean,
        "rss_mib_total_mean": sum(mem_mean.values()),
        "rss_mib_total_max": mem_max_total,
        "rss_mib_total_first_last": [round(sum(mems[0].values())), round(sum(mems[-1].values()))],
        "cpu_s_per_s": round((cpu1 - cpu0) / window, 2),
        "stop_s": round(stop_s, 1),
        "jobs": jobs,
    }


def show(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    m = result["rss_mib_mean"]
    table = Table(
        title=f"{result['mode']}: {result['processes']} processes, RSS JVM {m['jvm']:,} + drivers {m['driver']:,} + "
        f"workers {m['worker']:,} = {result['rss_mib_total_mean']:,} MiB (max {result['rss_mib_total_max']:,}; "
        f"first, last {result['rss_mib_total_first_last']}), "
        f"CPU {result['cpu_s_per_s']} cores, stopped in {result['stop_s']} s"
    )
    for col in ("job", "batches", "mean batch s", "records/s", "lag mean", "lag max", "lag last"):
        table.add_column(col, justify="left" if col == "job" else "right")
    for job, j in result["jobs"].items():
        table.add_row(
            job,
            str(j["batches"]),
            str(j["mean_batch_s"]),
            str(j["records_per_s"]),
            f"{j['lag_mean']:,}",
            f"{j['lag_max']:,}",
            f"{j['lag_last']:,}" if j["lag_last"] is not None else "-",
        )
    Console(width=160).print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="one,separate")
    parser.add_argument("--seconds", type=float, default=180.0, help="measured window per mode")
    parser.add_argument("--warmup", type=float, default=90.0, help="seconds before measuring")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="events/s of each demo feed (serve's default)")
    parser.add_argument("--trigger-interval", default="5 seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="siftstream-serve-bench-") as tmp:
        work = Path(tmp)
        with broker_or(None, ensure_jars(), home=work / "kafka") as conn:
            results = [run_mode(mode, conn.bootstrap_servers, args, work) for mode in args.modes.split(",")]
    for r in results:
        show(r)
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
