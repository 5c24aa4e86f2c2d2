"""The offline commands of the front door, run through the real entry point (no broker, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing.composite import PLACEMENT_METHODS
from routing.planning import DISTRIBUTION_METHODS
from streaming.cli import main


def test_topology_writes_the_named_setup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "chen-flat-12", "--param", "seed=4", "--out", str(tmp_path / "t.json")]) == 0
    doc = json.loads((tmp_path / "t.json").read_text())
    assert len(doc["nodes"]) == 12 and len(doc["links"]) == 36
    assert main(["topology", "nope"]) == 2
    assert "unknown topology kind 'nope'" in capsys.readouterr().err


def test_produce_preset_to_files_reports_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "produce",
            "gryphon",
            "--count",
            "500",
            "--param",
            "brokers=2",
            "--param",
            "decay=0.88",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "250 subscriptions and 500 events" in out
    assert json.loads(out.splitlines()[1])["decay"] == 0.88
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 500
    assert main(["produce", "gryphon", "--param", "colour=red", "--out", str(tmp_path)]) == 2


def test_qos_simulate_prints_the_spec_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    system = {
        "brokers": [{"id": "b1", "service_ms": {"kind": "exponential", "mean": 5}}],
        "links": [
            {"from": "p1", "to": "b1", "reliability": 1.0, "delay_ms": {"kind": "deterministic", "value": 1}},
            {"from": "b1", "to": "s1", "reliability": 1.0, "delay_ms": {"kind": "deterministic", "value": 1}},
        ],
        "publishers": [
            {
                "id": "p1",
                "broker": "b1",
                "interarrival_ms": {"kind": "exponential", "mean": 20},
                "content": [{"p": 1.0, "lifetime_ms": 1000, "attributes": {"t": 1}}],
            }
        ],
        "subscribers": [{"id": "s1", "broker": "b1", "filter": "t = 1"}],
    }
    path = tmp_path / "system.json"
    path.write_text(json.dumps(system))
    assert main(["qos", "simulate", "--system", str(path), "--seconds", "60", "--seed", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s1 = doc["subscribers"]["s1"]
    assert s1["reliability_low"] <= s1["reliability"] <= s1["reliability_high"]
    assert s1["reliability"] > 0.99  # 5 ms service at rho 0.25 against a 1 s lifetime
    assert 0.15 < doc["brokers"]["b1"]["rho"] < 0.35


def test_simulate_writes_telemetry_files_and_ground_truth(tmp_path: Path) -> None:
    assert main(["simulate", "--seconds", "20", "--seed", "3", "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "events.jsonl",
        "ground_truth.json",
        "receipts.jsonl",
        "subscriptions.jsonl",
        "telemetry.brokers.jsonl",
        "telemetry.links.jsonl",
        "topology.jsonl",
    ]
    truth = json.loads((tmp_path / "ground_truth.json").read_text())
    assert len(truth["subscribers"]) == 100 and len(truth["brokers"]) == 20


def test_plan_instance_distribution_and_check_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "instance", "--seed", "4", "--composites", "2"]) == 0
    instance = tmp_path / "instance.json"
    instance.write_text(capsys.readouterr().out)
    plans = {}
    for method in ("greedy", "enhanced", "exact"):
        assert main(["plan", "distribution", "--instance", str(instance), "--method", method]) == 0
        plans[method] = json.loads(capsys.readouterr().out)
        assert set(plans[method]) == {"feasible", "cost", "method", "transmissions", "generated"}
        assert plans[method]["method"] == method
    # Costs are float sums taken in each plan's own order: equal plans may differ in the last bit.
    assert plans["exact"]["cost"] <= plans["enhanced"]["cost"] + 1e-9
    assert plans["enhanced"]["cost"] <= plans["greedy"]["cost"] + 1e-9
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plans["enhanced"]))
    assert main(["plan", "check", "--instance", str(instance), "--plan", str(plan)]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    broken = dict(plans["enhanced"], transmissions=plans["enhanced"]["transmissions"][1:])
    plan.write_text(json.dumps(broken))
    assert main(["plan", "check", "--instance", str(instance), "--plan", str(plan)]) == 1
    assert json.loads(capsys.readouterr().out)["problems"]


def test_plan_distribution_reports_bad_instances_and_infeasibility(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"id": "p1", "role": "publisher"}], "links": [], "events": [], "interests": [7]}')
    assert main(["plan", "distribution", "--instance", str(bad)]) == 2
    assert "interests[0] must be an object" in capsys.readouterr().err
    doc = {
        "nodes": [{"id": "p1", "role": "publisher"}, {"id": "s1", "role": "subscriber"}],
        "links": [{"from": "p1", "to": "s1", "cost": 1}],
        "events": [{"id": "e1", "rate": 1, "publisher": "p1"}],
        "interests": [{"subscriber": "s1", "event": "e1"}],
        "forbidden": [{"from": "p1", "to": "s1", "event": "e1"}],
    }
    bad.write_text(json.dumps(doc))
    assert main(["plan", "distribution", "--instance", str(bad)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "feasible": False,
        "reasons": ["s1 cannot receive e1: no policy-allowed path from p1"],
    }


def test_plan_placement_prints_the_spec_6_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    links = [("b1", "b2", 1.0), ("b2", "b3", 1.0), ("b2", "b4", 1.0)]
    doc = {
        "brokers": ["b1", "b2", "b3", "b4"],
        "links": [{"from": u, "to": v, "cost": c} for a, b, c in links for u, v in ((a, b), (b, a))],
        "sources": [{"leaf": "L1", "broker": "b3", "rate": 100.0}, {"leaf": "L2", "broker": "b4", "rate": 10.0}],
        "subscription": {
            "id": "cs1",
            "broker": "b1",
            "tree": {"id": "n1", "op": "and", "children": [{"leaf": "L1"}, {"leaf": "L2"}]},
        },
    }
    instance = tmp_path / "placement.json"
    instance.write_text(json.dumps(doc))
    out = {}
    for method in ("optimal", "adaptive", "joint-point"):
        assert main(["plan", "placement", "--instance", str(instance), "--method", method]) == 0
        out[method] = json.loads(capsys.readouterr().out)
        assert set(out[method]) == {"method", "placement", "cost", "baseline", "reasons"}
    assert out["joint-point"]["placement"] == {"n1": "b2"}  # where the two sources' paths meet
    assert out["optimal"]["placement"] == {"n1": "b3"}  # beside the heavy source
    assert out["optimal"]["cost"] < out["optimal"]["baseline"]["cost"]
    assert main(["plan", "placement", "--instance", str(instance), "--method", "greedy"]) == 2
    assert "--method must be one of optimal, adaptive, joint-point" in capsys.readouterr().err


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``siftstream ARGV --help`` prints, with argparse's line wrapping undone."""
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("command", "methods", "others", "page"),
    [
        ("distribution", DISTRIBUTION_METHODS, PLACEMENT_METHODS, "docs/reference/distribution.md"),
        ("placement", PLACEMENT_METHODS, DISTRIBUTION_METHODS, "docs/reference/placement.md"),
        ("instance", (), (*DISTRIBUTION_METHODS, *PLACEMENT_METHODS), "docs/reference/distribution.md"),
        ("check", (), (*DISTRIBUTION_METHODS, *PLACEMENT_METHODS), "docs/reference/distribution.md"),
    ],
)
def test_each_plan_command_has_its_own_help_methods_and_docs_page(
    command: str, methods: tuple[str, ...], others: tuple[str, ...], page: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help(["plan", command], capsys)
    assert page in text
    if methods:
        assert "--method {" + ",".join(methods) + "}" in text
    else:
        assert "--method" not in text
    for method in others:
        assert method not in text
    listing = _help(["plan"], capsys)
    assert "{distribution,placement,channels,instance,check,groups}" in listing
    assert all(f"docs/reference/{page}.md" in listing for page in ("distribution", "placement", "channels"))


def test_a_plan_command_refuses_the_other_commands_methods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "instance", "--seed", "1"]) == 0
    distribution = tmp_path / "distribution.json"
    distribution.write_text(capsys.readouterr().out)
    for method in PLACEMENT_METHODS:
        assert main(["plan", "distribution", "--instance", str(distribution), "--method", method]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == (
            f"siftstream: error: plan distribution: --method must be one of greedy, enhanced, exact (got {method})\n"
        )
    placement = tmp_path / "placement.json"
    placement.write_text(
        json.dumps(
            {
                "brokers": ["b1", "b2"],
                "links": [{"from": "b1", "to": "b2", "cost": 1.0}, {"from": "b2", "to": "b1", "cost": 1.0}],
                "sources": [{"leaf": "L1", "broker": "b2", "rate": 2.0}, {"leaf": "L2", "broker": "b1", "rate": 1.0}],
                "subscription": {
                    "id": "cs1",
                    "broker": "b1",
                    "tree": {"id": "n1", "op": "and", "children": [{"leaf": "L1"}, {"leaf": "L2"}]},
                },
            }
        )
    )
    for method in DISTRIBUTION_METHODS:
        assert main(["plan", "placement", "--instance", str(placement), "--method", method]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == (
            "siftstream: error: plan placement: --method must be one of optimal, adaptive, joint-point "
            f"(got {method})\n"
        )


@pytest.mark.parametrize(
    ("command", "own", "foreign"),
    [
        ("predict", ("--model", "--superposition"), ("--seconds", "--seed")),
        ("simulate", ("--seconds", "--seed"), ("--model", "--superposition")),
    ],
)
def test_each_qos_command_has_its_own_options_and_docs_page(
    command: str, own: tuple[str, ...], foreign: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help(["qos", command], capsys)
    assert "docs/reference/qos-predict.md" in text
    assert all(option in text for option in own)
    assert not any(option in text for option in foreign)
    assert "{predict,simulate}" in _help(["qos"], capsys)


def test_a_qos_command_refuses_the_other_commands_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["qos", "predict", "--system", "absent.json", "--seconds", "5"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --seconds 5" in capsys.readouterr().err
