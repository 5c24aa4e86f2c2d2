"""``siftstream plan channels`` through the real entry point: the output of docs/reference/channels.md
§5, flags over the instance's fields, and every error message and exit code of §6."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from routing.channels import CHANNEL_METHODS, EXACT_LIMIT
from streaming.cli import main

from .test_channel_plans import EXAMPLE, EXPECTED_EXACT


def run(tmp_path: Path, doc: Any, *flags: str) -> int:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(doc))
    return main(["plan", "channels", "--instance", str(path), *flags])


def test_exact_prints_the_contract_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, EXAMPLE, "--method", "exact") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert isinstance(out.pop("elapsed_ms"), int)
    assert out == EXPECTED_EXACT
    assert captured.err == ""


def test_default_method_is_spectral_ncut_and_flags_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, EXAMPLE, "--k", "3", "--psi", "2", "--seed", "4") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["method"], out["k"], out["psi"], out["seed"]) == ("spectral-ncut", 3, 2, 4)
    assert out["summary"]["channels_used"] <= 3


def test_same_seed_same_bytes_apart_from_elapsed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        assert run(tmp_path, EXAMPLE, "--method", "spectral-rassoc", "--seed", "9") == 0
        outputs.append(re.sub(r'"elapsed_ms": \d+', "", capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_no_match_at_all_is_a_plan_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(EXAMPLE)
    doc["events"] = [{"event_id": "e1", "attributes": {"price": 30, "region": "us"}}]
    assert run(tmp_path, doc, "--method", "approx") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)["summary"]
    assert (summary["deliveries"], summary["waste_ratio"], summary["mean_precision"]) == (0, 0.0, 0.0)
    assert "warning" in captured.err and "no subscription matches" in captured.err


def _with(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(EXAMPLE)
    for key, value in changes.items():
        if value is None:
            del doc[key]
        else:
            doc[key] = value
    return doc


BAD = [
    (_with(k=0), (), "k must be an integer >= 1, got 0"),
    (_with(k=None), (), "k must be an integer >= 1"),
    (_with(k="2"), (), 'k must be an integer >= 1, got "2"'),
    (EXAMPLE, ("--k", "0"), "k must be an integer >= 1, got 0"),
    (_with(psi=0), (), "psi must be an integer >= 1, got 0"),
    (_with(seed=1.5), (), "seed must be an integer, got 1.5"),
    (_with(events=[]), (), "the event sample is empty"),
    (_with(subscriptions=[]), (), "there are no subscriptions"),
    (
        _with(subscriptions=[*EXAMPLE["subscriptions"], EXAMPLE["subscriptions"][0]]),
        (),
        "repeated subscription_id 's1'",
    ),
    (_with(events=[*EXAMPLE["events"], EXAMPLE["events"][1]]), (), "repeated event_id 'e2'"),
    (
        _with(subscriptions=[{"subscription_id": "s17", "subscriber_id": "u", "filter": "price <"}]),
        (),
        "subscription s17: at position",
    ),
    (
        _with(subscriptions=[{"subscription_id": "s17", "subscriber_id": "u", "filter": {"op": "and"}}]),
        (),
        "subscription s17: ",
    ),
    (EXAMPLE, ("--method", "nope"), "must be one of " + ", ".join(CHANNEL_METHODS)),
    (
        _with(domains={"price": {"min": 0, "max": 40}}),
        ("--method", "ck"),
        "subscription s3: method ck needs a declared domain for attribute 'region'",
    ),
    (
        _with(domains=None),
        ("--method", "ov"),
        "subscription s1: method ov needs a declared domain for attribute 'price'",
    ),
    (EXAMPLE, ("--method", "spectral-ncut", "--sigma", "0"), "sigma must be a number > 0"),
]


@pytest.mark.parametrize(("doc", "flags", "message"), BAD)
def test_invalid_instances_exit_2_naming_the_item(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any, flags: tuple[str, ...], message: str
) -> None:
    assert run(tmp_path, doc, *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("siftstream: error: ")
    assert message in captured.err


def test_missing_instance_names_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "channels"]) == 2
    assert "docs/reference/channels.md" in capsys.readouterr().err


def test_exact_beyond_its_limit_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = EXACT_LIMIT + 1
    doc = {
        "k": 2,
        "subscriptions": [
            {"subscription_id": f"s{i:02d}", "subscriber_id": "u", "filter": f"x = {i}"} for i in range(n)
        ],
        "events": [{"event_id": f"e{i}", "attributes": {"x": i}} for i in range(n)],
    }
    assert run(tmp_path, doc, "--method", "exact") == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{n} distinct match sets" in captured.err and f"limit of {EXACT_LIMIT}" in captured.err
    # auto skips exact there and still plans
    assert run(tmp_path, doc, "--method", "auto") == 0
    out = json.loads(capsys.readouterr().out)
    assert "exact" not in out["candidates"] and out["chosen"] in out["candidates"]
