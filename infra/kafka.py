"""A single-node Apache Kafka broker in KRaft mode, started from the jars Maven fetched, or a
cluster of such nodes (``KafkaClusterConfig``: ``cluster_up``, ``cluster_down``, ``kill_node``).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.connection import KafkaConnection
from infra.jars import JarSets

__all__ = [
    "BrokerConfig",
    "ClusterNode",
    "KafkaClusterConfig",
    "broker_or",
    "broker_status",
    "cluster_down",
    "cluster_or",
    "cluster_status",
    "cluster_up",
    "down",
    "free_ports",
    "kill_node",
    "port_open",
    "quorum_leader",
    "read_cluster",
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


def _new_cluster_id() -> str:
    cluster_id = "-"
    while cluster_id.startswith("-"):  # as Kafka's own Uuid: an id starting with '-' reads as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return cluster_id


def _format(cfg: BrokerConfig, jars: JarSets, cluster_id: str | None = None, format_args: tuple[str, ...] = ()) -> None:
    if (cfg.home / "data" / "meta.properties").exists():
        return
    cluster_id = cluster_id or _new_cluster_id()
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
        *format_args,  # e.g. --add-scram credentials (infra/security.py)
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"formatting Kafka storage failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def wait_ready(
    bootstrap: str, timeout_s: float = 90.0, replication: int = 1, client: dict[str, Any] | None = None
) -> float:
    """Block until a broker at ``bootstrap`` accepts a produce and a fetch; return the seconds waited.

    ``replication`` is the healthcheck topic's replication factor: a cluster's is its default (3),
    so that the check passes with any one node down, as the cluster's own topics do. ``client``:
    extra properties of its clients (a secured broker's SASL/TLS settings, infra/security.py)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    start = time.monotonic()
    topic = "__siftstream_healthcheck"
    last_error: Exception | None = None
    extra = client or {}
    # wait for the listeners first: a client created earlier logs every refused connection
    for server in bootstrap.split(","):
        host, _, port = server.rpartition(":")
        while not port_open(int(port), host or "127.0.0.1") and time.monotonic() - start < timeout_s:
            time.sleep(0.2)
    while time.monotonic() - start < timeout_s:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, **extra})
            if topic not in admin.list_topics(timeout=5).topics:
                fut = admin.create_topics([NewTopic(topic, 1, replication)])[topic]
                try:
                    fut.result(10)
                except KafkaException as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        raise
            token = uuid.uuid4().hex.encode()
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000, **extra})
            producer.produce(topic, token)
            if producer.flush(15) != 0:
                raise RuntimeError("produce not acknowledged")
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"hc-{token.decode()}",
                    "enable.auto.commit": False,
                    **extra,
                }
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


