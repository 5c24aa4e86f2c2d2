"""A fresh start's subscriptions, read and planned in a process of their own while Spark starts.

A matching job started on an empty checkpoint must read the whole compacted subscriptions topic
in its first micro-batch before it matches an event, and Spark takes seconds to start (the JVM,
the session, the query and the plan of that batch). A :class:`HeadStart`, begun by
``siftstream match-job`` before the Spark session, reads the topic in a child process (spawned:
a new interpreter, so neither the driver's interpreter lock nor its memory is shared) from the
earliest offsets up to the partitions' ends at that moment (the *cut*), decodes the records by
the columnar fast path (``streaming.subscription_rows.fast_subscription_rows``: the cut is
lowered on a partition to its first record that the path would refer to the JVM) and plans them
(``PlannedRecords``). The child sends the plan back through a pipe and exits; a thread of the
driver receives it and applies it to a new ``SubscriptionTable``.

The first batch (:meth:`HeadStart.take`) uses it when its table is the empty table at the
earliest offsets (a fresh start) and its own end offsets are at or past the cut on every
partition: it then reads only the records from the cut on. Applying the records in order is
deterministic, so the table equals the one the batch would have built alone; the rejected
records' dead letters and the counts go out with the batch. Otherwise (a
``max_offsets_per_trigger`` below the cut, a failed read, a child that died) the batch reads as
it would have without it. docs/decisions/fresh-start-head-start.md.

Example: ``head = HeadStart.begin(cfg)`` (None unless ``cfg``'s checkpoint is fresh), then
``streaming.matching_job.run(spark, cfg, head_start=head)``; ``HeadStart(conn, topic, cut)``
reads up to a given cut instead of the ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.connection import KafkaConnection
from routing.matching.table import SubscriptionTable
from streaming import logs
from streaming.subscription_rows import PlannedRecords

if TYPE_CHECKING:
    from streaming.matching_job import MatchingConfig

__all__ = ["HeadStart", "HeadStartTable", "fresh"]

_log = logs.get("matching")


def fresh(query_checkpoint: Path) -> bool:
    """Whether a query's checkpoint folder has no micro-batch in Spark's offset log yet."""
    offsets = query_checkpoint / "offsets"
    return not (offsets.is_dir() and any(f.name.isdigit() for f in offsets.iterdir()))


@dataclass
class HeadStartTable:
    """What a head start planned: the table of the records below ``cut`` (partition -> offset)
    applied to an empty table, and the records' outcomes (``planned.changes`` emptied once
    applied)."""

    cut: dict[int, int]
    table: SubscriptionTable
    planned: PlannedRecords


def _child(conn: KafkaConnection, topic: str, cut: Mapping[int, int] | None, out: Any) -> None:
    """The head start's process: read, decode and plan; send ``("ok", cut, planned, seconds)``
    or ``("error", message)`` through ``out``."""
    try:
        from streaming.readers import partition_ends, read_range
        from streaming.subscription_rows import fast_subscription_rows

        started = time.monotonic()
        ends = dict(cut) if cut is not None else partition_ends(conn, [topic]).get(topic, {})
        raw = read_range(conn, topic, {}, ends) if ends else None
        read_s = time.monotonic() - started
        if raw is None:
            planned = PlannedRecords()
        else:
            rows, ends = fast_subscription_rows(raw, ends)
            del raw
            planned = PlannedRecords.of(rows)
            del rows
        out.send(("ok", ends, planned, (read_s, time.monotonic() - started)))
    except Exception as exc:  # the first batch reads the topic itself
        out.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        out.close()


class HeadStart:
    """See the module docstring."""

    def __init__(self, conn: KafkaConnection, topic: str, cut: Mapping[int, int] | None = None) -> None:
        import multiprocessing

        self.topic = topic
        self._result: HeadStartTable | None = None
        context = multiprocessing.get_context("spawn")  # a new interpreter: no lock or thread of ours
        receive, send = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_child,
            args=(conn, topic, None if cut is None else dict(cut), send),
            name="siftstream-head-start",
            daemon=True,
        )
        self._process.start()
        send.close()  # the child holds the other end: its exit ends the receive
        self._thread = threading.Thread(target=self._receive, args=(receive,), name="siftstream-head-start")
        self._thread.daemon = True
        self._thread.start()

    @classmethod
    def begin(cls, cfg: MatchingConfig) -> HeadStart | None:
        """A head start for ``cfg``'s job when its checkpoint is :func:`fresh`; else None."""
        return cls(cfg.conn, cfg.subscriptions_topic) if fresh(cfg.query_checkpoint) else None

    def _receive(self, receive: Any) -> None:
        try:
            message = receive.recv()
        except EOFError:
            message = ("error", f"the process ended without an answer (exit code {self._process.exitcode})")
        finally:
            receive.close()
        self._process.join(10)
        if message[0] != "ok":
            _log.warning(f"the head start's read of {self.topic} failed; the first batch reads it: {message[1]}")
            return
        _, cut, planned, (read_s, total_s) = message
        table = SubscriptionTable()
        table.apply(planned.changes)
        planned.changes = []
        self._result = HeadStartTable(cut, table, planned)
        _log.info(
            f"head start: {planned.records:,} subscription records below {cut} read in {read_s:.1f} s, "
            f"decoded and planned in {total_s:.1f} s ({len(table):,} active subscriptions)"
        )

    def take(self, end: Mapping[int, int], timeout_s: float = 900.0) -> HeadStartTable | None:
        """The planned table when ``end`` (the first batch's end offsets of the topic) is at or
        past its cut on every partition; None otherwise, or when it failed or is not done within
        ``timeout_s`` (the process is then stopped). Taken once."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            _log.warning(f"the head start took more than {timeout_s:.0f} s; the first batch reads {self.topic}")
            self._process.kill()
        result, self._result = self._result, None
        if result is None:
            return None
        if any(end.get(p, 0) < o for p, o in result.cut.items()):
            _log.info(f"the head start's cut {result.cut} is past the first batch's end {dict(end)}: not used")
            return None
        return result
