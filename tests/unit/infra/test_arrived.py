"""``infra.connection.arrived``: wait only for the first message, then take what is there.

The consumer here is a stand-in that keeps a queue of messages and records how it was asked,
because the property under test is the calls made (a ``consume`` with a timeout holds early
messages until the batch fills or the timeout passes: ``bench/consume_wait.py`` measures that on
a real broker); the integration tests read the real broker through ``arrived`` throughout.
"""

from __future__ import annotations

from collections import deque

from infra.connection import arrived


class Queue:
    """Messages already fetched; ``poll``/``consume`` as confluent-kafka's, recording timeouts."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = deque(messages)
        self.calls: list[tuple[str, float]] = []

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", timeout))
        return self.messages.popleft() if self.messages else None

    def consume(self, n: int, timeout: float) -> list[str]:
        self.calls.append(("consume", timeout))
        return [self.messages.popleft() for _ in range(min(n, len(self.messages)))]


def test_waits_for_the_first_only_and_takes_the_rest_without_waiting() -> None:
    q = Queue(["a", "b", "c"])
    assert arrived(q, 500, 0.5) == ["a", "b", "c"]
    assert q.calls == [("poll", 0.5), ("consume", 0)]


def test_nothing_there_is_an_empty_list_after_one_wait() -> None:
    q = Queue([])
    assert arrived(q, 500, 0.25) == []
    assert q.calls == [("poll", 0.25)]


def test_at_most_max_messages_in_order() -> None:
    q = Queue([str(i) for i in range(10)])
    assert arrived(q, 4, 1.0) == ["0", "1", "2", "3"]
    assert arrived(q, 1, 1.0) == ["4"]
    assert arrived(q, 100, 1.0) == ["5", "6", "7", "8", "9"]


def test_a_negative_timeout_does_not_wait() -> None:
    q = Queue(["a"])
    assert arrived(q, 10, -3.0) == ["a"]
    assert q.calls[0] == ("poll", 0.0)