def _launch(
    cfg: BrokerConfig,
    jars: JarSets,
    properties: str,
    cluster_id: str | None = None,
    format_args: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Write ``properties``, format the storage when new, start ``kafka.Kafka`` and write its pid file."""
    for port in (cfg.port, cfg.controller_port):
        if port_open(port):
            raise RuntimeError(f"port {port} is already in use by another process; choose another with --port")
    cfg.home.mkdir(parents=True, exist_ok=True)
    cfg.log_dir.mkdir(exist_ok=True)
    props = cfg.home / "server.properties"
    if props.exists() and props.read_text() != properties and (cfg.home / "data").exists():
        # the KRaft metadata in data/ names the old controller address: never delete data silently
        raise RuntimeError(
            f"the broker data in {cfg.home / 'data'} was created with other settings (ports or paths); "
            f"start it with the ports it had (see {props}), or remove {cfg.home} to start afresh"
        )
    props.write_text(properties)
    _format(cfg, jars, cluster_id, format_args)
    with open(cfg.log_dir / "broker.out", "ab") as out:  # the child keeps its own copy of the handle
        proc = subprocess.Popen(
            [cfg.java, *_java_opts(cfg), "-cp", jars.kafka_classpath, "kafka.Kafka", str(props)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cfg.pid_file.write_text(f"{proc.pid}\n")
    return proc


def _exited(cfg: BrokerConfig, proc: subprocess.Popen[bytes]) -> RuntimeError:
    tail = (cfg.log_dir / "broker.out").read_text(errors="replace")[-3000:]
    return RuntimeError(f"Kafka exited with code {proc.returncode}:\n{tail}")


def up(cfg: BrokerConfig, jars: JarSets, timeout_s: float = 90.0) -> str:
    """Start the broker if it is not running; return a one-line status."""
    pid = _pid(cfg)
    if pid is not None:
        wait_ready(cfg.bootstrap, timeout_s)
        return f"Kafka already running (pid {pid}) at {cfg.bootstrap}"
    proc = _launch(cfg, jars, _server_properties(cfg))
    try:
        waited = wait_ready(cfg.bootstrap, timeout_s)
    except Exception:
        if proc.poll() is not None:
            down(cfg)
            raise _exited(cfg, proc) from None
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


# ---- a cluster of combined broker+controller nodes ---------------------------------------------


@dataclass(frozen=True)
class KafkaClusterConfig:
    """A KRaft cluster of ``brokers`` combined broker+controller nodes on loopback.

    Node ``i`` (1-based) listens for clients on ``port + i - 1`` and for the controller quorum on
    ``controller_port + i - 1``, and keeps everything under ``home / f"node{i}"`` (its own
    ``server.properties``, ``data/``, ``logs/``, ``broker.pid``), like a single broker. Every node
    is a voter of a static quorum (``controller.quorum.voters``), so the cluster keeps working with
    any one node of three down. Replication: new topics get ``min(3, brokers)`` replicas by
    default, ``min.insync.replicas`` is ``min(2, brokers)``, and Kafka's internal topics follow
    the same numbers; an ``acks=all`` producer (every producer of this project) therefore keeps
    writing with one node down and gets no acknowledgement with two down (docs/guide/faults.md).

    >>> c = KafkaClusterConfig(Path("/tmp/k"), brokers=3, port=19092, controller_port=19192)
    >>> c.bootstrap
    '127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094'
    >>> [(n.node_id, n.port, n.controller_port) for n in c.nodes()]
    [(1, 19092, 19192), (2, 19093, 19193), (3, 19094, 19194)]
    >>> KafkaClusterConfig(Path("/tmp/k"), brokers=3, port=9092, controller_port=9093)
    Traceback (most recent call last):
    ...
    ValueError: controller ports 9093-9095 overlap the client ports 9092-9094; choose another --controller-port
    """

    home: Path
    brokers: int = 3
    port: int = 9092
    controller_port: int = 9095
    heap: str = "512m"
    java: str = "java"

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, got {self.brokers}")
        clients = set(range(self.port, self.port + self.brokers))
        controllers = set(range(self.controller_port, self.controller_port + self.brokers))
        if clients & controllers:
            raise ValueError(
                f"controller ports {self.controller_port}-{self.controller_port + self.brokers - 1} overlap the "
                f"client ports {self.port}-{self.port + self.brokers - 1}; choose another --controller-port"
            )

    @property
    def replication(self) -> int:
        """The default replication factor of the cluster's topics."""
        return min(3, self.brokers)

    @property
    def min_insync(self) -> int:
        return min(2, self.brokers)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes())

    @property
    def layout_file(self) -> Path:
        """``cluster.json``: the layout ``up`` started, read back by ``down`` and ``status``."""
        return self.home / "cluster.json"

    def node(self, node_id: int) -> ClusterNode:
        if not 1 <= node_id <= self.brokers:
            raise ValueError(f"node ids run from 1 to {self.brokers}, got {node_id}")
        return ClusterNode(
            home=self.home / f"node{node_id}",
            port=self.port + node_id - 1,
            controller_port=self.controller_port + node_id - 1,
            heap=self.heap,
            java=self.java,
            node_id=node_id,
        )

    def nodes(self) -> list[ClusterNode]:
        return [self.node(i) for i in range(1, self.brokers + 1)]

    def voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes())


