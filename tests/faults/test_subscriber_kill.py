"""Kill -9 a subscriber client (a real ``Subscriber`` in a child process) while it reads its
channel, and start it again with the same identity and ``resume=True``.

Invariants (issue 25's subscriber fault; docs/guide/faults.md): every matching event that reached
the channel after the first life subscribed is handed to the program's callback (nothing lost);
within one life no event comes twice; across the two lives the only repeats are events of the
first life's last second (the position is committed every second), each with the same
``event_id`` and the same content (at least once, duplicates identified by ``event_id``); no
event that the filter rejects is ever handed over.

The delivery stage is played by this test: it writes ``ChannelEvents`` records (and some single
``Event`` records) to the lobby channel, where a subscription that no installed assignment
places reads (docs/reference/delivery.md), at a steady pace before, during and after the kill.
The expectation comes from the filter applied here to the events written, not from the client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from infra.connection import KafkaConnection
from infra.kafka import KafkaClusterConfig
from infra.topics import ensure_topics
from producers.events import EventGenerator
from routing.channels.assignment import LOBBY
from routing.matching.language import parse_filter
from schemas.codec import codec_for
from schemas.topics import channel_spec, channel_topic

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
FILTER = "price < 80"
PHASES = (("before", 40), ("down", 20), ("after", 20))  # channel records written in each phase
PER_RECORD = 25  # events per ChannelEvents record

# the program: a Subscriber whose callback appends each event it is handed, one JSON line, to a file
CHILD = """
import json, sys
from streaming.client import Subscriber
bootstrap, prefix, out = sys.argv[1:4]
sub = Subscriber(bootstrap, topic_prefix=prefix, subscriber_id="u-crash", log=sys.stderr)
stream = sub.subscribe(sys.argv[4], subscription_id="s-crash", resume=True)
with open(out, "a") as f:
    for event in stream:
        f.write(json.dumps({"event_id": event["event_id"], "attributes": event["attributes"]}) + "\\n")
        f.flush()
