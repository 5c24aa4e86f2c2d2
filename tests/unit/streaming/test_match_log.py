"""``siftstream match`` (docs/reference/matching-log.md): the log runner and the command, against hand-written
expectations and against a one-event-at-a-time replay of the log with ``BruteForceIndex``.

Expected outputs never come from the code under test: they are written out from the spec, or
computed by the oracle replay, which applies every operation itself, matches each event alone
and knows which generated lines it made invalid.
"""

from __future__ import annotations

import io
import json
import random
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.matching.index import BruteForceIndex, EventBatch, Matches
from routing.matching.language import Filter, parse_filter
from streaming.cli import main
from streaming.match_log import MatchLogSummary, run_match_log
from tests.strategies import SMALL_NAMES, SMALL_NUMBERS, SMALL_STRINGS, respellings, small_filters


def sub(sid: str, filt: Any, subscriber: str = "u1", **extra: Any) -> str:
    return json.dumps(
        {"type": "subscribe", "subscription_id": sid, "subscriber_id": subscriber, "filter": filt, **extra}
    )


def event(eid: str, **attributes: Any) -> str:
    return json.dumps({"type": "event", "event_id": eid, "attributes": attributes})


def unsub(sid: str) -> str:
    return json.dumps({"type": "unsubscribe", "subscription_id": sid})


def run(lines: Sequence[str], **kwargs: Any) -> tuple[list[dict[str, Any]], str, MatchLogSummary]:
    out, err = io.StringIO(), io.StringIO()
    summary = run_match_log(lines, out, err, **kwargs)
    return [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue(), summary


def matched(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(row["event_id"], row["subscription_ids"]) for row in rows]


def reported(err: str, what: str) -> list[int]:
    """Line numbers of the ``line N: invalid`` (or ``ignored``) reports, in order."""
    return [int(n) for n in re.findall(rf"^line (\d+): {what}: ", err, flags=re.MULTILINE)]


# --------------------------------------------------------------------------------------------
# The operations
# --------------------------------------------------------------------------------------------


def test_the_spec_example_byte_for_byte() -> None:
    log = [
        '{"type": "subscribe", "subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 120"}\n',
        '{"type": "event", "event_id": "e1", "attributes": {"symbol": "IBM", "price": 100.5}}\n',
        '{"type": "unsubscribe", "subscription_id": "s1"}\n',
    ]
    out, err = io.StringIO(), io.StringIO()
    summary = run_match_log(log, out, err)
    assert out.getvalue() == '{"event_id": "e1", "subscription_ids": ["s1"]}\n'
    assert err.getvalue() == ""
    assert (summary.events, summary.operations, summary.matches, summary.exit_code) == (1, 3, 1, 0)


def test_subscribe_with_an_existing_id_replaces_it() -> None:
    rows, err, summary = run(
        [
            sub("s1", "x > 5"),
            event("e1", x=3),
            event("e2", x=7),
            sub("s1", "x < 5", subscriber="u2"),
            event("e3", x=3),
            event("e4", x=7),
        ]
    )
    assert matched(rows) == [("e1", []), ("e2", ["s1"]), ("e3", ["s1"]), ("e4", [])]
    assert err == "" and summary.subscribes == 2 and summary.exit_code == 0


def test_unsubscribe_removes_from_that_point_on() -> None:
    rows, err, _ = run([sub("a", "x exists"), sub("b", "x = 1"), event("e1", x=1), unsub("a"), event("e2", x=1)])
    assert matched(rows) == [("e1", ["a", "b"]), ("e2", ["b"])]
    assert err == ""


def test_unknown_unsubscribe_is_reported_with_its_line_and_ignored_but_valid() -> None:
    rows, err, summary = run([sub("a", "x = 1"), unsub("zz"), event("e1", x=1), unsub("a"), unsub("a")])
    assert matched(rows) == [("e1", ["a"])]
    assert reported(err, "ignored") == [2, 5]
    assert "'zz'" in err and reported(err, "invalid") == []
    assert (summary.unsubscribes, summary.unknown_unsubscribes, summary.operations) == (3, 2, 5)
    assert summary.exit_code == 0  # a well-formed line: not invalid


def test_output_is_in_input_order_with_ids_in_plain_string_order() -> None:
    ids = ["s2", "s10", "é", "_", "S", "s1"]
    log = [sub(sid, "k exists") for sid in ids]
    log += [event(f"e{i}", k=i) for i in (5, 3, 9, 0)]
    log += [unsub("s10"), event("later", k=1), event("miss", j=1)]
    rows, _, summary = run(log)
    every = ["S", "_", "s1", "s10", "s2", "é"]  # code point order: 'S' < '_' < 's' < 'é'
    assert matched(rows) == [
        ("e5", every),
        ("e3", every),
        ("e9", every),
        ("e0", every),
        ("later", ["S", "_", "s1", "s2", "é"]),
        ("miss", []),
    ]
    assert summary.matches == 4 * 6 + 5


@pytest.mark.parametrize(
    ("sids", "text"),
    [
        (["b", "a"], '["a", "b"]'),
        ([","], '[","]'),
        ([",", "x"], '[",", "x"]'),
        (["a,", ",b"], '[",b", "a,"]'),
        (['q"', "a,b"], '["a,b", "q\\""]'),
        (['","', "\\"], '["\\",\\"", "\\\\"]'),
        (["é", "\U0001f600"], '["é", "\U0001f600"]'),
    ],
)
def test_ids_that_look_like_json_syntax_are_written_exactly(sids: list[str], text: str) -> None:
    out = io.StringIO()
    run_match_log([sub(sid, "k = 1") for sid in sids] + [event("e", k=1)], out, io.StringIO())
    assert out.getvalue() == '{"event_id": "e", "subscription_ids": ' + text + "}\n"


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "utf-16"])
def test_text_files_get_the_output_after_what_they_already_hold(encoding: str) -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding=encoding, newline="\n")
    out.write("before\n")
    run_match_log([sub("é", "k = 1"), event("e", k=1)], out, io.StringIO())
    out.write("after\n")
    out.flush()
    assert raw.getvalue().decode(encoding) == 'before\n{"event_id": "e", "subscription_ids": ["é"]}\nafter\n'


