"""The client commands of the ``siftstream`` command line: ``subscribe`` prints the events that
match a filter as JSON lines, ``publish`` sends JSON events (docs/guide/clients.md). The parsers
are added by ``streaming.cli``, which owns the connection options.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.connection import KafkaConnection

__all__ = ["add_client_parsers", "cmd_publish", "cmd_subscribe"]

Connect = Callable[[argparse.Namespace], "KafkaConnection"]


def cmd_subscribe(args: argparse.Namespace) -> int:
    """Subscribe to a filter and print each matching event as one JSON line (docs/guide/clients.md)."""
    from streaming.client import Subscriber

    with Subscriber(
        conn=args.connect(args),
        topic_prefix=args.topic_prefix,
        subscriber_id=args.subscriber,
        home_broker=args.broker,
        log=sys.stderr,
        inbox=args.inbox,
    ) as subscriber:
        sub = subscriber.subscribe(
            args.filter,
            deadline_ms=args.deadline_ms,
            min_reliability=args.min_reliability,
            subscription_id=args.subscription,
        )
        try:
            for event in sub.events(max_events=args.max_events, timeout_s=args.timeout_s):
                print(json.dumps(event), flush=True)
        finally:  # also on Ctrl-C: what was read, yielded and dropped
            print(f"[subscribe] {json.dumps(sub.counters.as_dict())}", file=sys.stderr)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Publish JSON events, one per line (docs/guide/clients.md); exit 2 if any line was bad."""
    import contextlib

    from streaming.client import Publisher

    bad = 0
    with contextlib.ExitStack() as stack:
        src: Any = (
            stack.enter_context(open(args.file, encoding="utf-8-sig")) if args.file and args.file != "-" else sys.stdin
        )
        pub = stack.enter_context(
            Publisher(conn=args.connect(args), topic_prefix=args.topic_prefix, publisher_id=args.publisher)
        )
        where = args.file if args.file and args.file != "-" else "stdin"
        for number, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                pub.publish_json(json.loads(line))
            except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
                bad += 1
                print(f"siftstream: {where}:{number}: {exc}", file=sys.stderr)
    print(f"{pub.published} events published to {pub.topic} as {pub.publisher_id}; {bad} bad lines skipped")
    return 2 if bad else 0


def add_client_parsers(sub: Any, common: Callable[[argparse.ArgumentParser], None], connection: Connect) -> None:
    """``siftstream subscribe`` and ``siftstream publish``: the client library on the command line.
    ``common`` adds the connection options every command takes; ``connection`` turns them into the
    cluster to use (``streaming.cli``), kept in the parsed arguments as ``connect``."""
    p = sub.add_parser(
        "subscribe",
        help="subscribe to a filter; print each matching event as a JSON line",
        description="Registers an atomic subscription, follows its delivery channel and prints each matching "
        "event as one JSON line on stdout (progress on stderr); unsubscribes when it stops. "
        "Guide: docs/guide/clients.md; protocol: docs/reference/delivery.md",
    )
    common(p)
    p.add_argument("--filter", required=True, help="the filter, e.g. \"price < 120 and symbol = 'IBM'\"")
    p.add_argument("--subscriber", help="the subscriber id (default: a random one)")
    p.add_argument("--subscription", help="the subscription id (default: a random one)")
    p.add_argument("--broker", help="the subscriber's home broker in the overlay")
    p.add_argument(
        "--inbox",
        action="store_true",
        help="write the subscription to the subscriber's own inbox topic (secured: docs/guide/security.md)",
    )
    p.add_argument("--deadline-ms", type=int, help="QoS wish: events within this many ms of publication")
    p.add_argument("--min-reliability", type=float, help="QoS wish: the fraction delivered in time, 0..1")
    p.add_argument("--max-events", type=int, help="stop after this many events (default: never)")
    p.add_argument("--timeout-s", type=float, help="stop after this many seconds (default: never)")
    p.set_defaults(func=cmd_subscribe, connect=connection)

    p = sub.add_parser(
        "publish",
        help="publish JSON events, one per line, from stdin or a file",
        description="Publishes events given as JSON lines (the JSON view: attributes required; event_id, "
        "publisher_id, published_at, lifetime_ms optional) to the events topic. Bad lines are reported on "
        "stderr with their numbers and skipped; exit 2 if there was one. Guide: docs/guide/clients.md",
    )
    common(p)
    p.add_argument("--file", help="the JSON Lines file (default: stdin)")
    p.add_argument("--publisher", help="the publisher id of events without one (default: a random one)")
    p.set_defaults(func=cmd_publish, connect=connection)