"""


class Channel(threading.Thread):
    """Writes each phase's records to the lobby channel, one every 0.1 s, once ``go[phase]`` is set."""

    def __init__(self, conn: KafkaConnection, prefix: str) -> None:
        super().__init__(daemon=True)
        self.topic = channel_topic(LOBBY, prefix)
        self.producer = Producer(conn.confluent(**{"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
        self.go = {name: threading.Event() for name, _ in PHASES}
        self.done = {name: threading.Event() for name, _ in PHASES}
        self.events: list[dict[str, Any]] = []
        self.errors: list[Any] = []

    def run(self) -> None:
        event_codec, batch_codec = codec_for("Event"), codec_for("ChannelEvents")
        gen = EventGenerator(publishers=3, seed=27)
        for name, records in PHASES:
            self.go[name].wait()
            for r in range(records):
                batch = gen.batch(PER_RECORD, 1_700_000_000_000 + len(self.events))
                for i, event in enumerate(batch):
                    event["event_id"] = f"{name}-{r}-{i}"
                values = [event_codec.encode(e) for e in batch]
                if r % 5 == 4:  # now and then single Event records, as a channel may also carry
                    for e, v in zip(batch, values, strict=True):
                        self.producer.produce(self.topic, v, e["event_id"], on_delivery=self._check)
                else:
                    value = batch_codec.encode({"events": values})
                    self.producer.produce(self.topic, value, batch[0]["event_id"], on_delivery=self._check)
                self.producer.flush(30)
                self.events += batch
                time.sleep(0.1)
            self.done[name].set()

    def _check(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)


def _start(conn: KafkaConnection, prefix: str, out: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-c", CHILD, conn.bootstrap_servers, prefix, str(out), FILTER],
            stderr=err,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_killed_subscriber_resumes_its_channel(
    kafka_cluster: tuple[KafkaConnection, KafkaClusterConfig], tmp_path: Path
) -> None:
    conn, _ = kafka_cluster
    prefix = f"c{uuid.uuid4().hex[:8]}."
    ensure_topics(conn, prefix)
    ensure_topics(conn, prefix, specs=(channel_spec(LOBBY),))
    out, log = tmp_path / "handed.jsonl", tmp_path / "client.log"
    channel = Channel(conn, prefix)
    channel.start()
    # the client's consumer group (the subscription id names it), to read its committed position
    group = Consumer(conn.confluent(**{"group.id": "siftstream-client-s-crash", "enable.auto.commit": False}))

    def committed() -> int:
        return int(group.committed([TopicPartition(channel.topic, 0)], timeout=10)[0].offset)

    first = _start(conn, prefix, out, log)
    second: subprocess.Popen[bytes] | None = None
    try:
        _wait(lambda: "[subscribe] s-crash" in log.read_text() or first.poll() is not None, 60, "a subscription")
        assert first.poll() is None, log.read_text()
        channel.go["before"].set()
        # mid-stream (the channel is still being written), once the client committed a position
        _wait(lambda: len(_lines(out)) >= 150 and committed() > 0, 90, "150 events and a committed position")
        os.killpg(first.pid, signal.SIGKILL)
        seen_committed = committed()
        first.wait(30)
        first_life = _lines(out)
        channel.go["down"].set()
        channel.done["before"].wait(60)
        channel.done["down"].wait(60)
        second = _start(conn, prefix, out, log)
        _wait(lambda: log.read_text().count("[subscribe] s-crash") == 2 or second.poll() is not None, 60, "it again")
        assert second.poll() is None, log.read_text()
        channel.go["after"].set()
        channel.join(60)
        assert not channel.errors, channel.errors[:3]
        filt = parse_filter(FILTER)
        want = {e["event_id"]: e["attributes"] for e in channel.events if filt.matches(e["attributes"])}
        _wait(lambda: {h["event_id"] for h in _lines(out)} >= set(want), 90, "every matching event")
    finally:
        group.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    handed = _lines(out)
    second_life = handed[len(first_life) :]
    subscribes = [ln for ln in log.read_text().splitlines() if ln.startswith("[subscribe] s-crash")]
    again = Counter(h["event_id"] for h in second_life) & Counter(h["event_id"] for h in first_life)
    print(
        f"\ninjected: kill -9 of the subscriber process (pid {first.pid}) after it handed over {len(first_life)} "
        f"events, mid-stream; {PHASES[1][1]} channel records written while it was down; restarted with the same "
        f"subscriber and subscription ids and resume=True\n"
        f"counted: {len(channel.events)} events written to the channel in "
        f"{sum(n for _, n in PHASES)} records, {len(want)} matching the filter; handed over {len(first_life)} in "
        f"the first life and {len(second_life)} in the second, {len({h['event_id'] for h in handed})} distinct; "
        f"{sum(again.values())} repeated across the lives; the position committed before the kill: "
        f"{seen_committed}; the lives subscribed as: {subscribes}"
    )
    assert "(resumed)" not in subscribes[0] and subscribes[1].endswith("(resumed)"), subscribes
    by_id: dict[str, dict[str, Any]] = {}
    for life in (first_life, second_life):
        counts = Counter(h["event_id"] for h in life)
        assert max(counts.values()) == 1, f"repeated within one life: {counts.most_common(3)}"
    for h in handed:
        assert h["event_id"] in want, f"not matching the filter: {h}"
        assert by_id.setdefault(h["event_id"], h) == h, f"a repeat with other content: {h}"
    assert set(by_id) == set(want), f"lost: {sorted(set(want) - set(by_id))[:10]}"
    # the second life started where the first one's committed position was (nothing lost above
    # says: not at the channel's end), not at its start
    resumed_at = int(subscribes[1].split(" from offset ")[1].split()[0])
    assert resumed_at >= seen_committed > 0, (resumed_at, seen_committed)
