"""``siftstream serve``: every job running continuously in one Spark application, supervised.

What it starts, in order: the local broker (unless ``--bootstrap-servers`` names a cluster) and
every topic; one SparkSession with the fair scheduler; the jobs of :data:`streaming.status.JOBS`
(validation, matching with delivery through the channels, channels, QoS, routes, composites),
each by its module's ``build_query``/``build_queries`` with its own scheduler pool and checkpoint
``<checkpoint dir>/<job><topic prefix>`` (the layout of the single-job commands, so ``serve``
resumes where ``siftstream match-job`` stopped and ``siftstream status`` reads both); the HTTP
server (:mod:`streaming.web`: the live dashboard at ``/``, ``/metrics`` with
:mod:`streaming.metrics`); with ``demo``, the live feeds of :mod:`streaming.feeds` as child
processes; with ``gateway`` (a secured deployment: docs/guide/security.md), the subscription
gateway and the channel grants (:class:`infra.security.AccessService`) in two threads, their
counts in the metrics and the log. Why one application rather than one per job, measured:
docs/decisions/serve-one-spark-application.md.

The supervisor loop (:class:`Supervisor`, every ``poll_s``) reads each query's progress into the
metrics and each job's lag from its checkpoint (:func:`streaming.status.job_status`), and
restarts a job whose query failed: it stops the job's other queries and starts the job again
after :meth:`Backoff.delay` seconds, rebuilding its handler from the checkpoint (the jobs'
restart rules make the replayed batch write identical records). A job that ran
``Backoff.reset_after_s`` without failing starts counting failures from zero again.

Stopping (Ctrl-C or SIGTERM): the feeds are terminated, the gateway's threads end, every query is stopped (Spark's
``stopTimeout`` bounds each), the matching job's delivery stage is closed, Spark stops, then the
HTTP server; checkpoints hold the last committed batch, and the next ``serve`` resumes from them.
A second signal exits at once.

>>> Backoff(initial_s=1, factor=2, max_s=10).schedule(6)
[1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from streaming import logs
from streaming.status import JOBS, job_status, query_dirs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming.metrics import JobMetrics

__all__ = [
    "FEEDS",
    "Backoff",
    "JobRun",
    "ServeConfig",
    "Supervisor",
    "job_config",
    "job_offsets",
    "serve",
    "start_http",
]

FEEDS = ("stocks", "sensors", "overlay", "clients")
"""The demo's live feeds (:mod:`streaming.feeds`), one child process each."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff of a failed job's restarts.

    Attributes
    ----------
    initial_s : float
        Wait before the first restart.
    factor : float
        Each further consecutive failure multiplies the wait by this.
    max_s : float
        The longest wait.
    reset_after_s : float
        A job that ran this long since its last (re)start has its failures forgotten.
    """

    initial_s: float = 2.0
    factor: float = 2.0
    max_s: float = 60.0
    reset_after_s: float = 300.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before restarting after the ``failures``-th consecutive failure (1, 2, ...)."""
        return float(min(self.max_s, self.initial_s * self.factor ** max(0, failures - 1)))

    def schedule(self, n: int) -> list[float]:
        """The first ``n`` waits."""
        return [self.delay(i) for i in range(1, n + 1)]