def test_blank_lines_are_skipped_silently_but_still_numbered() -> None:
    rows, err, summary = run(["\n", sub("a", "x = 1"), "   \n", "", "\t\r\n", event("e1", x=1), "{oops\n", "\n"])
    assert matched(rows) == [("e1", ["a"])]
    assert reported(err, "invalid") == [7]
    assert (summary.blank_lines, summary.operations, summary.invalid_lines) == (5, 2, 1)


def test_extra_fields_are_ignored_and_values_of_no_kind_satisfy_only_exists() -> None:
    log = [
        sub("a", "x exists", broker="b0", deadline_ms=5),
        sub("b", "x != 1"),
        json.dumps({"type": "event", "event_id": "e1", "publisher_id": "p", "attributes": {"x": None}}),
        event("e2", x=[1, 2]),
        event("e3", x={"y": 1}),
        event("e4", x=2),
    ]
    rows, err, _ = run(log)
    assert matched(rows) == [("e1", ["a"]), ("e2", ["a"]), ("e3", ["a"]), ("e4", ["a", "b"])]
    assert err == ""


# --------------------------------------------------------------------------------------------
# Invalid lines: reported with their number, skipped, exit code 2
# --------------------------------------------------------------------------------------------

COMPOSITE = {"op": "and", "within_ms": 60000, "children": ["kind = 'flight'", "kind = 'hotel'"]}

