"""The fault tier: a 3-node KRaft cluster on free loopback ports, started once for the tier's
tests and stopped at the end (docs/guide/faults.md). Each test may kill and restart nodes; it
leaves every node running again when it ends."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from infra.connection import KafkaConnection
from infra.kafka import KafkaClusterConfig
from routing.matching.index import BruteForceIndex


@pytest.fixture(scope="session")
def kafka_cluster(
    jars, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KafkaConnection, KafkaClusterConfig]]:  # type: ignore[no-untyped-def]
    from infra import kafka

    # HOME/kafka-cluster, as `siftstream infra ... --home HOME` finds it
    home = tmp_path_factory.mktemp("faults") / "kafka-cluster"
    with kafka.cluster_or(None, jars, home=home, brokers=3) as (conn, cluster):
        assert cluster is not None
        yield conn, cluster


def expected_matches(filters: Mapping[str, str], published: Mapping[str, dict[str, Any]]) -> dict[str, list[str]]:
    """The oracle of the matching fault tests: per event id of ``published`` (event id -> Event
    record), the ids of the ``filters`` (subscription id -> filter text) that match its
    attributes, as ``BruteForceIndex`` finds them (the ``subscription_ids`` its Match record must
    hold)."""
    oracle = BruteForceIndex()
    for sid, filt in filters.items():
        oracle.add(sid, filt)
    found = oracle.match([e["attributes"] for e in published.values()]).all_ids()
    return dict(zip(published, found, strict=True))