@dataclass(frozen=True)
class ClusterNode(BrokerConfig):
    """One node of a ``KafkaClusterConfig``: a ``BrokerConfig`` with its node id."""

    node_id: int = 1


def _node_properties(cluster: KafkaClusterConfig, node: ClusterNode) -> str:
    rf, isr = str(cluster.replication), str(cluster.min_insync)
    lines = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": cluster.voters(),
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(node.home / "data"),
        "num.partitions": "2",
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        # a leader that dies without a word stays elected until the controller fences it after this
        # long (Kafka's default is 9 s); 6 s keeps a fault test's stall short
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1500",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "log.cleaner.backoff.ms": "5000",
        "message.max.bytes": "8388608",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _cluster_id(cluster: KafkaClusterConfig) -> str:
    """The id every node is formatted with (all nodes of one cluster must share it)."""
    path = cluster.home / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    cluster.home.mkdir(parents=True, exist_ok=True)
    cluster_id = _new_cluster_id()
    path.write_text(cluster_id + "\n")
    return cluster_id


def cluster_up(
    cluster: KafkaClusterConfig,
    jars: JarSets,
    timeout_s: float = 120.0,
    properties: Callable[[KafkaClusterConfig, ClusterNode], str] | None = None,
    format_args: tuple[str, ...] = (),
    client: dict[str, Any] | None = None,
) -> str:
    """Start every node of ``cluster`` that is not running and wait until the cluster, and each
    node started now, accepts a produce and a fetch; return one line per node. Idempotent: on a
    running cluster it only checks; after one node was killed it restarts just that one (same
    data, no re-format).

    ``properties`` makes a node's ``server.properties`` (default: the plain cluster's), with
    ``format_args`` for ``kafka-storage format`` and ``client`` the extra client properties of the
    readiness check: how ``infra.security.cluster_up`` starts the secured cluster."""
    import json

    node_properties = properties or _node_properties

    cluster_id = _cluster_id(cluster)
    started: dict[int, subprocess.Popen[bytes]] = {}
    lines = []
    try:
        for node in cluster.nodes():
            pid = _pid(node)
            if pid is not None:
                lines.append(f"node {node.node_id} already running (pid {pid}) at {node.bootstrap}")
                continue
            started[node.node_id] = _launch(node, jars, node_properties(cluster, node), cluster_id, format_args)
        start = time.monotonic()
        # the cluster first (a quorum needs a majority of the nodes up), then each node started now
        for bootstrap in [cluster.bootstrap] + [cluster.node(i).bootstrap for i in started]:
            left = timeout_s - (time.monotonic() - start)
            try:
                wait_ready(bootstrap, max(left, 5.0), replication=cluster.replication, client=client)
            except Exception:
                for i, proc in started.items():
                    if proc.poll() is not None:
                        raise _exited(cluster.node(i), proc) from None
                raise
        waited = time.monotonic() - start
    except Exception:
        for i in started:
            down(cluster.node(i))
        raise
    layout = {"brokers": cluster.brokers, "port": cluster.port, "controller_port": cluster.controller_port}
    cluster.layout_file.write_text(json.dumps(layout) + "\n")
    for i, proc in started.items():
        node = cluster.node(i)
        lines.append(f"node {i} started (pid {proc.pid}) at {node.bootstrap}, controller port {node.controller_port}")
    lines.sort()
    ready = f", ready in {waited:.1f}s" if started else ""
    lines.append(
        f"Kafka cluster of {cluster.brokers} at {cluster.bootstrap}{ready}: replication factor "
        f"{cluster.replication}, min.insync.replicas {cluster.min_insync}; data in {cluster.home}"
    )
    return "\n".join(lines)


def cluster_down(cluster: KafkaClusterConfig, grace_s: float = 30.0) -> str:
    """Stop every node at once (SIGTERM to all, SIGKILL to any still alive after ``grace_s``):
    one after another, the last nodes would wait for a controller quorum that is already gone."""
    pids = {n.node_id: _pid(n) for n in cluster.nodes()}
    for pid in pids.values():
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p is not None and _alive(p) for p in pids.values()):
        time.sleep(0.2)
    for pid in pids.values():
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
    for node in cluster.nodes():
        node.pid_file.unlink(missing_ok=True)
    stopped = [f"{i} (pid {p})" for i, p in pids.items() if p is not None]
    return f"Kafka cluster stopped: nodes {', '.join(stopped)}" if stopped else "Kafka cluster is not running"


