"""Rolling windows (``routing.stats.windows.RollingWindow``): a stateful test against a list of the
values kept (docs/conventions.md §7), and windows of sketches and sequence logs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from routing.stats.delay_sketch import DelaySketch
from routing.stats.moments import Tally
from routing.stats.sequence_log import SequenceLog
from routing.stats.windows import RollingWindow
from tests.unit.stats.summary_helpers import same_state

BUCKET_MS, BUCKETS, RETAIN = 10, 3, 4


class WindowMachine(RuleBasedStateMachine):
    """``RollingWindow[Tally]`` against a list of (key, bucket, outcome): the buckets kept are the
    last ``RETAIN`` up to the newest seen, and a query merges its ``BUCKETS`` buckets."""

    def __init__(self) -> None:
        super().__init__()
        self.window = RollingWindow(Tally, bucket_ms=BUCKET_MS, buckets=BUCKETS, retain=RETAIN)
        self.kept: list[tuple[str, int, bool]] = []
        self.newest: int | None = None
        self.dropped = 0

    def _rotate(self, newest: int) -> None:
        self.newest = newest if self.newest is None else max(self.newest, newest)
        self.kept = [v for v in self.kept if v[1] > self.newest - RETAIN]

    @rule(key=st.sampled_from(["a", "b"]), times=st.lists(st.integers(0, 300), min_size=1, max_size=6))
    def add(self, key: str, times: list[int]) -> None:
        outcomes = [t % 3 == 0 for t in times]
        self.window.add(key, np.array(times, dtype=np.float64), np.array(outcomes))
        buckets = [t // BUCKET_MS for t in times]
        self._rotate(max(buckets))
        assert self.newest is not None
        for b, ok in zip(buckets, outcomes, strict=True):
            if b > self.newest - RETAIN:
                self.kept.append((key, b, ok))
            else:
                self.dropped += 1

    @rule(now=st.integers(0, 320))
    def advance(self, now: int) -> None:
        self.window.advance(float(now))
        self._rotate(math.ceil(now / BUCKET_MS) - 1)

    @rule(key=st.sampled_from(["a", "b"]), end=st.integers(0, 330))
    def query(self, key: str, end: int) -> None:
        e = math.ceil(end / BUCKET_MS) - 1
        inside = [ok for k, b, ok in self.kept if k == key and e - BUCKETS < b <= e]
        got = self.window.query(key, float(end))
        if not inside:
            assert got is None
        else:
            assert got is not None and (got.successes, got.trials) == (sum(inside), len(inside))
            got.merge(got)  # the caller's own: the window's next answer is unchanged
            again = self.window.query(key, float(end))
            assert again is not None and (again.successes, again.trials) == (sum(inside), len(inside))
        start, stop = self.window.span(float(end))
        assert (start, stop) == ((e - BUCKETS + 1) * BUCKET_MS, (e + 1) * BUCKET_MS)

    @invariant()
    def same_keys_and_round_trip(self) -> None:
        assert self.window.keys() == sorted({k for k, _, _ in self.kept})
        assert self.window.late_dropped == self.dropped
        copy = RollingWindow.from_bytes(self.window.to_bytes(), Tally)
        assert copy.to_state().keys() == self.window.to_state().keys()
        assert same_state(copy.to_state(), self.window.to_state())


TestRollingWindow = WindowMachine.TestCase
TestRollingWindow.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


def test_rolling_window_holds_sketches_and_sequence_logs() -> None:
    w = RollingWindow(lambda: DelaySketch(0.01), bucket_ms=1000, buckets=2)
    w.add("l", [0.0, 1500.0, 1600.0], np.array([1.0, 2.0, 3.0]))
    merged = w.query("l", 2000.0)
    assert merged is not None and merged.count == 3 and merged.relative_accuracy == 0.01
    copy = RollingWindow.from_bytes(w.to_bytes(), lambda: DelaySketch(0.01))
    assert same_state(copy.to_state(), w.to_state())
    logs = RollingWindow(SequenceLog, bucket_ms=1000, buckets=2)
    logs.add("l", [0.0, 10.0, 1500.0], np.array([0, 1, 3]))
    log = logs.query("l", 2000.0)
    assert log is not None and (log.received, log.expected) == (3, 4)
    with pytest.raises(ValueError, match="2 times but 3 values"):
        w.add("l", [0.0, 1.0], np.array([1.0, 2.0, 3.0]))


def test_repeated_values_give_the_summaries_that_adding_them_gives() -> None:
    """Counts (every value 1) go through ``Moments.add_repeated``: the same windows, byte for
    byte, as the per-group ``add`` (a factory without ``add_repeated`` takes that path), also on
    top of buckets that already hold other values."""
    from routing.stats.moments import Moments

    rng = np.random.default_rng(5)
    fast = RollingWindow(Moments, bucket_ms=100, buckets=4)
    plain = RollingWindow(lambda: Moments(), bucket_ms=100, buckets=4)
    for step in range(5):
        code = rng.integers(0, 7, 300)
        t = step * 100 + rng.uniform(0, 250, 300)
        values = np.ones(300) if step % 2 else rng.normal(3.0, 1.0, 300)
        for w in (fast, plain):
            w.add_groups([f"k{i}" for i in range(7)], code, t, values)
    assert fast.to_bytes() == plain.to_bytes()
    assert fast.query("k3", 500.0) is not None and fast.query("k3", 500.0).count > 0


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("add"), st.sampled_from(["a", "b", "c"]), st.lists(st.integers(0, 400), min_size=1, max_size=5)
            ),
            st.tuples(st.just("drop"), st.integers(0, 40)),
            st.tuples(st.just("save"), st.booleans()),
        ),
        max_size=30,
    )
)
def test_a_whole_state_and_the_changes_after_it_give_the_window(ops: list[tuple[Any, ...]]) -> None:
    """``changes_state`` after each save (``mark_saved``), applied in order to the whole state last
    taken, gives the window byte for byte (``to_bytes``), with values late, dropped and re-added."""
    w = RollingWindow(Tally, bucket_ms=BUCKET_MS, buckets=BUCKETS, retain=RETAIN + 3)
    whole, changes = w.to_bytes(), []
    for op in ops:
        if op[0] == "add":
            w.add(op[1], np.array(op[2], dtype=np.float64), np.array([t % 2 == 0 for t in op[2]]))
        elif op[0] == "drop":
            w.drop_before(op[1])
        elif op[1]:
            whole, changes = w.to_bytes(), []
            w.mark_saved()
        else:
            changes.append(w.changes_state())
            w.mark_saved()
    changes.append(w.changes_state())
    restored = RollingWindow.from_bytes(whole, Tally)
    for c in changes:
        restored.apply_changes(c)
    assert restored.to_bytes() == w.to_bytes()


def test_the_layout_with_one_unicode_key_per_summary_still_loads() -> None:
    """A state written before the keys were stored once each as UTF-8 (``keys``: one unicode
    entry per summary) reads back as the same window."""
    w = RollingWindow(Tally, bucket_ms=BUCKET_MS, buckets=BUCKETS, retain=RETAIN)
    w.add("é-key", np.array([1.0, 15.0, 25.0]), np.array([True, False, True]))
    w.add("b", np.array([12.0]), np.array([True]))
    state = w.to_state()
    text = state.pop("key_text").tobytes()
    ends = np.cumsum(state.pop("key_bytes"))
    names = [text[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    state["keys"] = np.array([k for k, n in zip(names, state.pop("key_items"), strict=True) for _ in range(n)])
    assert state["keys"].tolist() == ["b", "é-key", "é-key", "é-key"]
    assert RollingWindow.from_state(state, Tally).to_bytes() == w.to_bytes()
