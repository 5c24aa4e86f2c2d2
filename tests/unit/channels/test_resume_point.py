"""``resume_point``: where a restarted client goes on (docs/reference/delivery.md §5, Resuming)."""

from __future__ import annotations

from routing.channels.assignment import LOBBY, Assignment, Follower, resume_point

# s: lobby under 1, channel 1 under 2 and 3 (3 moves nobody that matters), channel 0 under 4,
# back to channel 1 under 5; the markers' offsets per version and channel
PLANNED = {
    1: Assignment(1, 2, {}),
    2: Assignment(2, 2, {"s": 1}),
    3: Assignment(3, 2, {"s": 1, "t": 0}),
    4: Assignment(4, 2, {"s": 0}),
    5: Assignment(5, 2, {"s": 1}),
}
INSTALLED = {1: {0: 0, 1: 0}, 2: {0: 10, 1: 5}, 3: {0: 20, 1: 9}, 4: {0: 30, 1: 14}, 5: {0: 40, 1: 20}}


def test_each_segment_is_found_by_its_committed_position() -> None:
    # lobby up to version 2's marker (10): a position at or before it is still in the lobby
    assert resume_point("s", PLANNED, INSTALLED, {LOBBY: 10}) == (1, LOBBY, 10)
    # past it (11, what a client commits when it moves) and the new channel's start (6)
    assert resume_point("s", PLANNED, INSTALLED, {LOBBY: 11, 1: 6}) == (3, 1, 6)
    # channel 1 from 6 to version 4's marker (14), versions 2 and 3 one segment
    assert resume_point("s", PLANNED, INSTALLED, {LOBBY: 11, 1: 14}) == (3, 1, 14)
    # back on the lobby from 31 to 40, then channel 1 again from 21
    assert resume_point("s", PLANNED, INSTALLED, {LOBBY: 35, 1: 15}) == (4, LOBBY, 35)
    assert resume_point("s", PLANNED, INSTALLED, {LOBBY: 41, 1: 25}) == (5, 1, 25)


def test_positions_outside_every_segment_say_nothing() -> None:
    assert resume_point("s", PLANNED, INSTALLED, {}) is None
    assert resume_point("s", PLANNED, INSTALLED, {1: 3}) is None  # channel 1 before s was moved there
    assert resume_point("s", {}, {}, {LOBBY: 5}) is None  # nothing installed: the caller decides
    # a version planned but not yet installed is not a segment
    assert resume_point("s", {**PLANNED, 6: Assignment(6, 2, {"s": 0})}, INSTALLED, {LOBBY: 41, 1: 25}) == (5, 1, 25)


def test_a_follower_started_at_the_point_takes_the_next_move_at_its_marker() -> None:
    version, channel, _ = resume_point("s", PLANNED, INSTALLED, {LOBBY: 11, 1: 12})
    f = Follower("s", channel=channel, version=version)
    assert f.on_marker(3)  # a marker of a version already applied (3 did not move s): read on
    assert not f.on_marker(4) and f.needs == 4
    assert f.install(4, PLANNED[4], INSTALLED[4]) == (LOBBY, 31)
