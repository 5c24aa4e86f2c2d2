"""Shared fixtures. Tiers by directory: unit (pure), spark (local SparkSession), integration
(the real Kafka broker that this test run starts on free ports and stops at the end), faults
(a 3-node Kafka cluster of their own, with nodes killed and restarted: tests/faults/conftest.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.connection import KafkaConnection

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "spark" in parts:
            item.add_marker(pytest.mark.spark)
        if "integration" in parts:
            item.add_marker(pytest.mark.kafka)
        if "faults" in parts:
            item.add_marker(pytest.mark.faults)
    # the fault tier last: Spark's pooled Kafka clients keep trying its stopped cluster's nodes for
    # minutes (warnings only), which other tiers' logs need not show
    items.sort(key=lambda item: "faults" in Path(str(item.fspath)).parts)


@pytest.fixture(scope="session")
def jars():  # type: ignore[no-untyped-def]
    from infra.jars import ensure_jars

    return ensure_jars()


@pytest.fixture(scope="session")
def spark(jars):  # type: ignore[no-untyped-def]
    from streaming.session import SparkConfig, build_session

    session = build_session(SparkConfig(app_name="siftstream-tests"), jars)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_conn(jars, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnection]:
    """The broker for this test run: started here on free ports, stopped at the end (also when
    tests fail). SIFTSTREAM_TEST_BOOTSTRAP points the tests at a running broker instead."""
    from infra import kafka

    with kafka.broker_or(
        os.environ.get("SIFTSTREAM_TEST_BOOTSTRAP"), jars, home=tmp_path_factory.mktemp("kafka")
    ) as conn:
        yield conn


@pytest.fixture
def topic_prefix(kafka_conn: KafkaConnection) -> str:
    """A fresh set of every SiftStream topic for one test, so tests never see each other's data."""
    from infra.topics import ensure_topics

    prefix = f"t{uuid.uuid4().hex[:10]}."
    ensure_topics(kafka_conn, prefix)
    return prefix


@pytest.fixture
def standalone_cluster(jars, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A loopback Spark standalone cluster (a master and one 2-core worker on free ports, under
    ``tmp_path / "spark"``), stopped after the test whatever happens."""
    from infra import spark_cluster
    from infra.kafka import free_ports

    port, webui_port, worker_webui_port = free_ports(3)
    cluster = spark_cluster.ClusterConfig(
        home=tmp_path / "spark",
        port=port,
        webui_port=webui_port,
        worker_webui_port=worker_webui_port,
        worker_cores=2,
        worker_memory="1g",
    )
    spark_cluster.up(cluster)
    try:
        yield cluster
    finally:
        spark_cluster.down(cluster)
