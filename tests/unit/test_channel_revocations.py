"""Which channel read grants the access service takes away (infra/security.py:
``channel_moves``, ``channel_revocations``), from the installed assignments, the clients'
committed positions and the clock, as docs/guide/security.md says: a subscriber loses a channel
it was moved off once no subscription of its own needs it and each moved one passed the
hand-over marker there (or is gone, or the grace period passed), and never a channel it needs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from infra.security import (
    DEFAULT_REVOKE_GRACE_S,
    ChannelMove,
    channel_grants,
    channel_moves,
    channel_revocations,
)
from routing.channels.assignment import LOBBY

GRACE = 60_000
OWNERS = {"carol-1": "carol", "carol-2": "carol", "bob-1": "bob"}


def _revoked(
    before: dict[str, int],
    after: dict[str, int],
    committed: dict[tuple[str, int], int],
    now_ms: int = 1_000,
    live: set[str] | None = None,
    planned: dict[str, int] | None = None,
) -> set[tuple[str, int]]:
    """Install ``after`` over ``before`` (markers at offset 10 + channel, at time 0) and decide."""
    alive = set(OWNERS) if live is None else live
    moves = channel_moves(before, after, {c: 10 + c for c in range(4)}, 0)
    subscriber_of = {s: o for s, o in OWNERS.items() if s in alive}
    needed = channel_grants(subscriber_of, after) | channel_grants(subscriber_of, after if planned is None else planned)
    return channel_revocations(needed, moves, OWNERS, committed, alive, now_ms, GRACE)


def test_moves_name_the_channel_left_and_its_marker() -> None:
    moves = channel_moves({"carol-1": 1, "bob-1": 2}, {"carol-1": 3, "bob-1": 2}, {1: 11, 3: 13}, 7)
    assert moves == [ChannelMove("carol-1", 1, 11, 7)]
    # out of the lobby (unplaced before), back to it (unplaced after), and to a channel without a marker
    assert channel_moves({}, {"bob-1": 2}, {0: 5}, 0) == [ChannelMove("bob-1", LOBBY, 5, 0)]
    assert channel_moves({"bob-1": 2}, {}, {2: 6}, 0) == [ChannelMove("bob-1", 2, 6, 0)]
    assert channel_moves({"bob-1": 5}, {"bob-1": 1}, {1: 6}, 0)[0].marker is None


def test_the_old_channel_goes_once_the_client_passed_the_marker() -> None:
    assert _revoked({}, {"carol-1": 2, "carol-2": 2}, {("carol-1", 0): 11, ("carol-2", 0): 11}) == {("carol", LOBBY)}
    # at the marker (offset 10 in the lobby), not past it: kept
    assert _revoked({}, {"carol-1": 2, "carol-2": 2}, {("carol-1", 0): 11, ("carol-2", 0): 10}) == set()
    assert _revoked({}, {"carol-1": 2, "carol-2": 2}, {("carol-1", 0): 11}) == set()


def test_a_channel_still_needed_is_kept() -> None:
    # carol-2 stays in the lobby: carol keeps it although carol-1 passed its marker
    assert _revoked({}, {"carol-1": 2}, {("carol-1", 0): 99}) == set()
    # the newest planned version (granted before it is installed) puts carol-1 back on channel 1
    kept = _revoked({"carol-1": 1, "carol-2": 2}, {"carol-1": 3, "carol-2": 2}, {("carol-1", 1): 99},
                    planned={"carol-1": 1, "carol-2": 2})  # fmt: skip
    assert kept == set()
    assert _revoked({"carol-1": 1, "carol-2": 2}, {"carol-1": 3, "carol-2": 2}, {("carol-1", 1): 99}) == {("carol", 1)}


def test_the_grace_period_and_a_gone_subscription_end_a_wait() -> None:
    after = {"carol-1": 2, "carol-2": 2}
    assert _revoked({}, after, {}, now_ms=GRACE - 1) == set()
    assert _revoked({}, after, {}, now_ms=GRACE) == {("carol", LOBBY)}
    # carol-2 unsubscribed (tombstone) and carol-1 passed: nothing waits
    assert _revoked({}, after, {("carol-1", 0): 11}, live={"carol-1", "bob-1"}) == {("carol", LOBBY)}
    # a channel the version wrote no marker in (k shrank): only the grace period ends it
    moves = [ChannelMove("bob-1", 5, None, 0)]
    assert channel_revocations(set(), moves, OWNERS, {("bob-1", 5): 10**9}, {"bob-1"}, GRACE - 1, GRACE) == set()
    assert channel_revocations(set(), moves, OWNERS, {("bob-1", 5): 10**9}, {"bob-1"}, GRACE, GRACE) == {("bob", 5)}


def test_a_move_waits_for_its_owner() -> None:
    """The owner comes from the subscriptions table, read beside the assignments: until its record
    is read, a move frees nothing (and is not forgotten)."""
    moves = channel_moves({}, {"dora-1": 2}, {0: 5}, 0)
    assert channel_revocations(set(), moves, OWNERS, {("dora-1", 0): 6}, {"dora-1"}, 1, GRACE) == set()
    owners = {**OWNERS, "dora-1": "dora"}
    assert channel_revocations(set(), moves, owners, {("dora-1", 0): 6}, {"dora-1"}, 1, GRACE) == {("dora", LOBBY)}


def test_other_subscribers_are_untouched() -> None:
    revoked = _revoked({}, {"carol-1": 2, "carol-2": 2}, {("carol-1", 0): 11, ("carol-2", 0): 11})
    assert all(subscriber == "carol" for subscriber, _ in revoked)


@st.composite
def _situations(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, int], int], set[str], int]:
    channel = st.integers(0, 3)
    before = draw(st.dictionaries(st.sampled_from(sorted(OWNERS)), channel))
    after = draw(st.dictionaries(st.sampled_from(sorted(OWNERS)), channel))
    committed = draw(st.dictionaries(st.tuples(st.sampled_from(sorted(OWNERS)), channel), st.integers(0, 20)))
    live = draw(st.sets(st.sampled_from(sorted(OWNERS))))
    return before, after, committed, live, draw(st.integers(0, 2 * GRACE))


@given(_situations())
def test_a_revoked_channel_is_never_needed_and_every_move_off_it_is_done(situation) -> None:  # type: ignore[no-untyped-def]
    before, after, committed, live, now_ms = situation
    revoked = _revoked(before, after, committed, now_ms, live)
    subscriber_of = {s: o for s, o in OWNERS.items() if s in live}
    needed = channel_grants(subscriber_of, after)
    moves = channel_moves(before, after, {c: 10 + c for c in range(4)}, 0)
    for subscriber, channel in revoked:
        assert (subscriber, channel) not in needed
        mine = [m for m in moves if (OWNERS[m.subscription_id], m.channel) == (subscriber, channel)]
        assert mine  # only a channel someone was moved off
        for m in mine:
            assert (
                m.subscription_id not in live
                or committed.get((m.subscription_id, channel), -1) > 10 + channel
                or (now_ms >= GRACE)
            )
    # and the converse: a moved-off channel that nobody needs and whose moves are done goes
    for m in moves:
        pair = (OWNERS[m.subscription_id], m.channel)
        done = [
            n.subscription_id not in live or committed.get((n.subscription_id, n.channel), -1) > n.marker
            for n in moves
            if (OWNERS[n.subscription_id], n.channel) == pair and n.marker is not None
        ]
        if pair not in needed and (all(done) or now_ms >= GRACE):
            assert pair in revoked


def test_serve_and_the_command_line_default_to_the_same_grace() -> None:
    from streaming.cli import build_parser
    from streaming.serve import ServeConfig

    args = build_parser().parse_args(["serve", "--gateway", "admin.properties"])
    assert args.revoke_grace_s == DEFAULT_REVOKE_GRACE_S
    assert ServeConfig.__dataclass_fields__["revoke_grace_s"].default == DEFAULT_REVOKE_GRACE_S
