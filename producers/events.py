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

    def batch(self, n: int, start_ms: int, spacing_ms: float = 0.0) -> list[dict[str, Any]]:
        """The next ``n`` events, published from ``start_ms`` at ``spacing_ms`` intervals."""
        rng = self._rng
        # .tolist() once: indexing numpy arrays element by element is slow
        sym = rng.choice(len(SYMBOLS), size=n, p=self._symbol_p).tolist()
        price = np.round(rng.lognormal(4.5, 0.4, size=n), 2).tolist()
        volume = rng.integers(1, 10_000, size=n).tolist()
        exch = rng.integers(0, len(EXCHANGES), size=n).tolist()
        urgent = (rng.random(n) < 0.05).tolist()
        out = []
        for i in range(n):
            k = self._count + i
            pub = self.first_publisher + k % self.publishers
            ts = int(start_ms + i * spacing_ms)
            out.append(
                {
                    "event_id": f"p{pub}-{k // self.publishers}",
                    "publisher_id": f"p{pub}",
                    "published_at": ts,
                    "lifetime_ms": self.lifetime_ms,
                    "attributes": {
                        "symbol": SYMBOLS[sym[i]],
                        "price": price[i],
                        "volume": volume[i],
                        "exchange": EXCHANGES[exch[i]],
                        "sector": SECTORS[sym[i] % len(SECTORS)],
                        "region": REGIONS[exch[i] % len(REGIONS)],
                        "urgent": urgent[i],
                        "venue_ts": ts - 3,
                    },
                }
            )
        if self._notes:
            for i, event in enumerate(out):
                event["attributes"]["note"] = self._notes[(self._count + i) % len(self._notes)]
        self._count += n
        return out
