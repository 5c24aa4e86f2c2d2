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

__all__ = ["LOBBY", "Assignment", "Follower", "resume_point"]

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


def resume_point(
    subscription_id: str,
    planned: Mapping[int, Assignment],
    installed: Mapping[int, Mapping[int, int]],
    committed: Mapping[int, int],
) -> tuple[int, int, int] | None:
    """Where an earlier life of ``subscription_id`` stopped: ``(version, channel, offset)`` to
    resume at, or None when no committed position says (then the client starts afresh).

    ``planned[v]`` and ``installed[v]`` (channel -> marker offset) are the versions still in
    ``siftstream.channels.v1``; ``committed[c]`` is the position the subscription's group
    committed in channel c (the next offset to read). Over the installed versions in order, the
    subscription reads a run of *segments*: channel c from offset s (0 for the first, the new
    channel's marker + 1 after a move) to offset e (the marker of the version that moves it off c,
    unbounded for the last). The earlier life is in the newest segment whose channel's committed
    position p lies in [s, e]: p <= e means it had not passed that marker yet (a client commits
    the old channel's marker + 1 and the new channel's start when it moves, docs/reference/delivery.md
    §5). The version returned is the segment's last (the markers of versions that did not move it
    are skipped as replays), so the next move is still ahead of the client.

    Invariant: the offset returned is the committed position of the channel returned.

    >>> v1, v2 = Assignment(1, 2, {"s": 0}), Assignment(2, 2, {"s": 1})
    >>> planned, installed = {1: v1, 2: v2}, {1: {0: 10, 1: 11}, 2: {0: 40, 1: 41}}
    >>> resume_point("s", planned, installed, {0: 25})     # before version 2's marker in channel 0
    (1, 0, 25)
    >>> resume_point("s", planned, installed, {0: 41, 1: 42})  # moved, then read on in channel 1
    (2, 1, 42)
    >>> resume_point("s", planned, installed, {}) is None
    True
    """
    versions = sorted(v for v in installed if v in planned)
    if not versions:
        return None
    found: tuple[int, int, int] | None = None
    channel, start = planned[versions[0]].channel(subscription_id), 0
    for i, version in enumerate(versions):
        after = versions[i + 1] if i + 1 < len(versions) else None
        moved = after is not None and planned[after].channel(subscription_id) != channel
        if after is not None and not moved:
            continue  # the same channel under the next version: one segment
        end = installed[after].get(channel) if after is not None else None
        p = committed.get(channel)
        if p is not None and p >= start and (end is None or p <= end):
            found = (version, channel, p)
        if after is not None:
            channel = planned[after].channel(subscription_id)
            marker = installed[after].get(channel)
            start = 0 if marker is None else marker + 1
    return found
