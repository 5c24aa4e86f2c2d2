"""The processes under a benchmark, read from ``/proc``: its descendants, what each one is, and
the CPU time each role used over a stretch of the run.

A benchmark on the 2-core machine shares its cores between the Spark JVM, the Python workers,
the broker, the jobs' drivers and its own load generators; to say what limits a reading, the
benches print each role's share of the cores over the measured stretch (``CpuByRole``).

Roles, from a process's command line (``role``): ``spark-jvm`` (a JVM running Spark),
``broker`` (a JVM running Kafka), ``python-worker`` (pyspark's daemon and its workers),
``bench`` (the benchmark's own process: in a local Spark application it also runs every job's
``foreachBatch``), ``helper`` (the benchmark's other Python processes: publishers, readers,
clients), ``other``.

>>> import os
>>> os.getpid() in descendants(os.getpid())
True
>>> role("java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell")
'spark-jvm'
>>> role("java -Xmx1g kafka.Kafka server.properties")
'broker'
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from the parent links in ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def command(pid: int) -> str:
    """The command line of ``pid`` with spaces between its arguments; "" once it has exited."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds ``pid`` has used so far; 0.0 once it has exited."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def role(cmd: str, bench_pid: int | None = None, pid: int | None = None) -> str:
    """The role of a process with command line ``cmd`` (module docstring); ``bench`` when ``pid``
    is ``bench_pid``."""
    if pid is not None and pid == bench_pid:
        return "bench"
    head = cmd.split(" ", 1)[0]
    if head.endswith("java"):
        return "spark-jvm" if "org.apache.spark" in cmd else "broker" if "kafka" in cmd.lower() else "other"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "python-worker"
    if "python" in head:
        return "helper"
    return "other"


@dataclass
class CpuByRole:
    """CPU seconds per role of the processes under ``root`` between ``start()`` and ``stop()``.

    Processes that start or end in between count from their first or up to their last sight.
    ``cores()`` divides by the wall time: 2.0 means both cores of the machine for the whole stretch.

    >>> c = CpuByRole(os.getpid()); c.start(); sum(range(10**6)) > 0; c.stop(); c.wall_s > 0
    True
    True
    """

    root: int
    first: dict[int, tuple[str, float]] = field(default_factory=dict)
    last: dict[int, tuple[str, float]] = field(default_factory=dict)
    started: float = 0.0
    wall_s: float = 0.0

    def _read(self) -> dict[int, tuple[str, float]]:
        return {p: (role(command(p), self.root, p), cpu_seconds(p)) for p in descendants(self.root)}

    def start(self) -> None:
        self.first, self.started = self._read(), time.monotonic()

    def stop(self) -> None:
        self.last, self.wall_s = self._read(), time.monotonic() - self.started

    def seconds(self) -> dict[str, float]:
        """CPU seconds per role over the stretch."""
        out: dict[str, float] = {}
        for pid, (name, end) in self.last.items():
            begin = self.first.get(pid, (name, 0.0))[1]
            out[name] = out.get(name, 0.0) + max(0.0, end - begin)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def cores(self) -> dict[str, float]:
        """Cores per role over the stretch (CPU seconds / wall seconds)."""
        return {k: v / self.wall_s for k, v in self.seconds().items()} if self.wall_s else {}
