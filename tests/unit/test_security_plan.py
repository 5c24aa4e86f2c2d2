"""The ACL table of infra/security.py (``role_grants``) against the rules of issue 25 and against
the table docs/guide/security.md shows: publishers write events only; subscribers read only
their channels and write only receipts and their own inbox; jobs write the outputs and nothing
that publishers or subscribers write. The broker tests (tests/integration/test_security.py)
check that Kafka enforces these grants; this checks the grants themselves."""

from __future__ import annotations

from pathlib import Path

from infra.security import inbox_topic, ownership_error, role_grants
from schemas.topics import INPUT_TOPICS, OUTPUT_TOPICS, SUBSCRIPTIONS_TOPIC, TOPICS, channel_topic

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "t."


def _ops(role: str, channels: list[int] | None = None) -> set[tuple[str, str, str]]:
    return {
        (g.operation, g.kind, g.name + ("*" if g.pattern == "prefixed" else ""))
        for g in role_grants(role, PREFIX, channels or [])
    }


def _names(role: str, operation: str, channels: list[int] | None = None) -> set[str]:
    return {name for op, kind, name in _ops(role, channels) if op == operation and kind == "topic"}


def test_every_grant_names_the_deployments_topics() -> None:
    for role in ("publisher", "jobs", "subscriber-alice"):
        for grant in role_grants(role, PREFIX, [1]):
            assert grant.kind != "topic" or grant.name.startswith(PREFIX), grant


def test_publishers_write_events_only_and_read_nothing() -> None:
    assert _ops("publisher") == {
        ("WRITE", "topic", PREFIX + "siftstream.events.v1"),
        ("DESCRIBE", "topic", PREFIX + "siftstream.events.v1"),
    }


def test_subscribers_read_only_their_channels_and_write_only_receipts_and_their_inbox() -> None:
    reads = _names("subscriber-alice", "READ", [2, 5])
    assert reads == {PREFIX + "siftstream.channels.v1", channel_topic(2, PREFIX), channel_topic(5, PREFIX)}
    writes = _names("subscriber-alice", "WRITE", [2, 5])
    assert writes == {PREFIX + "siftstream.receipts.v1", inbox_topic("alice", PREFIX)}
    assert not _names("subscriber-alice", "CREATE") and not _names("subscriber-alice", "DELETE")
    # two subscribers share nothing they may write
    assert not writes & _names("subscriber-bob", "WRITE") - {PREFIX + "siftstream.receipts.v1"}


def test_jobs_write_the_outputs_and_no_input_but_the_gateways_table() -> None:
    writes = _names("jobs", "WRITE")
    outputs = {PREFIX + t.name for t in OUTPUT_TOPICS}
    assert outputs <= writes
    assert writes - outputs == {PREFIX + SUBSCRIPTIONS_TOPIC, PREFIX + "siftstream.channel.v1.*"}
    assert not writes & {PREFIX + t.name for t in INPUT_TOPICS if t.name != SUBSCRIPTIONS_TOPIC}
    assert _names("jobs", "READ") >= {PREFIX + name for name in TOPICS}
    assert _names("jobs", "CREATE") == {PREFIX + "siftstream.channel.v1.*"}


def test_the_guide_names_every_grant() -> None:
    """docs/guide/security.md's table: each role's row names each of its topics and groups (with
    ``<id>`` for the subscriber id and ``<c>`` for a channel) and each operation."""
    rows = {
        line.split("|")[1].strip().strip("`").split(" ")[0]: line
        for line in (ROOT / "docs/guide/security.md").read_text().splitlines()
        if line.startswith("| `")
    }
    for role, doc_role in (("publisher", "publisher"), ("subscriber-alice", "subscriber-<id>"), ("jobs", "jobs")):
        row = rows[doc_role.strip("`")]
        for grant in role_grants(role, "", [7]):
            name = grant.name.replace("alice", "<id>").replace("v1.7", "v1.<c>")
            if role == "jobs" and grant.name in TOPICS:  # the row speaks of them by kind
                if grant.operation in ("READ", "DESCRIBE"):
                    name = "every project topic"
                elif grant.name == SUBSCRIPTIONS_TOPIC:
                    name = "the subscriptions table"
                else:  # "the output topics (matches, ...)"
                    name = grant.name.removeprefix("siftstream.").removesuffix(".v1")
            if grant.pattern == "prefixed":
                name += "*"
            assert name in row, (role, grant)
            assert grant.operation in row, (role, grant)


def test_a_subscriber_owns_only_its_own_subscription_ids() -> None:
    assert ownership_error("sub-1a", b"sub-1a-0123456789ab", {"subscriber_id": "sub-1a"}) is None
    assert ownership_error("sub", b"sub-1a-0123456789ab", None) is not None  # a prefix of another's id
    assert ownership_error("sub-1a", b"sub-1a-", None) is not None
    assert ownership_error("sub-1a", None, None) is not None
