"""Group counts (routing.channels.groups, ``siftstream plan groups``): Opyrchal et al.'s Fig. 1
and Fig. 2 reproduced exactly, the closed forms against counting the groups one by one, and the
errors of docs/reference/channels.md."""

from __future__ import annotations

import itertools
import json
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing.channels.groups import cgm_max_endpoints, group_counts
from streaming.cli import main

# Fig. 2: (endpoints, clusters) -> CGM, then TCGM at T = 5, 4, 3 (the closed form; the paper
# prints 489,756 and 141,776 for the two T = 5 four-cluster entries, one more group per cluster)
FIG2 = {
    (168, 8): (16_777_216, 223_168, 60_376, 12_496),
    (112, 8): (131_072, 27_784, 11_768, 3_760),
    (112, 4): (1_073_741_824, 489_752, 96_632, 14_732),
    (88, 4): (16_777_216, 141_772, 36_436, 7_176),
}


@pytest.mark.parametrize(("n", "c"), sorted(FIG2))
def test_fig2_is_reproduced(n: int, c: int) -> None:
    cgm, *tcgm = FIG2[(n, c)]
    assert group_counts(n, c)["groups"]["cgm"] == cgm
    for t, expected in zip((5, 4, 3), tcgm, strict=True):
        assert group_counts(n, c, threshold=t)["groups"]["tcgm"] == expected


def test_fig1_cgm_endpoints_for_a_group_budget() -> None:
    for budget, eight, four in ((2**24, 168, 88), (2**17, 112, 60), (2**13, 80, 44)):
        assert (cgm_max_endpoints(budget, 8), cgm_max_endpoints(budget, 4)) == (eight, four)
    assert cgm_max_endpoints(7, 8) == 0


def test_the_documented_example_output() -> None:
    out = group_counts(168, 8, threshold=5, neighbors=6)
    assert out == {
        "endpoints": 168,
        "clusters": 8,
        "per_cluster": 21,
        "threshold": 5,
        "neighbors": 6,
        "groups": {"ideal": 2**168, "flooding": 1, "cgm": 16_777_216, "tcgm": 223_168, "neighbor": 10_752},
        "groups_per_endpoint": {"ideal": 2**167, "flooding": 1, "cgm": 1_048_576, "tcgm": 6_197, "neighbor": 192},
        "sends_per_event_max": {"ideal": 1, "flooding": 1, "cgm": 8, "tcgm": 8},
    }
    assert len(str(out["groups"]["ideal"])) == 51


@given(c=st.integers(1, 3), b=st.integers(2, 5), data=st.data())
def test_closed_forms_count_the_groups_one_by_one(c: int, b: int, data: st.DataObject) -> None:
    """CGM: every subset of a cluster (the empty one included); TCGM: every subset of at most T
    endpoints, with the empty subset standing for the whole cluster's group; per endpoint: the
    groups that contain endpoint 0."""
    t = data.draw(st.integers(1, b - 1))
    cluster = range(b)
    subsets = [set(s) for size in range(b + 1) for s in itertools.combinations(cluster, size)]
    tcgm = [s for s in subsets if len(s) <= t]
    out = group_counts(c * b, c, threshold=t)
    assert out["groups"]["cgm"] == c * len(subsets)
    assert out["groups"]["tcgm"] == c * len(tcgm)
    assert out["groups_per_endpoint"]["cgm"] == sum(0 in s for s in subsets)
    assert out["groups_per_endpoint"]["tcgm"] == sum(0 in s for s in tcgm if s) + 1
    assert out["groups_per_endpoint"]["tcgm"] == sum(comb(b - 1, i) for i in range(t)) + 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--clusters", "0", "--endpoints", "8"], "clusters must be an integer >= 1, got 0"),
        (["--clusters", "3", "--endpoints", "8"], "clusters must divide endpoints"),
        (["--clusters", "2", "--endpoints", "8", "--threshold", "4"], "threshold must be an integer in 1..3"),
        (["--clusters", "2", "--endpoints", "8", "--neighbors", "0"], "neighbors must be an integer >= 1, got 0"),
        (["--clusters", "2", "--budget", "64", "--threshold", "2"], "--threshold and --neighbors go with --endpoints"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "groups", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_the_command_prints_exact_integers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "groups", "--endpoints", "168", "--clusters", "8", "--threshold", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["groups"]["ideal"] == 2**168 and "neighbor" not in out["groups"]
    assert main(["plan", "groups", "--clusters", "8", "--budget", str(2**24)]) == 0
    assert json.loads(capsys.readouterr().out) == {"clusters": 8, "budget": 2**24, "cgm_max_endpoints": 168}
