"""A Spark standalone cluster on loopback (one master, one worker) through pyspark's ``spark-class``.

The pip package of pyspark has no ``start-master.sh``; ``spark-class`` starts the same
``Master`` and ``Worker`` classes. ``up`` returns once the worker has registered with the master
(read from the master's JSON status page on 127.0.0.1); ``down`` stops both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.jars import pyspark_jars_dir
from infra.kafka import port_open

__all__ = [
    "ClusterConfig",
    "down",
    "status",
    "up",
]


@dataclass(frozen=True)
class ClusterConfig:
    """Ports and sizes of the loopback cluster."""

    home: Path
    port: int = 7077
    webui_port: int = 18080
    worker_webui_port: int = 18081
    worker_cores: int = 2
    worker_memory: str = "2g"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"


def _spark_home() -> Path:
    return pyspark_jars_dir().parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(_spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
        }
    )
    return env


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError):
        return None
    return pid if b"org.apache.spark.deploy" in cmdline else None


def _start(cfg: ClusterConfig, role: str, args: list[str]) -> subprocess.Popen[bytes]:
    cfg.home.mkdir(parents=True, exist_ok=True)
    with open(cfg.home / f"{role}.out", "ab") as out:  # the child keeps its own copy of the handle
        proc = subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (cfg.home / f"{role}.pid").write_text(f"{proc.pid}\n")
    return proc


def alive_workers(cfg: ClusterConfig) -> int:
    """Workers registered with the master, from its web UI's JSON; 0 while it does not answer, or
    while something else answers on that port (another Spark UI serves HTML there)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cfg.webui_port}/json/", timeout=2) as resp:
            return int(json.load(resp).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def up(cfg: ClusterConfig, timeout_s: float = 90.0) -> str:
    """Start master and worker unless running; wait until the worker is registered."""
    started: dict[str, subprocess.Popen[bytes]] = {}
    if _pid(cfg.home / "master.pid") is None:
        for port in (cfg.port, cfg.webui_port):
            if port_open(port):
                raise RuntimeError(f"port {port} is in use by another process; pick others")
        started["master"] = _start(
            cfg,
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(cfg.port),
                "--webui-port",
                str(cfg.webui_port),
            ],
        )
    if _pid(cfg.home / "worker.pid") is None:
        started["worker"] = _start(
            cfg,
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                cfg.master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cfg.worker_cores),
                "--memory",
                cfg.worker_memory,
                "--webui-port",
                str(cfg.worker_webui_port),
                "--work-dir",
                str(cfg.home / "work"),
            ],
        )
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if alive_workers(cfg) >= 1:
            return f"Spark standalone up at {cfg.master_url} (1 worker, {cfg.worker_cores} cores)"
        for role in ("master", "worker"):
            # our own children: ask the process handle (/proc's cmdline is briefly empty around
            # spark-class's exec of java, which made a pid-file check report a live worker dead)
            proc = started.get(role)
            gone = proc.poll() is not None if proc is not None else _pid(cfg.home / f"{role}.pid") is None
            if gone:
                tail = (cfg.home / f"{role}.out").read_text(errors="replace")[-2000:]
                down(cfg)
                raise RuntimeError(f"Spark {role} exited:\n{tail}")
        time.sleep(0.5)
    down(cfg)
    raise TimeoutError(f"no Spark worker registered with {cfg.master_url} within {timeout_s:.0f}s")


def down(cfg: ClusterConfig) -> str:
    stopped = []
    for role in ("worker", "master"):
        pid = _pid(cfg.home / f"{role}.pid")
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _pid(cfg.home / f"{role}.pid") is not None and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):  # reap our own child
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.2)
            if _pid(cfg.home / f"{role}.pid") is not None:
                os.kill(pid, signal.SIGKILL)
            stopped.append(f"{role} (pid {pid})")
        (cfg.home / f"{role}.pid").unlink(missing_ok=True)
    return "stopped " + ", ".join(stopped) if stopped else "Spark standalone is not running"


def status(cfg: ClusterConfig) -> str:
    master, worker = _pid(cfg.home / "master.pid"), _pid(cfg.home / "worker.pid")
    if master is None and worker is None:
        return "Spark standalone is not running"
    return f"Spark master pid {master}, worker pid {worker}, {alive_workers(cfg)} alive worker(s) at {cfg.master_url}"
