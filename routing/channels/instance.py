"""The instance of ``siftstream plan channels``: reading and checking its JSON document.

The document and every message are fixed by docs/reference/channels.md §1 and §6: a message
names the offending item (``k must be an integer >= 1, got 0``, ``subscription s17: ...``
followed by the filter parser's message, ``the event sample is empty``, a repeated id).

Symbols: K (``k``) is the most channels a plan may use, ψ (``psi``) the recent-event window of
the similarity (Tariq §3.2), ``seed`` the k-means seed.

Examples
--------
>>> inst = ChannelInstance.from_json({"k": 2, "subscriptions": [
...     {"subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 10"}],
...     "events": [{"event_id": "e1", "attributes": {"price": 5}}]})
>>> inst.k, inst.psi, inst.seed, inst.subscription_ids
(2, 20, 0, ('s1',))
>>> ChannelInstance.from_json({"k": 0, "subscriptions": [], "events": []})
Traceback (most recent call last):
...
routing.channels.instance.ChannelError: k must be an integer >= 1, got 0
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from routing.common.json_fields import items, text
from routing.matching.language import Filter, FilterError, parse_filter

__all__ = ["ChannelError", "ChannelInstance", "Domain", "ExactLimitError", "checked_integer"]

_KEYS_NOTE = "a channel instance has 'k', 'subscriptions', 'events' and optionally 'psi', 'seed', 'domains'"


class ChannelError(ValueError):
    """An invalid channel instance or option (exit code 2); the message names the item."""


class ExactLimitError(Exception):
    """``exact`` asked for more distinct match sets than its limit (exit code 3)."""


def _shown(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def checked_integer(name: str, value: object, lowest: int | None) -> int:
    """``value`` as an integer (``>= lowest`` unless None), or a :class:`ChannelError` naming ``name``.

    >>> checked_integer("psi", 3, 1)
    3
    >>> checked_integer("seed", 1.5, None)
    Traceback (most recent call last):
    ...
    routing.channels.instance.ChannelError: seed must be an integer, got 1.5
    """
    if isinstance(value, bool) or not isinstance(value, int) or (lowest is not None and value < lowest):
        bound = f" >= {lowest}" if lowest is not None else ""
        raise ChannelError(f"{name} must be an integer{bound}, got {_shown(value)}")
    return value


@dataclass(frozen=True)
class Domain:
    """The finite domain of one attribute: its values in order (docs/reference/channels.md §1).

    ``positions`` are the values themselves for an integer range and the indices for a list.

    >>> Domain.from_json("price", {"min": 0, "max": 3}).positions
    (0, 1, 2, 3)
    >>> Domain.from_json("region", {"values": ["eu", "us"]}).positions
    (0, 1)
    """

    values: tuple[Any, ...]
    positions: tuple[int, ...]

    @classmethod
    def from_json(cls, name: str, doc: object) -> Domain:
        where = f"domains.{name}"
        if not isinstance(doc, Mapping):
            raise ChannelError(f"{where} must be an object, {{'min': a, 'max': b}} or {{'values': [...]}}")
        if "values" in doc:
            values = doc["values"]
            if not isinstance(values, list) or not values:
                raise ChannelError(f"{where}: 'values' must be a non-empty list (got {_shown(values)})")
            return cls(tuple(values), tuple(range(len(values))))
        low, high = doc.get("min"), doc.get("max")
        for key, v in (("min", low), ("max", high)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ChannelError(f"{where}: {key!r} must be an integer (got {_shown(v)})")
        assert isinstance(low, int) and isinstance(high, int)
        if high < low:
            raise ChannelError(f"{where}: 'max' must be >= 'min' (got {low}..{high})")
        values_range = tuple(range(low, high + 1))
        return cls(values_range, values_range)


@dataclass(frozen=True)
class ChannelInstance:
    """One subscription set, one event sample and the planning parameters.

    Attributes
    ----------
    k, psi, seed : int
        K (>= 1), ψ (>= 1, default 20) and the seed (default 0).
    subscription_ids : tuple of str
        In input order; ``filters`` are the parsed filters in the same order.
    event_ids : tuple of str
        The sample, oldest first; ``events`` are their attribute maps.
    domains : dict
        Attribute name to :class:`Domain` (only ``ck`` and ``ov`` read them).
    """

    k: int
    psi: int
    seed: int
    subscription_ids: tuple[str, ...]
    filters: tuple[Filter, ...]
    event_ids: tuple[str, ...]
    events: tuple[Mapping[str, Any], ...]
    domains: dict[str, Domain] = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, doc: object, k: int | None = None, psi: int | None = None, seed: int | None = None
    ) -> ChannelInstance:
        """Read and check the document; ``k``, ``psi`` and ``seed`` given here override its fields."""
        if not isinstance(doc, Mapping):
            raise ChannelError(f"a channel instance must be a JSON object: {_KEYS_NOTE}")
        k_value = k if k is not None else doc.get("k")
        checked_k = checked_integer("k", k_value, 1)
        checked_psi = checked_integer("psi", psi if psi is not None else doc.get("psi", 20), 1)
        checked_seed = checked_integer("seed", seed if seed is not None else doc.get("seed", 0), None)
        subs = items(doc, "subscriptions", ChannelError, _KEYS_NOTE)
        evs = items(doc, "events", ChannelError, _KEYS_NOTE)
        if not subs:
            raise ChannelError("there are no subscriptions")
        if not evs:
            raise ChannelError("the event sample is empty")
        ids: list[str] = []
        filters: list[Filter] = []
        seen: set[str] = set()
        for i, sub in enumerate(subs):
            sid = text(sub, "subscription_id", f"subscriptions[{i}]", ChannelError)
            if sid in seen:
                raise ChannelError(f"repeated subscription_id {sid!r}")
            seen.add(sid)
            raw = sub.get("filter")
            if not isinstance(raw, str):
                raise ChannelError(
                    f"subscription {sid}: 'filter' must be an atomic filter string "
                    f"(a composite tree is not planned here; got {_shown(raw)})"
                )
            try:
                filters.append(parse_filter(raw))
            except (FilterError, ValueError) as exc:
                raise ChannelError(f"subscription {sid}: {exc}") from None
            ids.append(sid)
        event_ids: list[str] = []
        events: list[Mapping[str, Any]] = []
        seen_events: set[str] = set()
        for i, ev in enumerate(evs):
            eid = text(ev, "event_id", f"events[{i}]", ChannelError)
            if eid in seen_events:
                raise ChannelError(f"repeated event_id {eid!r}")
            seen_events.add(eid)
            attributes = ev.get("attributes", {})
            if not isinstance(attributes, Mapping):
                raise ChannelError(f"event {eid}: 'attributes' must be an object (got {_shown(attributes)})")
            event_ids.append(eid)
            events.append(attributes)
        raw_domains = doc.get("domains", {})
        if not isinstance(raw_domains, Mapping):
            raise ChannelError(f"domains must be an object keyed by attribute (got {_shown(raw_domains)})")
        domains = {str(name): Domain.from_json(str(name), d) for name, d in raw_domains.items()}
        return cls(
            checked_k, checked_psi, checked_seed, tuple(ids), tuple(filters), tuple(event_ids), tuple(events), domains
        )

    def with_k(self, k: int) -> ChannelInstance:
        """The same instance with another K."""
        return replace(self, k=checked_integer("k", k, 1))

    def require_domains(self, method: str) -> None:
        """Raise :class:`ChannelError` naming the first subscription (in id order) whose filter names an
        attribute without a declared domain; ``ck`` and ``ov`` need them all."""
        for sid, filt in sorted(zip(self.subscription_ids, self.filters, strict=True)):
            for p in filt.predicates:
                if p.attribute not in self.domains:
                    raise ChannelError(
                        f"subscription {sid}: method {method} needs a declared domain for attribute "
                        f"{p.attribute!r} (add it under 'domains')"
                    )
