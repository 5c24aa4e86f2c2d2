"""A simple built-in event generator (stock-trade-like content), deterministic for a seed.

>>> gen = EventGenerator(publishers=2, seed=7)
>>> batch = gen.batch(3, start_ms=1_000)
>>> [e["event_id"] for e in batch]
['p0-0', 'p1-0', 'p0-1']
>>> sorted(batch[0]["attributes"])
['exchange', 'price', 'region', 'sector', 'symbol', 'urgent', 'venue_ts', 'volume']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from producers.columns import Attr, EventColumns, Text, Vocab

__all__ = ["SYMBOLS", "EventGenerator"]

SYMBOLS = (
    "IBM",
    "AAPL",
    "MSFT",
    "GOOG",
    "AMZN",
    "ORCL",
    "SAP",
    "INTC",
    "CSCO",
    "NVDA",
    "TSLA",
    "META",
    "ADBE",
    "CRM",
    "QCOM",
    "TXN",
    "AVGO",
    "AMD",
    "MU",
    "HPQ",
)
EXCHANGES = ("NYSE", "NASDAQ", "LSE", "XETRA")
SECTORS = ("tech", "retail", "energy", "finance")
REGIONS = ("us", "eu", "asia")


class EventGenerator:
    """Events from ``publishers`` round-robin publishers with Zipf-skewed symbols.

    Parameters
    ----------
    publishers : int
        Number of publishers (``p0`` ...); each numbers its events from 0.
    lifetime_ms : int
        Lifetime given to every event.
    seed : int
        All randomness comes from it.
    note_len : int
        Length of an extra free-text ``note`` attribute (0: none); sizes events for benchmarks.
    first_publisher : int
        Number of the first publisher (``p<first_publisher>``): generators with disjoint
        publisher ranges produce disjoint event ids.
    """

    def __init__(
        self, publishers: int = 8, lifetime_ms: int = 1000, seed: int = 0, note_len: int = 0, first_publisher: int = 0
    ) -> None:
        if publishers < 1:
            raise ValueError("publishers must be >= 1")
        self.publishers = publishers
        self.first_publisher = first_publisher
        self.lifetime_ms = lifetime_ms
        self._rng = np.random.default_rng(seed)
        self._count = 0
        ranks = np.arange(1, len(SYMBOLS) + 1)
        self._symbol_p = (1.0 / ranks) / np.sum(1.0 / ranks)
        letters = "abcdefghijklmnopqrstuvwxyz     "
        self._notes = (
            ["".join(letters[int(c)] for c in self._rng.integers(0, len(letters), note_len)) for _ in range(64)]
            if note_len
            else []
        )

    def draw(self, n: int) -> dict[str, np.ndarray]:
        """The random content of the next ``n`` events: symbol codes, prices, volumes, exchange
        codes, urgency."""
        rng = self._rng
        return {
            "symbol": rng.choice(len(SYMBOLS), size=n, p=self._symbol_p),
            "price": np.round(rng.lognormal(4.5, 0.4, size=n), 2),
            "volume": rng.integers(1, 10_000, size=n),
            "exchange": rng.integers(0, len(EXCHANGES), size=n),
            "urgent": rng.random(n) < 0.05,
        }

    def build(self, drawn: dict[str, np.ndarray], times: np.ndarray) -> EventColumns:
        """Events with the ``drawn`` content published at ``times`` (ms), numbered on from the last batch."""
        n = len(times)
        k = self._count + np.arange(n)
        pub = Vocab.numbered("p", self.publishers, k % self.publishers, self.first_publisher)
        sym, exch = drawn["symbol"], drawn["exchange"]
        attrs = [
            Attr("symbol", "string", Text((Vocab(SYMBOLS, sym),))),
            Attr("price", "double", drawn["price"]),
            Attr("volume", "long", drawn["volume"]),
            Attr("exchange", "string", Text((Vocab(EXCHANGES, exch),))),
            Attr("sector", "string", Text((Vocab(SECTORS, sym % len(SECTORS)),))),
            Attr("region", "string", Text((Vocab(REGIONS, exch % len(REGIONS)),))),
            Attr("urgent", "boolean", drawn["urgent"]),
            Attr("venue_ts", "long", times - 3),
        ]
        if self._notes:
            attrs.append(Attr("note", "string", Text((Vocab(self._notes, k % len(self._notes)),))))
        self._count += n
        return EventColumns(Text((pub, "-", k // self.publishers)), Text((pub,)), times, self.lifetime_ms, tuple(attrs))

    def columns(self, n: int, start_ms: int, spacing_ms: float = 0.0) -> EventColumns:
        """The next ``n`` events, published from ``start_ms`` at ``spacing_ms`` intervals."""
        drawn = self.draw(n)
        return self.build(drawn, (start_ms + np.arange(n) * spacing_ms).astype(np.int64))

    def batch(self, n: int, start_ms: int, spacing_ms: float = 0.0) -> list[dict[str, Any]]:
        """:meth:`columns` as records in docs/reference/topics.md §1.3."""
        return self.columns(n, start_ms, spacing_ms).records()
