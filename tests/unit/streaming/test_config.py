"""The settings file, the SIFTSTREAM_* variables and the flags, on the real ``siftstream`` parser."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from streaming.cli import build_parser, main
from streaming.config import ConfigError, Layers, commands, load


def parsed(argv: list[str], doc: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Any:
    parser = build_parser()
    Layers.build(parser, doc or {}, "test.toml", env or {}).apply()
    return parser.parse_args(argv)


def test_flags_beat_the_environment_which_beats_the_file_which_beats_the_default() -> None:
    doc = {"topic-prefix": "file.", "channels-job": {"k": 16, "method": "approx"}, "plan": {"channels": {"k": 5}}}
    assert parsed(["channels-job"]).k == 32
    args = parsed(["channels-job"], doc)
    assert (args.k, args.method, args.topic_prefix) == (16, "approx", "file.")
    env = {"SIFTSTREAM_CHANNELS_JOB__K": "8", "SIFTSTREAM_TOPIC_PREFIX": "env."}
    args = parsed(["channels-job"], doc, env)
    assert (args.k, args.method, args.topic_prefix) == (8, "approx", "env.")
    args = parsed(["channels-job", "--k", "4", "--topic-prefix", "flag."], doc, env)
    assert (args.k, args.topic_prefix) == (4, "flag.")
    # a command's table does not leak into another command with the same option
    assert parsed(["plan", "channels", "--instance", "x.json"], doc).k == 5
    assert parsed(["match-job"], doc).topic_prefix == "file."


def test_switches_lists_and_paths() -> None:
    assert parsed(["channels-job"], {"channels-job": {"available-now": True}}).available_now is True
    for word, value in (("yes", True), ("0", False), ("ON", True)):
        env = {"SIFTSTREAM_AVAILABLE_NOW": word}
        assert parsed(["channels-job"], env=env).available_now is value
    args = parsed(["channels-job"], {"channels-job": {"domains": "d.json"}})
    assert args.domains == Path("d.json")


@pytest.mark.parametrize(
    ("doc", "env", "message"),
    [
        ({"kk": 1}, {}, "no command takes 'kk'"),
        ({"channels-job": {"kk": 1}}, {}, r"\[channels-job\] channels-job takes no option 'kk'"),
        ({"channels-job": {"k": "ten"}}, {}, "expected an integer, got 'ten'"),
        ({"channels-job": {"k": 1.5}}, {}, "expected an integer, got 1.5"),
        ({"channels-job": {"method": "best"}}, {}, "method must be one of"),
        ({"channels-job": {"available-now": "maybe"}}, {}, "is a switch"),
        ({"nosuch": {"k": 1}}, {}, r"\[nosuch\] is not a command"),
        ({"plan": {"nosuch": {}}}, {}, r"\[plan.nosuch\] is not a command"),
        ({}, {"SIFTSTREAM_K": "x"}, r"\$SIFTSTREAM_K: expected an integer"),
        ({}, {"SIFTSTREAM_BUDGET_MS": "soon"}, "expected a number"),
    ],
)
def test_bad_settings_name_the_key_and_where_they_came_from(
    doc: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Layers.build(build_parser(), doc, "test.toml", env)


def test_every_option_of_every_command_can_come_from_the_file() -> None:
    """Each option set in the file to its own default parses to what no setting at all gives."""
    parser = build_parser()
    checked = 0
    for path, sub in commands(parser):
        table: dict[str, Any] = {}
        for action in sub._actions:
            longs = [s for s in action.option_strings if s.startswith("--")]
            if not longs or action.dest == "help" or action.default is None:
                continue
            if isinstance(action.default, bool | int | float | str | list):
                table[longs[0][2:]] = action.default
            elif isinstance(action.default, Path):
                table[longs[0][2:]] = str(action.default)
        doc: dict[str, Any] = {}
        node = doc
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = table
        required = _required_argv(sub)
        plain = build_parser().parse_args([*path, *required])
        fresh = build_parser()
        Layers.build(fresh, doc, "test.toml", {}).apply()
        assert vars(fresh.parse_args([*path, *required])) == vars(plain), path
        checked += len(table)
    assert checked > 100


def _required_argv(sub: argparse.ArgumentParser) -> list[str]:
    """Values for a command's required options and positionals, so that it parses."""
    out: list[str] = []
    for action in sub._actions:
        if not action.option_strings:
            if isinstance(action, argparse._SubParsersAction) or action.nargs == argparse.REMAINDER:
                continue
            out.append(str(sorted(action.choices)[0]) if action.choices else "x")
        elif action.required:
            out += [action.option_strings[0], str(sorted(action.choices)[0]) if action.choices else "1"]
    for group in sub._mutually_exclusive_groups:
        if group.required:
            out += [group._group_actions[0].option_strings[0], "1"]
    return out