@dataclass(frozen=True)
class ServeConfig:
    """Settings of ``siftstream serve`` (built by the command line).

    Attributes
    ----------
    conn : KafkaConnection
    checkpoint_dir : Path
        Each job's checkpoint is ``<checkpoint_dir>/<job><topic_prefix>``.
    stats_dir : Path
        Each job's per-batch JSON Lines stats go to ``<stats_dir>/<job><topic_prefix>.jsonl``.
    jobs : tuple of str
        The jobs to run (default every one; empty: only the demo feeds and HTTP).
    trigger_interval : str
        Processing-time trigger of every query.
    demo : bool
        Also start the live feeds (:data:`FEEDS`) at ``demo_rate`` events per second per feed.
    http_port : int
        0 picks a free port; negative: no HTTP server.
    dashboard : bool
        Serve the live dashboard at ``/`` (its feed reads the output topics in this process);
        without it, ``/metrics`` and ``/healthz`` only.
    max_offsets_per_trigger : int, optional
        Every query's cap on the records one micro-batch reads (Spark's ``maxOffsetsPerTrigger``):
        a backlog is worked off in bounded batches instead of one huge one.
    job_trigger_intervals : dict of str to str
        Per job (a name of ``JOBS``), its queries' trigger instead of ``trigger_interval``.
    job_max_offsets : dict of str to int
        Per job, its queries' cap instead of ``max_offsets_per_trigger``.
    gateway : KafkaConnection, optional
        The ``admin`` profile's connection: run the subscription gateway (as ``conn``, the jobs
        profile) and grant each subscriber its channels (as this) while serve runs.
    revoke_grace_s : float
        With ``gateway``: how long after a move a subscriber keeps the channel it left when its
        client has not passed the hand-over marker there (docs/guide/security.md).
    """

    conn: KafkaConnection
    checkpoint_dir: Path
    stats_dir: Path
    topic_prefix: str = ""
    jobs: tuple[str, ...] = JOBS
    master: str = "local[2]"
    spark_ui: bool = False
    trigger_interval: str = "5 seconds"
    demo: bool = False
    demo_rate: float = 50.0
    seed: int = 0
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    dashboard: bool = True
    poll_s: float = 2.0
    stop_timeout_s: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)
    quiet: bool = True
    kafka_config: str | None = None
    max_offsets_per_trigger: int | None = None
    job_trigger_intervals: dict[str, str] = field(default_factory=dict)
    job_max_offsets: dict[str, int] = field(default_factory=dict)
    gateway: KafkaConnection | None = None
    revoke_grace_s: float = 3600.0

    def checkpoint(self, job: str) -> Path:
        return self.checkpoint_dir / f"{job}{self.topic_prefix}"

    def stats_file(self, job: str) -> Path:
        return self.stats_dir / f"{job}{self.topic_prefix}.jsonl"


def _log(text: str, level: int = logging.INFO) -> None:
    logs.get("serve").log(level, text)


# ---- the jobs ----------------------------------------------------------------------------------


@dataclass
class JobRun:
    """One started job: its queries by name and the handler that keeps its per-batch history."""

    job: str
    queries: dict[str, Any]
    handler: Any = None
    started: float = field(default_factory=time.monotonic)


def job_config(cfg: ServeConfig, job: str) -> Any:
    """The job's configuration as its single-job command builds it (that command's defaults), with
    serve's connection, checkpoint, prefix, stats file, and the job's trigger and
    ``max_offsets_per_trigger`` (its own when ``job_trigger_intervals`` / ``job_max_offsets`` name
    it, else serve's).

    >>> from pathlib import Path
    >>> cfg = ServeConfig(KafkaConnection("h:1"), Path("c"), Path("s"), max_offsets_per_trigger=500,
    ...                   job_max_offsets={"qos": 2000}, job_trigger_intervals={"qos": "10 seconds"})
    >>> job_config(cfg, "routes").max_offsets_per_trigger, job_config(cfg, "routes").trigger_interval
    (500, '5 seconds')
    >>> job_config(cfg, "qos").max_offsets_per_trigger, job_config(cfg, "qos").trigger_interval
    (2000, '10 seconds')
    """
    common: dict[str, Any] = {
        "conn": cfg.conn,
        "checkpoint": cfg.checkpoint(job),
        "topic_prefix": cfg.topic_prefix,
        "trigger_interval": cfg.job_trigger_intervals.get(job, cfg.trigger_interval),
        "stats_file": cfg.stats_file(job),
        "max_offsets_per_trigger": cfg.job_max_offsets.get(job, cfg.max_offsets_per_trigger),
    }
    if job == "validation":
        from streaming.validation_job import ValidationConfig

        return ValidationConfig(**common)
    if job == "matching":
        from streaming.matching_job import MatchingConfig

        return MatchingConfig(deliver=True, **common)
    if job == "channels":
        from streaming.channels_job import ChannelsConfig

        return ChannelsConfig(**common)  # the job's default method (auto)
    if job == "qos":
        from streaming.qos_job import QosConfig

        return QosConfig(**common)
    if job == "routes":
        from streaming.routes_job import RoutesConfig

        return RoutesConfig(**common)
    if job == "composites":
        from streaming.composites_job import CompositesConfig

        return CompositesConfig(**common)
    raise ValueError(f"unknown job {job!r}; the jobs are {', '.join(JOBS)}")