INVALID = [
    ('{"type": "event", "event_id": "e9"', "not valid JSON"),
    ('{"type": "event", "event_id": "e9", "attributes": {"x": NaN}}', "not valid JSON"),
    ('{"type": "event", "event_id": "e9", "attributes": {"x": 1}} {}', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('"subscribe"', "expected a JSON object"),
    ('{"subscription_id": "s1"}', "missing 'type'"),
    ('{"type": "publish", "event_id": "e9"}', "unknown type 'publish'"),
    ('{"type": 3}', "unknown type 3"),
    ('{"type": "subscribe", "subscriber_id": "u", "filter": "x = 1"}', "needs 'subscription_id'"),
    ('{"type": "subscribe", "subscription_id": "s9", "filter": "x = 1"}', "needs 'subscriber_id'"),
    ('{"type": "subscribe", "subscription_id": "s9", "subscriber_id": null, "filter": "x = 1"}', "subscriber_id"),
    ('{"type": "subscribe", "subscription_id": 7, "subscriber_id": "u", "filter": "x = 1"}', "subscription_id must"),
    ('{"type": "subscribe", "subscription_id": "", "subscriber_id": "u", "filter": "x = 1"}', "subscription_id must"),
    ('{"type": "subscribe", "subscription_id": "s9", "subscriber_id": "u"}', "needs 'filter'"),
    ('{"type": "subscribe", "subscription_id": "s9", "subscriber_id": "u", "filter": 12}', "text of an atomic"),
    (sub("s9", "flag < true"), "at position 7: expected a number or a 'string'"),
    (sub("s9", "price <"), "at position 7: expected a literal"),
    (sub("s9", ""), "at position 0: expected an attribute name"),
    (sub("s9", "x = 1 or y = 2"), "at position 6: expected 'and' or end of input"),
    (sub("s9", COMPOSITE), "composite tree"),
    (sub("s9", json.dumps(COMPOSITE)), "composite tree"),
    (sub("s9", None, composite=json.dumps(COMPOSITE)), "is composite"),
    (sub("s9", "x = 1", composite=json.dumps(COMPOSITE)), "exactly one of filter and composite"),
    ('{"type": "event", "attributes": {}}', "needs 'event_id'"),
    ('{"type": "event", "event_id": 5, "attributes": {}}', "event_id must be a non-empty string"),
    ('{"type": "event", "event_id": "", "attributes": {}}', "event_id must be a non-empty string"),
    ('{"type": "event", "event_id": "e9"}', "needs 'attributes'"),
    ('{"type": "event", "event_id": "e9", "attributes": [["x", 1]]}', "attributes must be a JSON object"),
    ('{"type": "event", "event_id": "e9", "attributes": "x=1"}', "attributes must be a JSON object"),
    ('{"type": "event", "event_id": "e9", "attributes": null}', "attributes must be a JSON object"),
    ('{"type": "unsubscribe"}', "needs 'subscription_id'"),
    ('{"type": "unsubscribe", "subscription_id": ["s1"]}', "subscription_id must be a non-empty string"),
]


@pytest.mark.parametrize(("line", "message"), INVALID)
def test_an_invalid_line_is_reported_with_its_number_and_changes_nothing(line: str, message: str) -> None:
    log = [sub("s9", "x exists"), event("e1", x=1), line, event("e2", x=1), unsub("s9"), event("e3", x=1)]
    rows, err, summary = run(log)
    assert matched(rows) == [("e1", ["s9"]), ("e2", ["s9"]), ("e3", [])]  # s9 untouched by line 3
    assert reported(err, "invalid") == [3]
    first = err.splitlines()[0]
    assert message in first, first
    assert (summary.invalid_lines, summary.operations, summary.events, summary.exit_code) == (1, 5, 3, 2)


def test_a_bad_filter_report_shows_the_parser_caret() -> None:
    _, err, _ = run([sub("s1", "flag < true")])
    assert err.splitlines() == [
        "line 1: invalid: filter of subscription 's1': at position 7: "
        "expected a number or a 'string' (booleans take only = and !=), found 'true'",
        "  flag < true",
        "         ^",
    ]


def test_every_invalid_line_is_reported_in_order() -> None:
    log = ["nope", sub("a", "x = 1"), "[]", event("e1", x=1), '{"type": "x"}', "", unsub("q")]
    rows, err, summary = run(log)
    assert matched(rows) == [("e1", ["a"])]
    assert reported(err, "invalid") == [1, 3, 5]
    assert reported(err, "ignored") == [7]
    assert (summary.invalid_lines, summary.operations, summary.exit_code) == (3, 3, 2)


# --------------------------------------------------------------------------------------------
# Batching: one match call per run of events, flushed before every change
# --------------------------------------------------------------------------------------------


class SpyIndex(BruteForceIndex):
    """The oracle, recording the size of every ``match`` call and the changes between them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[object] = []

    def add(self, subscription_id: str, filt: Filter | str) -> None:
        self.calls.append("add")
        super().add(subscription_id, filt)

    def remove(self, subscription_id: str) -> None:
        self.calls.append("remove")
        super().remove(subscription_id)

    def match(self, events: EventBatch | Sequence[Mapping[str, object]]) -> Matches:
        self.calls.append(len(events))
        return super().match(events)


def test_events_are_matched_in_runs_capped_at_batch_size_and_flushed_before_changes() -> None:
    log = [event(f"a{i}", x=i) for i in range(5)]
    log += ["not json", sub("s", "x >= 1"), "", "not json"]
    log += [event(f"b{i}", x=i) for i in range(2)]
    log += [unsub("s"), unsub("unknown"), event("c0", x=1)]
    spy = SpyIndex()
    rows, _, summary = run(log, index=spy, batch_size=2)
    assert spy.calls == [2, 2, 1, "add", 2, "remove", 1]  # invalid and blank lines flush nothing
    assert matched(rows) == [(f"a{i}", []) for i in range(5)] + [("b0", []), ("b1", ["s"]), ("c0", [])]
    assert summary.matches == 1


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        run([], batch_size=0)


# --------------------------------------------------------------------------------------------
# Parity with a one-event-at-a-time replay on BruteForceIndex
# --------------------------------------------------------------------------------------------

LOG_IDS = ("s1", "s2", "s10", "S", "é", "_", ",", "a,b", 'q"', "\\", "x\n")  # and some that JSON escapes
BAD_FILTERS = ("", "a <", "flag < true", "a in ()", "a = 'open", "a = 1 or b = 2", '{"op": "or"}')
JSON_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(SMALL_NUMBERS),
    st.sampled_from(SMALL_STRINGS),
    st.booleans(),
    st.sampled_from([None, 2**53 + 1, -0.0, 0.25, [1], "é"]),
)

# One generated operation: (kind, payload, line) where the oracle replays kind and payload.
subscribes = st.tuples(
    st.sampled_from(LOG_IDS),
    small_filters(max_predicates=2).flatmap(lambda f: st.tuples(st.just(f), respellings(f))),
).map(lambda t: ("subscribe", (t[0], t[1][0]), sub(t[0], t[1][1])))
bad_subscribes = st.tuples(st.sampled_from(LOG_IDS), st.sampled_from(BAD_FILTERS)).map(
    lambda t: ("invalid", None, sub(*t))
)
events = st.one_of(
    st.fixed_dictionaries(dict.fromkeys(SMALL_NAMES, JSON_VALUES), optional={"c": JSON_VALUES}),
    st.dictionaries(st.sampled_from((*SMALL_NAMES, "c")), JSON_VALUES, max_size=3),
).map(lambda attrs: ("event", attrs, event("e", **attrs)))
unsubscribes = st.sampled_from(LOG_IDS).map(lambda sid: ("unsubscribe", sid, unsub(sid)))
junk = st.sampled_from(["{", "[]", '{"type": "nope"}', '{"type": "event", "event_id": "x"}']).map(
    lambda line: ("invalid", None, line)
)
blank = st.sampled_from(["", "\n", "  \n"]).map(lambda line: ("blank", None, line))
operations = st.one_of(
    subscribes, subscribes, events, events, events, events, unsubscribes, bad_subscribes, junk, blank
)


def numbered(ops: list[tuple[str, Any, str]]) -> list[tuple[str, Any, str]]:
    """Give each event its own id (its position), so the output can be checked line by line."""
    out = []
    for i, (kind, payload, line) in enumerate(ops):
        if kind == "event":
            line = json.dumps({"type": "event", "event_id": f"e{i}", "attributes": payload})
        out.append((kind, payload, line))
    return out


def replay(ops: list[tuple[str, Any, str]]) -> tuple[list[tuple[str, list[str]]], list[int], list[int]]:
    """The oracle: apply each operation to BruteForceIndex and match each event alone. Returns
    the expected output, the invalid line numbers and the unknown-unsubscribe line numbers."""
    oracle = BruteForceIndex()
    expected: list[tuple[str, list[str]]] = []
    invalid: list[int] = []
    unknown: list[int] = []
    for number, (kind, payload, line) in enumerate(ops, 1):
        if kind == "subscribe":
            oracle.add(*payload)
        elif kind == "unsubscribe":
            if payload in oracle:
                oracle.remove(payload)
            else:
                unknown.append(number)
        elif kind == "event":
            attrs = json.loads(json.dumps(payload))
            expected.append((json.loads(line)["event_id"], oracle.match([attrs]).ids(0)))
        elif kind == "invalid":
            invalid.append(number)
    return expected, invalid, unknown


def check_parity(ops: list[tuple[str, Any, str]], batch_size: int) -> None:
    expected, invalid, unknown = replay(ops)
    out, err_io = io.StringIO(), io.StringIO()
    summary = run_match_log([line for _, _, line in ops], out, err_io, batch_size=batch_size)
    err = err_io.getvalue()
    # the exact text json.dumps writes (docs/reference/matching-log.md's spacing), not just the same JSON values
    assert out.getvalue() == "".join(
        json.dumps({"event_id": eid, "subscription_ids": ids}, ensure_ascii=False) + "\n" for eid, ids in expected
    )
    assert reported(err, "invalid") == invalid
    assert reported(err, "ignored") == unknown
    assert summary.exit_code == (2 if invalid else 0)
    assert summary.events == len(expected)
    assert summary.matches == sum(len(ids) for _, ids in expected)
    assert summary.operations == sum(kind not in ("invalid", "blank") for kind, _, _ in ops)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=10, max_size=60).map(numbered), st.sampled_from([1, 2, 3, 4096]))
def test_parity_with_a_one_event_at_a_time_oracle(ops: list[tuple[str, Any, str]], batch_size: int) -> None:
    check_parity(ops, batch_size)


@pytest.mark.parametrize(("seed", "batch_size"), [(0, 7), (1, 64), (2, 4096)])
def test_parity_on_a_long_seeded_log_with_churn(seed: int, batch_size: int) -> None:
    """A few thousand lines: long runs of events between bursts of subscribes and unsubscribes."""
    rng = random.Random(seed)
    names = ("a", "b", "c", "d")
    sids = [f"s{i}" for i in range(60)]

    def value() -> Any:
        return rng.choice([rng.choice(SMALL_NUMBERS), rng.choice(SMALL_STRINGS), rng.random() < 0.5, None])

    def filter_text() -> str:
        preds = []
        for name in rng.sample(names, rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.4:
                preds.append(f"{name} {rng.choice(['=', '!=', '<', '<=', '>', '>='])} {rng.choice(SMALL_NUMBERS)}")
            elif kind < 0.7:
                lit = rng.choice(SMALL_STRINGS).replace("'", "''")
                preds.append(f"{name} {rng.choice(['=', '!=', 'startswith', 'contains', '<'])} '{lit}'")
            elif kind < 0.85:
                preds.append(f"{name} between {rng.choice([-1, 0, 1])} and {rng.choice([1, 2, 3])}")
            else:
                preds.append(f"{name} exists")
        return " and ".join(preds)

    ops: list[tuple[str, Any, str]] = []
    while len(ops) < 3000:
        for _ in range(rng.choice([1, 1, 5, 40])):
            sid = rng.choice(sids)
            if rng.random() < 0.7:
                text = filter_text()
                ops.append(("subscribe", (sid, parse_filter(text)), sub(sid, text)))
            else:
                ops.append(("unsubscribe", sid, unsub(sid)))
        for _ in range(rng.choice([1, 3, 50, 300])):
            attrs = {n: value() for n in names if rng.random() < 0.7}
            ops.append(("event", attrs, event("e", **attrs)))
    check_parity(numbered(ops), batch_size)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------

CLI_LOG = [
    sub("s1", "price < 120"),
    sub("s2", "symbol = 'IBM' and volume >= 1000"),
    event("e1", symbol="IBM", price=100.5, volume=5000),
    unsub("s1"),
    event("e2", symbol="IBM", price=99, volume=10),
]
CLI_OUT = [("e1", ["s1", "s2"]), ("e2", [])]


def summary_line(err: str) -> str:
    (line,) = [line for line in err.splitlines() if line.startswith("siftstream match:")]
    return line


def test_cli_reads_a_file_and_writes_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "out.jsonl"
    log.write_text("\n".join(CLI_LOG) + "\n")
    assert main(["match", "--log", str(log), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert matched(rows) == CLI_OUT
    captured = capsys.readouterr()
    assert captured.out == ""
    line = summary_line(captured.err)
    assert "2 events" in line and "5 operations" in line and "2 matches" in line and "events/s" in line


def test_cli_writes_to_stdout_and_exits_2_on_an_invalid_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join([*CLI_LOG[:2], sub("s3", "flag < true"), *CLI_LOG[2:], unsub("nope")]) + "\n")
    assert main(["match", "--log", str(log)]) == 2
    captured = capsys.readouterr()
    assert matched([json.loads(line) for line in captured.out.splitlines()]) == CLI_OUT
    assert reported(captured.err, "invalid") == [3]
    assert reported(captured.err, "ignored") == [7]
    assert "at position 7" in captured.err
    assert "1 invalid line" in summary_line(captured.err)


def test_cli_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = ("\n".join(CLI_LOG) + "\n").encode()
    for argv in (["match"], ["match", "--log", "-", "--out", "-"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert matched([json.loads(line) for line in captured.out.splitlines()]) == CLI_OUT
        assert "2 events" in summary_line(captured.err)


def test_cli_reports_a_line_that_is_not_utf8_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "out.jsonl"
    bad = b'{"type": "event", "event_id": "e\xff", "attributes": {}}'
    log.write_bytes(b"\xef\xbb\xbf" + b"\n".join([CLI_LOG[0].encode(), bad, event("e1", price=1, n="é").encode()]))
    assert main(["match", "--log", str(log), "--out", str(out)]) == 2
    assert matched([json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]) == [("e1", ["s1"])]
    assert reported(capsys.readouterr().err, "invalid") == [2]


def test_cli_missing_log_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["match", "--log", str(tmp_path / "absent.jsonl")]) == 2
    assert "absent.jsonl" in capsys.readouterr().err


def test_the_guide_example_is_what_the_command_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/guide/matching.md's "Matching a log offline": its log, output and stderr reports (timing aside)."""
    guide = (Path(__file__).resolve().parents[3] / "docs" / "guide" / "matching.md").read_text()
    section = guide.split("## Matching a log offline", 1)[1].split("\n## ", 1)[0]
    log_block, out_block, err_block = re.findall(r"```(?:jsonl|text)\n(.*?)```", section, flags=re.DOTALL)
    log = tmp_path / "log.jsonl"
    log.write_text(log_block)
    assert main(["match", "--log", str(log)]) == 2
    captured = capsys.readouterr()
    assert captured.out == out_block
    shown = err_block.splitlines()
    got = captured.err.splitlines()
    assert got[:-1] == shown[:-1]
    timing = r"in [0-9.]+s \([0-9,]+ events/s\)"
    assert re.sub(timing, "", got[-1]) == re.sub(timing, "", shown[-1])
