"""A single-node Apache Kafka broker in KRaft mode, started from the jars Maven fetched.

``up`` formats storage when needed, starts ``kafka.Kafka`` on 127.0.0.1, and returns only when
the broker really accepts a produce and a fetch; ``down`` stops it cleanly (SIGTERM, then
SIGKILL after a grace period). Everything lives under one home folder (default
``.siftstream/kafka`` in the project): ``server.properties``, ``data/``, ``logs/``, ``broker.pid``.
Both are idempotent: ``up`` on a running broker and ``down`` on a stopped one do nothing.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra.connection import KafkaConnection
from infra.jars import JarSets

__all__ = [
    "BrokerConfig",
    "broker_or",
    "down",
    "free_ports",
    "port_open",
    "status",
    "up",
]

LOG4J = Path(__file__).with_name("log4j2.properties")


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the local broker runs."""

    home: Path
    port: int = 9092
    controller_port: int = 9093
    heap: str = "512m"
    java: str = "java"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


def _server_properties(cfg: BrokerConfig) -> str:
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{cfg.controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{cfg.port},CONTROLLER://127.0.0.1:{cfg.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{cfg.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(cfg.home / "data"),
        "num.partitions": "2",
        # one node: every internal topic must have replication factor 1
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        # compaction of the table topics (subscriptions, topology) should be visible quickly
        "log.cleaner.backoff.ms": "5000",
        "message.max.bytes": "8388608",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _pid(cfg: BrokerConfig) -> int | None:
    try:
        pid = int(cfg.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    # a stale pid file may name a pid that the system has since given to another process
    return pid if b"kafka.Kafka" in cmdline else None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free now (held together while chosen, so never the same twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _java_opts(cfg: BrokerConfig) -> list[str]:
    return [
        f"-Xmx{cfg.heap}",
        f"-Xms{cfg.heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile=file:{LOG4J}",
        f"-Dkafka.logs.dir={cfg.log_dir}",
    ]


def _format(cfg: BrokerConfig, jars: JarSets) -> None:
    if (cfg.home / "data" / "meta.properties").exists():
        return
    cluster_id = "-"
    while cluster_id.startswith("-"):  # as Kafka's own Uuid: an id starting with '-' reads as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    cmd = [
        cfg.java,
        *_java_opts(cfg),
        "-cp",
        jars.kafka_classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(cfg.home / "server.properties"),
        "--ignore-formatted",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"formatting Kafka storage failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def wait_ready(bootstrap: str, timeout_s: float = 90.0) -> float:
    """Block until a broker at ``bootstrap`` accepts a produce and a fetch; return the seconds waited."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    start = time.monotonic()
    topic = "__siftstream_healthcheck"
    last_error: Exception | None = None
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    # wait for the listener first: a client created earlier logs every refused connection
    while not port_open(int(port), host or "127.0.0.1") and time.monotonic() - start < timeout_s:
        time.sleep(0.2)
    while time.monotonic() - start < timeout_s:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            if topic not in admin.list_topics(timeout=5).topics:
                fut = admin.create_topics([NewTopic(topic, 1, 1)])[topic]
                try:
                    fut.result(10)
                except KafkaException as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        raise
            token = uuid.uuid4().hex.encode()
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000})
            producer.produce(topic, token)
            if producer.flush(15) != 0:
                raise RuntimeError("produce not acknowledged")
            consumer = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": f"hc-{token.decode()}", "enable.auto.commit": False}
            )
            try:
                parts = [TopicPartition(topic, 0)]
                low, high = consumer.get_watermark_offsets(parts[0], timeout=10)
                consumer.assign([TopicPartition(topic, 0, max(low, high - 50))])
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    msg = consumer.poll(1.0)
                    if msg is not None and msg.error() is None and msg.value() == token:
                        return time.monotonic() - start
            finally:
                consumer.close()
            raise RuntimeError("fetch did not return the healthcheck record")
        except Exception as exc:  # the broker is still starting; every failure here is retried
            last_error = exc
            time.sleep(1.0)
    raise TimeoutError(f"Kafka at {bootstrap} did not accept produce/fetch within {timeout_s:.0f}s: {last_error}")


def up(cfg: BrokerConfig, jars: JarSets, timeout_s: float = 90.0) -> str:
    """Start the broker if it is not running; return a one-line status."""
    pid = _pid(cfg)
    if pid is not None:
        wait_ready(cfg.bootstrap, timeout_s)
        return f"Kafka already running (pid {pid}) at {cfg.bootstrap}"
    for port in (cfg.port, cfg.controller_port):
        if port_open(port):
            raise RuntimeError(f"port {port} is already in use by another process; choose another with --port")
    cfg.home.mkdir(parents=True, exist_ok=True)
    cfg.log_dir.mkdir(exist_ok=True)
    props = cfg.home / "server.properties"
    wanted = _server_properties(cfg)
    if props.exists() and props.read_text() != wanted and (cfg.home / "data").exists():
        # the KRaft metadata in data/ names the old controller address: never delete data silently
        raise RuntimeError(
            f"the broker data in {cfg.home / 'data'} was created with other settings (ports or paths); "
            f"start it with the ports it had (see {props}), or remove {cfg.home} to start afresh"
        )
    props.write_text(wanted)
    _format(cfg, jars)
    with open(cfg.log_dir / "broker.out", "ab") as out:  # the child keeps its own copy of the handle
        proc = subprocess.Popen(
            [cfg.java, *_java_opts(cfg), "-cp", jars.kafka_classpath, "kafka.Kafka", str(props)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cfg.pid_file.write_text(f"{proc.pid}\n")
    try:
        waited = wait_ready(cfg.bootstrap, timeout_s)
    except Exception:
        if proc.poll() is not None:
            tail = (cfg.log_dir / "broker.out").read_text(errors="replace")[-3000:]
            down(cfg)
            raise RuntimeError(f"Kafka exited with code {proc.returncode}:\n{tail}") from None
        down(cfg)
        raise
    return f"Kafka started (pid {proc.pid}) at {cfg.bootstrap}, ready in {waited:.1f}s; data in {cfg.home / 'data'}"


def down(cfg: BrokerConfig, grace_s: float = 30.0) -> str:
    """Stop the broker (controlled shutdown, then SIGKILL after ``grace_s``)."""
    pid = _pid(cfg)
    if pid is None:
        cfg.pid_file.unlink(missing_ok=True)
        return "Kafka is not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)
    cfg.pid_file.unlink(missing_ok=True)
    return f"Kafka stopped (pid {pid})"


def _alive(pid: int) -> bool:
    try:
        # reap it if it is our child, so it does not linger as a zombie
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def status(cfg: BrokerConfig) -> str:
    pid = _pid(cfg)
    if pid is None:
        return f"Kafka is not running (home {cfg.home})"
    state = "accepting connections" if port_open(cfg.port) else "not yet listening"
    return f"Kafka running (pid {pid}) at {cfg.bootstrap}, {state}; data in {cfg.home / 'data'}"


@contextmanager
def broker_or(
    bootstrap: str | None, jars: JarSets, home: Path | None = None, heap: str = "512m"
) -> Iterator[KafkaConnection]:
    """The cluster at ``bootstrap``, or, when it is None, a throwaway local broker on free ports
    (under ``home`` or a temporary folder) that is stopped on exit, also after an error. A
    temporary folder is removed with its data (benchmarks write gigabytes)."""
    if bootstrap:
        yield KafkaConnection(bootstrap)
        return
    port, controller_port = free_ports(2)
    cfg = BrokerConfig(
        home=home or Path(tempfile.mkdtemp(prefix="siftstream-kafka-")),
        port=port,
        controller_port=controller_port,
        heap=heap,
    )
    print(up(cfg, jars), file=sys.stderr)
    try:
        yield KafkaConnection(cfg.bootstrap)
    finally:
        print(down(cfg), file=sys.stderr)
        if home is None:
            shutil.rmtree(cfg.home, ignore_errors=True)
