"""How long a record waits in a confluent-kafka consumer before the reader gets it: a batch read
with a timeout (``Consumer.consume(n, timeout)``) against ``infra.connection.arrived``.

``consume(n, timeout)`` returns when it holds ``n`` messages or when ``timeout`` has passed. A
reader that asks for a batch of 500 with a timeout of 0.5 s while records trickle in (a
subscriber's channel, a job's reads to an offset, the follower's catch-up) therefore holds each
record for up to the timeout. ``arrived`` polls for the first message and then takes what has
already been fetched without waiting.

Workload: a local 1-node broker (``infra.kafka``), a one-partition topic, one record every 0.3 s
for 6 s carrying its send time (the producer flushes each); a consumer assigned at the topic's
end reads with each method in turn, with ``fetch.wait.max.ms`` 50 as the subscriber client's.
Printed per method: records read, the median and largest wait from send to the reader's hand.

Run: ``.venv/bin/python bench/consume_wait.py [--records 20] [--every 0.3] [--timeout 0.5]``
(about 20 s). Readings: docs/results/delivery.md ("a record's wait in the consumer").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from infra import kafka
from infra.connection import arrived
from infra.jars import ensure_jars


def waits(bootstrap: str, topic: str, method: str, args: argparse.Namespace) -> list[float]:
    """Milliseconds from each record's send to its read by ``method`` (``consume`` or ``arrived``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "fetch.wait.max.ms": 50}
    )
    consumer.assign([TopicPartition(topic, 0, -1)])  # the end: only records sent from now on
    arrived(consumer, 1, 1.0)  # the assignment takes effect

    def send() -> None:
        for _ in range(args.records):
            time.sleep(args.every)
            producer.produce(topic, repr(time.time()).encode())
            producer.flush()

    sender = threading.Thread(target=send)
    sender.start()
    out: list[float] = []
    stop = time.time() + args.records * args.every + 2 * args.timeout + 1
    while len(out) < args.records and time.time() < stop:
        if method == "consume":
            msgs = consumer.consume(500, args.timeout)
        else:
            msgs = arrived(consumer, 500, args.timeout)
        now = time.time()
        out += [(now - float(m.value())) * 1000 for m in msgs if m.error() is None]
    sender.join()
    consumer.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20)
    ap.add_argument("--every", type=float, default=0.3, help="seconds between records")
    ap.add_argument("--timeout", type=float, default=0.5, help="each read's timeout, s")
    args = ap.parse_args()
    with kafka.broker_or(None, ensure_jars(), heap="512m") as conn:
        topic = f"bench-wait-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": conn.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
        print(
            f"workload: one record every {args.every:g} s, {args.records} records, a one-partition topic on a "
            f"local broker; reads of up to 500 with a {args.timeout:g} s timeout"
        )
        for method, label in (("consume", f"consume(500, {args.timeout:g})"), ("arrived", "arrived")):
            got = waits(conn.bootstrap_servers, topic, method, args)
            print(
                f"  {label}: {len(got)} records, wait from send to read: median {statistics.median(got):,.0f} ms, "
                f"max {max(got):,.0f} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