def test_the_file_is_found_by_flag_variable_or_the_current_folder(tmp_path: Path) -> None:
    here = tmp_path / "siftstream.toml"
    here.write_text('topic-prefix = "here."\n')
    other = tmp_path / "other.toml"
    other.write_text('topic-prefix = "other."\n')
    layers, path = load(build_parser(), ["match-job"], {}, tmp_path)
    assert path == here and layers.parser.parse_args(["match-job"]).topic_prefix == "here."
    layers, path = load(build_parser(), ["match-job"], {"SIFTSTREAM_CONFIG": str(other)}, tmp_path)
    assert path == other and layers.parser.parse_args(["match-job"]).topic_prefix == "other."
    layers, path = load(build_parser(), ["--config", str(here), "match-job"], {"SIFTSTREAM_CONFIG": str(other)})
    assert path == here
    _, path = load(build_parser(), ["match-job"], {}, tmp_path / "empty-dir-that-does-not-exist")
    assert path is None
    with pytest.raises(ConfigError, match="does not exist"):
        load(build_parser(), ["--config", str(tmp_path / "missing.toml"), "match-job"], {})
    (tmp_path / "broken.toml").write_text("k = = 1\n")
    with pytest.raises(ConfigError, match=r"broken\.toml"):
        load(build_parser(), ["--config", str(tmp_path / "broken.toml"), "match-job"], {})


def test_config_show_prints_values_and_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "s.toml"
    f.write_text('bootstrap-servers = "b:9092"\n[channels-job]\nk = 16\n')
    monkeypatch.setenv("SIFTSTREAM_CHANNELS_JOB__PSI", "10")
    assert main(["--config", str(f), "config", "show", "--json", "channels-job", "--seed", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {s["key"]: (s["value"], s["source"]) for s in doc["commands"]["channels-job"]}
    assert doc["file"] == str(f)
    assert got["k"] == (16, f"file {f}") and got["bootstrap-servers"] == ("b:9092", f"file {f}")
    assert got["psi"] == (10, "env SIFTSTREAM_CHANNELS_JOB__PSI") and got["seed"] == (3, "flag --seed")
    assert got["margin"] == (0.1, "default")
    # without a command: only what the file or the environment set, for every command
    assert main(["--config", str(f), "config", "show", "--json"]) == 0
    overview = json.loads(capsys.readouterr().out)["commands"]
    assert {s["key"] for s in overview["channels-job"]} == {"bootstrap-servers", "k", "psi"}
    assert {s["key"] for s in overview["match-job"]} == {"bootstrap-servers"}
    assert main(["--config", str(f), "config", "show"]) == 0
    table = capsys.readouterr().out
    assert "channels-job" in table and "--k" in table and "env" in table
    # a bad setting is an error before any command runs
    f.write_text("[channels-job]\nk = 'ten'\n")
    assert main(["--config", str(f), "channels-job"]) == 2
    assert "expected an integer, got 'ten'" in capsys.readouterr().err
