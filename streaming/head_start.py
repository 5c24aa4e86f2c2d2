"""A fresh start's subscriptions, read and planned in a process of their own while Spark starts.

A matching job started on an empty checkpoint must read the whole compacted subscriptions topic
in its first micro-batch before it matches an event, and Spark takes seconds to start (the JVM,
the session, the query and the plan of that batch). A :class:`HeadStart`, begun by
``siftstream match-job`` before the Spark session, reads the topic in child processes (spawned:
new interpreters, so neither the driver's interpreter lock nor its memory is shared; one per core,
at most :data:`MAX_PROCESSES`, each reading a contiguous :func:`share` of the partitions) from
the earliest offsets up to the partitions' ends at that moment (the *cut*), decodes the records
by the columnar fast path (``streaming.subscription_rows.fast_subscription_rows``: the cut is
lowered on a partition to its first record that the path would refer to the JVM) and plans them
(``PlannedRecords``). Each child sends its plan back through a pipe and exits; a thread of the
driver receives the plans in partition order and applies them to a new ``SubscriptionTable``,
which is the (partition, offset) order of the records.

The first batch (:meth:`HeadStart.take`) uses it when its table is the empty table at the
earliest offsets (a fresh start) and its own end offsets are at or past the cut on every
partition: it then reads only the records from the cut on. Applying the records in order is
deterministic, so the table equals the one the batch would have built alone; the rejected
records' dead letters and the counts go out with the batch. Otherwise (a
``max_offsets_per_trigger`` below the cut, a failed read, a child that died, children that saw
different partitions) the batch reads as it would have without it. docs/decisions/fresh-start-head-start.md.

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

__all__ = ["MAX_PROCESSES", "HeadStart", "HeadStartTable", "fresh", "share"]

_log = logs.get("matching")

MAX_PROCESSES = 4
"""At most this many processes read a head start (one per core by default), each a contiguous
share of the partitions."""


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


def share(partitions: list[int], k: int, n: int) -> list[int]:
    """The ``k``-th of ``n`` contiguous groups of ``partitions`` (sorted), as even as they go; the
    groups in ``k`` order are the partitions in order.

    >>> [share([0, 1, 2], k, 2) for k in range(2)]
    [[0], [1, 2]]
    >>> share([0], 0, 2)
    []
    """
    ordered = sorted(partitions)
    return ordered[k * len(ordered) // n : (k + 1) * len(ordered) // n]


def _child(conn: KafkaConnection, topic: str, cut: Mapping[int, int] | None, k: int, n: int, out: Any) -> None:
    """One of a head start's ``n`` processes: read, decode and plan the ``k``-th :func:`share` of
    the topic's partitions; send ``("ok", every partition, cut, planned, seconds)`` or
    ``("error", message)`` through ``out``."""
    try:
        from streaming.readers import partition_ends, read_range
        from streaming.subscription_rows import fast_subscription_rows

        started = time.monotonic()
        ends = dict(cut) if cut is not None else partition_ends(conn, [topic]).get(topic, {})
        mine = {p: ends[p] for p in share(list(ends), k, n)}
        raw = read_range(conn, topic, {}, mine) if mine else None
        read_s = time.monotonic() - started
        if raw is None:
            planned = PlannedRecords()
        else:
            rows, mine = fast_subscription_rows(raw, mine)
            del raw
            planned = PlannedRecords.of(rows)
            del rows
        out.send(("ok", sorted(ends), mine, planned, (read_s, time.monotonic() - started)))
    except Exception as exc:  # the first batch reads the topic itself
        out.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        out.close()


class HeadStart:
    """See the module docstring."""

    def __init__(
        self, conn: KafkaConnection, topic: str, cut: Mapping[int, int] | None = None, processes: int | None = None
    ) -> None:
        import multiprocessing
        import os

        self.topic = topic
        self._result: HeadStartTable | None = None
        n = processes if processes is not None else max(1, min(os.cpu_count() or 1, MAX_PROCESSES))
        context = multiprocessing.get_context("spawn")  # a new interpreter: no lock or thread of ours
        self._processes, receivers = [], []
        for k in range(n):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_child,
                args=(conn, topic, None if cut is None else dict(cut), k, n, send),
                name=f"siftstream-head-start-{k}",
                daemon=True,
            )
            process.start()
            send.close()  # the child holds the other end: its exit ends the receive
            self._processes.append(process)
            receivers.append(receive)
        self._thread = threading.Thread(target=self._receive, args=(receivers,), name="siftstream-head-start")
        self._thread.daemon = True
        self._thread.start()

    @classmethod
    def begin(cls, cfg: MatchingConfig) -> HeadStart | None:
        """A head start for ``cfg``'s job when its checkpoint is :func:`fresh`; else None."""
        return cls(cfg.conn, cfg.subscriptions_topic) if fresh(cfg.query_checkpoint) else None

    def _stop(self) -> None:
        for process in self._processes:
            process.kill()
        for process in self._processes:
            process.join(10)

    def _answer(self, k: int, receive: Any) -> tuple[Any, ...]:
        try:
            message = receive.recv()
        except EOFError:
            message = ("error", f"the process ended without an answer (exit code {self._processes[k].exitcode})")
        finally:
            receive.close()
        self._processes[k].join(10)
        return tuple(message)

    def _receive(self, receivers: list[Any]) -> None:
        """Apply the processes' plans in partition order, each as it arrives: the table the
        records below the cut make in (partition, offset) order."""
        table, planned, cut = SubscriptionTable(), PlannedRecords(), {}
        seen: list[int] | None = None
        read_s = total_s = 0.0
        for k, receive in enumerate(receivers):
            message = self._answer(k, receive)
            if message[0] == "ok" and seen is not None and message[1] != seen:
                message = ("error", f"its processes saw different partitions: {seen} and {message[1]}")
            if message[0] != "ok":
                _log.warning(f"the head start's read of {self.topic} failed; the first batch reads it: {message[1]}")
                self._stop()
                return
            _, seen, part_cut, part, (part_read_s, part_total_s) = message
            table.apply(part.changes)
            cut.update(part_cut)
            planned.rejected += part.rejected
            planned.skipped += part.skipped
            planned.records += part.records
            read_s, total_s = max(read_s, part_read_s), max(total_s, part_total_s)
        table.snapshot(bridge=False)  # no reader has seen it: its 10^6 deltas need not be kept
        self._result = HeadStartTable(cut, table, planned)
        _log.info(
            f"head start: {planned.records:,} subscription records below {cut} read in {read_s:.1f} s, "
            f"decoded and planned in {total_s:.1f} s by {len(receivers)} processes "
            f"({len(table):,} active subscriptions)"
        )

    def take(self, end: Mapping[int, int], timeout_s: float = 900.0) -> HeadStartTable | None:
        """The planned table when ``end`` (the first batch's end offsets of the topic) is at or
        past its cut on every partition; None otherwise, or when it failed or is not done within
        ``timeout_s`` (the process is then stopped). Taken once."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            _log.warning(f"the head start took more than {timeout_s:.0f} s; the first batch reads {self.topic}")
            self._stop()
        result, self._result = self._result, None
        if result is None:
            return None
        if any(end.get(p, 0) < o for p, o in result.cut.items()):
            _log.info(f"the head start's cut {result.cut} is past the first batch's end {dict(end)}: not used")
            return None
        return result