def kill_node(cluster: KafkaClusterConfig, node_id: int) -> int:
    """``kill -9`` one node (no controlled shutdown, as a crash); return the pid killed."""
    node = cluster.node(node_id)
    pid = _pid(node)
    if pid is None:
        raise RuntimeError(f"node {node_id} is not running")
    os.kill(pid, signal.SIGKILL)
    while _alive(pid):
        time.sleep(0.05)
    return pid


def quorum_leader(cluster: KafkaClusterConfig) -> int | None:
    """The node id of the active controller as the running nodes last recorded it (each voter's
    ``__cluster_metadata-0/quorum-state`` file names the leader of the newest epoch it knows);
    None when no running node knows one."""
    import json

    best: tuple[int, int] | None = None
    for node in cluster.nodes():
        if _pid(node) is None:
            continue
        path = node.home / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            continue
        leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
        if leader > 0 and (best is None or epoch > best[1]):
            best = (leader, epoch)
    return best[0] if best else None


def broker_status(cfg: BrokerConfig) -> dict[str, object]:
    """One broker or node: node id, client port, controller port, pid (None when stopped), whether
    its client port accepts connections, and its home."""
    pid = _pid(cfg)
    return {
        "node_id": cfg.node_id if isinstance(cfg, ClusterNode) else 1,
        "port": cfg.port,
        "controller_port": cfg.controller_port,
        "pid": pid,
        "listening": pid is not None and port_open(cfg.port),
        "home": str(cfg.home),
    }


def cluster_status(cluster: KafkaClusterConfig) -> list[dict[str, object]]:
    """``broker_status`` of every node."""
    return [broker_status(node) for node in cluster.nodes()]


def read_cluster(home: Path, heap: str = "512m") -> KafkaClusterConfig | None:
    """The cluster that ``cluster_up`` last started under ``home`` (from its ``cluster.json``)."""
    import json

    try:
        layout = json.loads((home / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return KafkaClusterConfig(
        home=home,
        brokers=int(layout["brokers"]),
        port=int(layout["port"]),
        controller_port=int(layout["controller_port"]),
        heap=heap,
    )


@contextmanager
def cluster_or(
    bootstrap: str | None, jars: JarSets, home: Path | None = None, brokers: int = 3, heap: str = "512m"
) -> Iterator[tuple[KafkaConnection, KafkaClusterConfig | None]]:
    """``broker_or`` for a cluster: the cluster at ``bootstrap``, or a throwaway local cluster of
    ``brokers`` nodes on free ports (under ``home`` or a temporary folder, removed afterwards),
    stopped on exit also after an error; yields the connection and the local cluster (None for a
    given ``bootstrap``)."""
    if bootstrap:
        yield KafkaConnection(bootstrap), None
        return
    base = _free_run(2 * brokers)
    cluster = KafkaClusterConfig(
        home=home or Path(tempfile.mkdtemp(prefix="siftstream-kafka-cluster-")),
        brokers=brokers,
        port=base,
        controller_port=base + brokers,
        heap=heap,
    )
    print(cluster_up(cluster, jars), file=sys.stderr)
    try:
        yield KafkaConnection(cluster.bootstrap), cluster
    finally:
        print(cluster_down(cluster), file=sys.stderr)
        if home is None:
            shutil.rmtree(cluster.home, ignore_errors=True)


def _free_run(n: int, tries: int = 50) -> int:
    """The first of ``n`` consecutive loopback ports that are all free now (held together while
    checked, as ``free_ports``)."""
    for _ in range(tries):
        (start,) = free_ports(1)
        if start + n > 65535:
            continue
        socks = []
        try:
            for p in range(start, start + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"found no {n} consecutive free loopback ports in {tries} tries")
