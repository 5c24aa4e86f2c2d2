"""Assignment versions and the hand-over between channels (docs/reference/delivery.md).

An *assignment version* maps every placed subscription to one of K channels. The delivery stage
writes each matched event once to every channel that carries one of its matched subscriptions
(:meth:`Assignment.carriers`); a subscription that no installed version places yet is delivered
on the *lobby*, channel ``LOBBY`` (0). When it installs version v the delivery stage first writes a
marker of v to every channel topic, then the installed record of v with those markers' offsets
(the hand-over), then deliveries by v. :class:`Follower` is what a subscriber's client does with
that: it reads one channel; at a marker of a newer version it looks up its subscription's channel
under that version and, if it changed, continues on the new channel just after the new
channel's marker of the same version. Each event is delivered by exactly one version, and the
old channel holds exactly v's predecessors' deliveries before the marker, the new one exactly v's
after it, so a moved subscription loses nothing and receives nothing twice.

Symbols: v a version (1, 2, ...; 0 means "nothing installed yet"), c a channel in 0..K-1, o an
offset in a channel topic.

Examples
--------
>>> a = Assignment(1, 2, {"s1": 0, "s2": 1})
>>> a.carriers(["s2", "new"])
[0, 1]
>>> f = Follower("s2", channel=1, version=1)
>>> f.on_marker(2), f.needs
(False, 2)
>>> f.install(2, Assignment(2, 2, {"s2": 0}), {0: 40, 1: 41})
(0, 41)
>>> f.channel, f.version, f.on_marker(2)
(0, 2, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LOBBY", "Assignment", "Follower"]

LOBBY = 0  # the channel of subscriptions that no installed version places yet


@dataclass(frozen=True)
class Assignment:
    """One assignment version: ``channel_of`` maps subscription id to channel (0..k-1).

    Invariant: every value of ``channel_of`` is in ``range(k)``.
    """

    version: int
    k: int
    channel_of: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"an assignment needs k >= 1 channels, got {self.k}")
        bad = [(s, c) for s, c in self.channel_of.items() if not 0 <= c < self.k]
        if bad:
            raise ValueError(f"version {self.version}: channel {bad[0][1]} of {bad[0][0]!r} is outside 0..{self.k - 1}")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Assignment:
        """The assignment of a planned ``ChannelAssignment`` record (its ``channels`` members)."""
        channel_of = {sid: int(ch["channel"]) for ch in record["channels"] for sid in ch["subscription_ids"]}
        return cls(int(record["version"]), int(record["k"]), channel_of)

    def channel(self, subscription_id: str) -> int:
        """The channel that delivers ``subscription_id``'s matches (the lobby when unplaced)."""
        return self.channel_of.get(subscription_id, LOBBY)

    def carriers(self, matched: Iterable[str]) -> list[int]:
        """The channels an event matching ``matched`` is written to, once each, ascending."""
        return sorted({self.channel(s) for s in matched})


@dataclass
class Follower:
    """A subscription's reading position across versions: the client side of the hand-over.

    ``channel`` is the channel being read and ``version`` the newest version applied. After
    :meth:`on_marker` returns False the caller must hold the channel until it can call
    :meth:`install` for ``needs`` (it reads ``siftstream.channels.v1`` for that version's planned
    and installed records).
    """

    subscription_id: str
    channel: int = LOBBY
    version: int = 0
    needs: int | None = None

    def on_marker(self, version: int) -> bool:
        """A marker of ``version`` was read on the current channel: True to read on, False when
        ``version`` must be installed first (a marker of an applied version is a replay: skip)."""
        if version <= self.version:
            return True
        self.needs = version
        return False

    def install(self, version: int, assignment: Assignment, handover: Mapping[int, int]) -> tuple[int, int] | None:
        """Apply ``version``: ``(channel, offset)`` to continue at when the subscription moved
        (the record just after the new channel's marker), None when it stays."""
        if version <= self.version:
            return None
        if assignment.version != version:
            raise ValueError(f"installing version {version} with the members of version {assignment.version}")
        self.version, self.needs = version, None
        new = assignment.channel(self.subscription_id)
        if new == self.channel:
            return None
        if new not in handover:
            raise ValueError(f"version {version} has no hand-over offset for channel {new}")
        self.channel = new
        return new, int(handover[new]) + 1