def _start_job(spark: SparkSession, cfg: ServeConfig, job: str) -> JobRun:
    """Start the job's queries (configured by :func:`job_config`) in scheduler pool ``job``."""
    job_cfg = job_config(cfg, job)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", job)
    try:
        if job == "validation":
            from streaming.validation_job import build_queries

            queries = build_queries(spark, job_cfg)
            return JobRun(job, {q.name: q for q in queries})
        builder: Callable[..., Any]
        if job == "matching":
            from streaming.matching_job import build_query as builder
        elif job == "channels":
            from streaming.channels_job import build_query as builder
        elif job == "qos":
            from streaming.qos_job import build_query as builder
        elif job == "routes":
            from streaming.routes_job import build_query as builder
        else:
            from streaming.composites_job import build_query as builder
        query, handler = builder(spark, job_cfg, quiet=cfg.quiet)
        return JobRun(job, {"query": query}, handler)
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]


def _first_line(exc: Any) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def job_offsets(consumer: Any, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    """The high watermark of every partition of ``topics`` that exists, read by a confluent-kafka
    ``consumer``."""
    from streaming.readers import watermarks

    meta = consumer.list_topics(timeout=10).topics
    return {t: {p: watermarks(consumer, t, p)[1] for p in meta[t].partitions} for t in topics if t in meta}


class Supervisor:
    """Starts the jobs, feeds the metrics from their progress, restarts failed ones (module docstring)."""

    def __init__(
        self,
        spark: SparkSession | None,
        cfg: ServeConfig,
        metrics: JobMetrics,
        starter: Callable[[Any, ServeConfig, str], JobRun] | None = None,
    ) -> None:
        from confluent_kafka import Consumer

        self.spark, self.cfg, self.metrics = spark, cfg, metrics
        self.starter = starter or _start_job
        self.runs: dict[str, JobRun] = {}
        self.failures: dict[str, int] = {}
        self.retry_at: dict[str, float] = {}
        self.dirs = query_dirs(cfg.checkpoint_dir, cfg.topic_prefix)
        self._consumer = Consumer(cfg.conn.confluent(**{"group.id": "siftstream-serve", "enable.auto.commit": False}))
        self._topics: list[str] = []
        self._batch_read: dict[tuple[str, str], int] = {}  # (job, query) -> batch id of the last progress read

    def start_all(self, stopping: threading.Event | None = None) -> None:
        """Start every configured job, in order; stop starting more once ``stopping`` is set."""
        for job in self.cfg.jobs:
            if stopping is not None and stopping.is_set():
                return
            self.metrics.register(job)
            self.start(job)

    def start(self, job: str) -> None:
        started = time.monotonic()
        self.runs[job] = self.starter(self.spark, self.cfg, job)
        self.metrics.set_up(job, True)
        _log(f"{job}: {len(self.runs[job].queries)} queries started in {time.monotonic() - started:.1f} s")

    def _stop_job(self, run: JobRun, deadline: float | None = None) -> None:
        """Stop the job's queries, each between two batches when one ends before ``deadline``
        (a monotonic time; the batch in flight is otherwise cancelled and replayed on restart)."""
        for name, query in run.queries.items():
            try:
                while deadline is not None and time.monotonic() < deadline and query.status.get("isTriggerActive"):
                    time.sleep(0.1)
                if query.isActive:
                    query.stop()
            except Exception as exc:  # one that will not stop (or a JVM already gone) must not keep the rest
                _log(f"{run.job}: stopping {name} failed: {_first_line(exc)}", logging.WARNING)
        delivery = getattr(run.handler, "delivery", None)
        if delivery is not None:
            try:
                delivery.close()
            except Exception as exc:
                _log(f"{run.job}: closing the delivery stage failed: {_first_line(exc)}", logging.WARNING)

    def check(self) -> None:
        """One round: failed jobs, due restarts, metrics."""
        now = time.monotonic()
        self.reap(now)
        self.restart_due(now)
        for run in self.runs.values():
            self._observe(run)
        self._lag()

    def reap(self, now: float) -> None:
        """Stop every job with a query that is no longer active and schedule its restart."""
        for job, run in list(self.runs.items()):
            failed = [(n, q) for n, q in run.queries.items() if not q.isActive]
            if not failed:
                if now - run.started > self.cfg.backoff.reset_after_s:
                    self.failures[job] = 0
                continue
            name, query = failed[0]
            reason = query.exception()
            self._stop_job(run)
            self._observe(run)
            del self.runs[job]
            self.failures[job] = self.failures.get(job, 0) + 1
            wait = self.cfg.backoff.delay(self.failures[job])
            self.retry_at[job] = now + wait
            self.metrics.set_up(job, False)
            _log(
                f"{job}: query {name} "
                + ("stopped" if reason is None else f"failed: {_first_line(reason)}")
                + f"; restart {self.failures[job]} in {wait:.0f} s",
                logging.WARNING,
            )

    def restart_due(self, now: float) -> None:
        """Start every job whose restart is due; one that fails to start waits its next backoff."""
        for job, due in list(self.retry_at.items()):
            if now >= due:
                del self.retry_at[job]
                self.metrics.restarted(job)
                try:
                    self.start(job)
                except Exception as exc:
                    self.failures[job] = self.failures.get(job, 0) + 1
                    wait = self.cfg.backoff.delay(self.failures[job])
                    self.retry_at[job] = now + wait
                    _log(f"{job}: restart failed: {_first_line(exc)}; next try in {wait:.0f} s", logging.WARNING)

    def _observe(self, run: JobRun) -> None:
        for name, query in run.queries.items():
            for progress in self._new_progress(run.job, name, query):
                self.metrics.observe(run.job, name, progress)
        history = getattr(run.handler, "history", None)
        while history:  # the handler's per-batch stats, taken so that a long run keeps none
            stats = history.pop(0)
            if run.job == "matching":
                self.metrics.matched(stats.events, stats.matches)

    def _new_progress(self, job: str, name: str, query: Any) -> list[Any]:
        """The query's progress reports since the last call: its last one, or every one Spark keeps
        (``recentProgress``) on the first call and when more than one batch ran in between. Each
        report kept costs a Py4J call and a JSON parse (up to 100 a query), and reading them all
        for every query at every poll took the driver's Python, which runs every job's batches,
        from the jobs; ``metrics.observe`` skips a report seen before."""
        from streaming.metrics import progress_doc

        last = query.lastProgress
        if last is None:
            return []
        batch = int(progress_doc(last).get("batchId", -1))
        before = self._batch_read.get((job, name))
        self._batch_read[(job, name)] = batch
        if before is not None and before <= batch <= before + 1:
            return [last]
        return list(query.recentProgress)

    def _lag(self) -> None:
        if not self._topics:
            from schemas.topics import TOPICS

            self._topics = [self.cfg.topic_prefix + t for t in TOPICS]
        try:
            ends = job_offsets(self._consumer, self._topics)
        except Exception as exc:  # the cluster being away for a moment is no reason to stop
            _log(f"reading end offsets failed: {_first_line(exc)}", logging.WARNING)
            return
        for job in self.cfg.jobs:
            status = job_status(job, self.dirs[job], ends)
            self.metrics.lag.labels(job=job).set(status.lag_records)

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop every query at once, each between two batches when its batch in flight ends within
        ``grace_s`` seconds, else at once (Spark's ``stopTimeout`` bounds each stop); then close
        the delivery stages. The slowest query, not their sum, sets how long this takes."""
        from concurrent.futures import ThreadPoolExecutor

        deadline = time.monotonic() + grace_s
        runs = list(self.runs.values())
        queries = [(run.job, name, query) for run in runs for name, query in run.queries.items()]
        with ThreadPoolExecutor(max_workers=max(1, len(queries)), thread_name_prefix="serve-stop") as pool:
            list(pool.map(lambda item: _stop_query(*item, deadline), queries))
        for run in runs:
            self._stop_job(run)  # its queries have stopped: this closes the delivery stage
        self.runs.clear()
        self._consumer.close()


def _stop_query(job: str, name: str, query: Any, deadline: float) -> None:
    """Stop one query between two batches if its batch in flight ends before ``deadline`` (a
    monotonic time), else at once: the cancelled batch is replayed on the next start."""
    try:
        while time.monotonic() < deadline and query.status.get("isTriggerActive"):
            time.sleep(0.1)
        if query.isActive:
            query.stop()
    except Exception as exc:  # one that will not stop (or a JVM already gone) must not keep the rest
        _log(f"{job}: stopping {name} failed: {_first_line(exc)}")


# ---- the demo's feeds --------------------------------------------------------------------------


def _start_feeds(cfg: ServeConfig) -> list[subprocess.Popen[bytes]]:
    """One child process per feed, in its own session (the terminal's Ctrl-C reaches serve only)."""
    procs = []
    for feed in FEEDS:
        cmd = [
            sys.executable,
            "-m",
            "streaming.feeds",
            feed,
            "--bootstrap-servers",
            cfg.conn.bootstrap_servers,
            "--topic-prefix",
            cfg.topic_prefix,
            "--rate",
            str(cfg.demo_rate),
            "--seed",
            str(cfg.seed),
        ]
        if cfg.kafka_config:
            cmd += ["--kafka-config", cfg.kafka_config]
        # the feeds log as this process does (--log-level, --log-format)
        procs.append(subprocess.Popen(cmd, start_new_session=True, env={**os.environ, **logs.environment()}))
    return procs


def _stop_feeds(procs: list[subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# ---- the gateway --------------------------------------------------------------------------------


def _report_access(status: dict[str, Any], before: dict[str, Any], metrics: JobMetrics) -> None:
    """The access service's counts since ``before`` into the metrics, and a log line when they moved."""
    metrics.access(status, before)
    if status != before:
        _log(
            f"gateway: {status['forwarded']} subscription records forwarded, {status['rejected']} dead-lettered; "
            f"{status['granted']} channel grants, {status['revoked']} revoked; {status['errors']} errors"
            + (f" (last: {status['last_error']})" if status["errors"] != before.get("errors", 0) else ""),
            logging.INFO if status["up"] and status["errors"] == before.get("errors", 0) else logging.WARNING,
        )


# ---- HTTP --------------------------------------------------------------------------------------


def start_http(cfg: ServeConfig) -> tuple[str, Callable[[], None]]:
    """Serve the live dashboard of the configured topics at ``/`` and ``/metrics`` (prometheus_client's
    default registry: the jobs' metrics and the dashboard's) on ``cfg.http_host:cfg.http_port``
    (:class:`streaming.web.WebServer`); return the URL and the function that stops it."""
    from streaming.dashboard import Dashboard
    from streaming.web import WebServer

    dashboard = Dashboard(cfg.conn, cfg.topic_prefix) if cfg.dashboard else None
    web = WebServer(cfg.http_host, cfg.http_port, dashboard)
    try:
        return web.start(), web.stop
    except OSError as exc:
        if dashboard is not None:
            dashboard.stop()
        raise RuntimeError(f"cannot serve on {cfg.http_host}:{cfg.http_port}: {exc}") from None


# ---- serve -------------------------------------------------------------------------------------


def _session(cfg: ServeConfig) -> SparkSession:
    from infra.jars import ensure_jars
    from streaming.session import SparkConfig, build_session

    spark = build_session(SparkConfig(master=cfg.master, ui=cfg.spark_ui, fair_scheduler=True), ensure_jars())
    # a query that does not stop within this raises instead of holding the shutdown
    spark.conf.set("spark.sql.streaming.stopTimeout", str(int(cfg.stop_timeout_s * 1000)))
    return spark


def serve(cfg: ServeConfig, stop_event: threading.Event | None = None) -> int:
    """Run until Ctrl-C, SIGTERM or ``stop_event``; return the exit status (0 after a clean stop)."""
    from streaming.metrics import JobMetrics

    stopping = stop_event or threading.Event()
    signals = 0

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            _log("second signal: exiting now", logging.WARNING)
            os._exit(130)
        stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    feeds: list[subprocess.Popen[bytes]] = []
    stop_http: Callable[[], None] | None = None
    spark = supervisor = access = None
    access_seen: dict[str, Any] = {}
    try:
        metrics = JobMetrics()
        if cfg.gateway is not None:
            from infra.security import AccessService

            access = AccessService(cfg.conn, cfg.gateway, cfg.topic_prefix, revoke_grace_s=cfg.revoke_grace_s)
            access.start()
            _log("the subscription gateway and the channel grants started (docs/guide/security.md)")
        if cfg.http_port >= 0:
            url, stop_http = start_http(cfg)
            _log((f"the dashboard at {url} and " if cfg.dashboard else "") + f"the metrics at {url}metrics")
        if cfg.demo:
            feeds = _start_feeds(cfg)
            _log(f"demo feeds started: {', '.join(FEEDS)} (about {cfg.demo_rate:g} events/s each)")
        if cfg.jobs:
            from streaming.session import submitted

            master = "spark-submit's master" if submitted() else cfg.master  # docs/guide/cluster.md
            _log(f"starting Spark ({master}) and the jobs: {', '.join(cfg.jobs)}")
            spark = _session(cfg)
            if logs.current()[0] != "debug":  # --log-level debug: Spark's level as build_session set it
                spark.sparkContext.setLogLevel("ERROR" if cfg.quiet else logs.spark_level())
            supervisor = Supervisor(spark, cfg, metrics)
            supervisor.start_all(stopping)
        _log(f"running; checkpoints under {cfg.checkpoint_dir}. Ctrl-C or SIGTERM stops it")
        while not stopping.wait(cfg.poll_s):
            if supervisor is not None and not stopping.is_set():
                supervisor.check()
            if access is not None:
                _report_access(status := access.status(), access_seen, metrics)
                access_seen = status
        return 0
    finally:
        started = time.monotonic()
        _log("stopping ...")
        _stop_feeds(feeds)
        for what, step in (
            ("the gateway", None if access is None else access.stop),
            ("the jobs", None if supervisor is None else supervisor.stop),
            ("Spark", None if spark is None else spark.stop),
            ("the HTTP server", stop_http),
        ):
            if step is None:
                continue
            try:
                step()
            except Exception as exc:  # e.g. a JVM that a signal to the whole process group ended first
                _log(f"stopping {what} failed: {_first_line(exc)}", logging.WARNING)
        for s, handler in previous.items():
            signal.signal(s, handler)
        _log(f"stopped in {time.monotonic() - started:.1f} s; the checkpoints under {cfg.checkpoint_dir} resume it")
