"""One configuration file for every command: TOML, with environment overrides and flags on top.

Every option of every ``siftstream`` command can be set in three places besides its built-in
default; the later one wins (docs/guide/configuration.md):

1. **the file**: ``--config FILE`` (given before the command), else ``$SIFTSTREAM_CONFIG``, else
   ``siftstream.toml`` in the current folder when there is one. Top-level keys apply to every
   command that has that option (``bootstrap-servers``, ``topic-prefix``, ``master``, ...); a
   table named after a command applies to it alone (``[channels-job]``, ``[serve]``, and
   ``[plan.channels]`` for ``siftstream plan channels``). Keys are the long flags without their
   dashes (``max-offsets-per-trigger``; ``max_offsets_per_trigger`` is the same key). A key that
   no command takes is an error that names it, so a misspelt setting never passes silently.
2. **the environment**: ``SIFTSTREAM_<KEY>`` for every command that has the option
   (``SIFTSTREAM_BOOTSTRAP_SERVERS``), ``SIFTSTREAM_<COMMAND>__<KEY>`` for one command
   (``SIFTSTREAM_CHANNELS_JOB__K=16``; ``SIFTSTREAM_PLAN_CHANNELS__METHOD``), dashes as
   underscores, upper case.
3. **the flags** on the command line.

Values are checked as the flag's own would be: its type (an integer option given ``"ten"`` is an
error naming the key and where it came from), its choices, ``true``/``false`` for switches
(``1``, ``yes``, ``on`` and ``0``, ``no``, ``off`` in the environment), a list for options that
repeat.

Symbols: a *command path* is the tuple of sub-command names (``("plan", "channels")``); its
*table* is the path joined by dots; a *key* is an option's long flag without ``--``.

Invariants: a command's parsed arguments equal what its flags alone would give, with each
option's default replaced by the environment's value, else the file's, else the built-in one;
options not given anywhere keep the built-in default exactly.

Example
-------
>>> import argparse
>>> parser = argparse.ArgumentParser(prog="demo")
>>> sub = parser.add_subparsers(dest="command")
>>> job = sub.add_parser("job")
>>> _ = job.add_argument("--k", type=int, default=32)
>>> _ = job.add_argument("--topic-prefix", default="")
>>> layers = Layers.build(parser, {"topic-prefix": "dev.", "job": {"k": 8}}, "demo.toml",
...                       {"SIFTSTREAM_JOB__K": "16"})
>>> layers.apply()
>>> args = parser.parse_args(["job"])
>>> (args.k, args.topic_prefix)
(16, 'dev.')
>>> [(s.key, s.value, s.source) for s in layers.settings(("job",), ["job", "--k", "4"])]
[('k', 4, 'flag --k'), ('topic-prefix', 'dev.', 'file demo.toml')]
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_FILE",
    "ConfigError",
    "Layers",
    "Setting",
    "commands",
    "config_path",
    "load",
    "show",
]

CONFIG_ENV = "SIFTSTREAM_CONFIG"
DEFAULT_FILE = "siftstream.toml"
ENV_PREFIX = "SIFTSTREAM_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_SKIPPED = {"help", "config"}  # options no file or variable sets
_TOP_VALUED = ("--log-level", "--log-format")  # the other options before the command that take a value


class ConfigError(ValueError):
    """A configuration file or variable that cannot be used, with the key and where it came from."""


@dataclass(frozen=True)
class Setting:
    """One option of one command: its effective value and where it came from (``default``,
    ``file PATH``, ``env NAME`` or ``flag --NAME``)."""

    key: str
    value: Any
    source: str


def _key(action: argparse.Action) -> str | None:
    """The option's long flag without dashes (None for positionals and ``--help``)."""
    longs = [s for s in action.option_strings if s.startswith("--")]
    if not longs or action.dest in _SKIPPED:
        return None
    return longs[0][2:]


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable command of ``parser``: its path and its parser, depth first, in order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                nested = list(commands(child))
                if nested:
                    yield from (((name, *path), p) for path, p in nested)
                else:
                    yield (name,), child
            return


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {k: a for a in parser._actions if (k := _key(a)) is not None}


def _convert(action: argparse.Action, value: Any, where: str, from_text: bool) -> Any:
    """``value`` as the option's flag would have parsed it; :class:`ConfigError` names ``where``."""
    key = _key(action)
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if from_text and isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: {key} is a switch: true or false (got {value!r})")
    if isinstance(action, argparse._AppendAction):
        items = value.split(",") if from_text and isinstance(value, str) else value
        if not isinstance(items, list):
            raise ConfigError(f"{where}: {key} takes a list (got {value!r})")
        return [_one(action, v, where, from_text) for v in items]
    return _one(action, value, where, from_text)


def _one(action: argparse.Action, value: Any, where: str, from_text: bool) -> Any:
    key = _key(action)
    if isinstance(value, dict | list) or (isinstance(value, bool) and action.type is not None):
        raise ConfigError(f"{where}: {key} takes one value (got {value!r})")
    kind: Any = action.type
    out: Any
    try:
        if kind is None:
            out = value if isinstance(value, str) else str(value)
        elif kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            out = float(value)
        elif kind is int and not from_text and not isinstance(value, int):
            raise ValueError
        else:
            out = kind(value if from_text or kind is not Path else str(value))
    except (TypeError, ValueError) as exc:
        wanted = {int: "an integer", float: "a number"}.get(kind)
        reason = f"expected {wanted}, got {value!r}" if wanted else str(exc) or f"cannot use {value!r}"
        raise ConfigError(f"{where}: {reason}") from None
    if action.choices is not None and out not in action.choices:
        options = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: {key} must be one of {options} (got {out!r})")
    return out


@dataclass
class Layers:
    """The file's and the environment's values per command (module docstring).

    ``values[path][dest]`` is ``(value, source)`` for every option that the file or the
    environment sets for the command at ``path`` of ``parser``; the environment's entry replaces
    the file's.
    """

    parser: argparse.ArgumentParser
    values: dict[tuple[str, ...], dict[str, tuple[Any, str]]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        parser: argparse.ArgumentParser,
        doc: Mapping[str, Any],
        file_name: str,
        environ: Mapping[str, str],
    ) -> Layers:
        """Check ``doc`` (the parsed TOML) and ``environ`` against every command of ``parser``."""
        cmds = dict(commands(parser))
        tables = {".".join(path): path for path in cmds}
        groups = {path[0] for path in cmds if len(path) > 1}
        shared: dict[str, Any] = {}
        per_command: dict[tuple[str, ...], dict[str, Any]] = {}
        for name, value in doc.items():
            if name in groups and isinstance(value, Mapping):
                for sub, inner in value.items():
                    table = f"{name}.{sub}"
                    if table not in tables or not isinstance(inner, Mapping):
                        raise ConfigError(f"{file_name}: [{table}] is not a command")
                    per_command[tables[table]] = dict(inner)
            elif name in tables and isinstance(value, Mapping):
                per_command[tables[name]] = dict(value)
            elif isinstance(value, Mapping):
                raise ConfigError(f"{file_name}: [{name}] is not a command (commands: {', '.join(sorted(tables))})")
            else:
                shared[name.replace("_", "-")] = value
        known = {k for p in cmds.values() for k in _options(p)}
        for key in shared:
            if key not in known:
                raise ConfigError(f"{file_name}: no command takes {key!r}")
        out = cls(parser)
        for path, p in cmds.items():
            opts = _options(p)
            table = ".".join(path)
            mine: dict[str, tuple[Any, str]] = {}
            for key, value in shared.items():
                if key in opts:
                    where = f"{file_name}: {key}"
                    mine[opts[key].dest] = (_convert(opts[key], value, where, False), f"file {file_name}")
            for raw, value in per_command.get(path, {}).items():
                key = raw.replace("_", "-")
                if key not in opts:
                    raise ConfigError(f"{file_name}: [{table}] {table} takes no option {key!r}")
                where = f"{file_name}: [{table}] {key}"
                mine[opts[key].dest] = (_convert(opts[key], value, where, False), f"file {file_name}")
            env_command = ENV_PREFIX + "_".join(path).replace("-", "_").upper() + "__"
            for key, action in opts.items():
                for var in (ENV_PREFIX + key.replace("-", "_").upper(), env_command + key.replace("-", "_").upper()):
                    if var in environ:
                        mine[action.dest] = (_convert(action, environ[var], f"${var}", True), f"env {var}")
            if mine:
                out.values[path] = mine
        return out

    def apply(self) -> None:
        """Make the layered values the commands' defaults, so flags still win."""
        for path, p in commands(self.parser):
            if path in self.values:
                p.set_defaults(**{dest: value for dest, (value, _) in self.values[path].items()})

    def settings(self, path: Sequence[str], argv: Sequence[str] = ()) -> list[Setting]:
        """Every option of the command at ``path`` with its effective value and source, sorted by
        key, given the command line ``argv`` (the command's names, then its flags; empty: no
        flags). Call after :meth:`apply`."""
        cmds = dict(commands(self.parser))
        target = cmds.get(tuple(path))
        if target is None:
            names = ", ".join(" ".join(p) for p in cmds)
            raise ConfigError(f"no command {' '.join(path)!r} (commands: {names})")
        parsed = self.parser.parse_args(list(argv)) if argv else None
        given = _given(target, argv)
        layered = self.values.get(tuple(path), {})
        out = []
        for key, action in sorted(_options(target).items()):
            if action.dest in given and parsed is not None:
                flag = next(s for s in action.option_strings if s.startswith("--"))
                out.append(Setting(key, getattr(parsed, action.dest), f"flag {flag}"))
            elif action.dest in layered:
                value, source = layered[action.dest]
                out.append(Setting(key, value, source))
            else:
                out.append(Setting(key, action.default, "default"))
        return out


def _given(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests whose flags appear in ``argv`` (``--k 4`` and ``--k=4`` alike)."""
    flags = {s: a.dest for a in parser._actions for s in a.option_strings}
    out = set()
    for word in argv:
        name = word.split("=", 1)[0]
        if name in flags:
            out.add(flags[name])
    return out


def config_path(argv: Sequence[str], environ: Mapping[str, str], cwd: Path) -> tuple[Path | None, bool]:
    """The configuration file and whether it was asked for (``--config`` or the variable: then it
    must exist); ``siftstream.toml`` in ``cwd`` only when present."""
    for i, word in enumerate(argv):
        if word == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1]), True
        if word.startswith("--config="):
            return Path(word.split("=", 1)[1]), True
        if not word.startswith("-") and (i == 0 or argv[i - 1] not in _TOP_VALUED):
            break  # the command: --config goes before it
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]), True
    default = cwd / DEFAULT_FILE
    return (default, False) if default.is_file() else (None, False)


def load(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[Layers, Path | None]:
    """Read the file and the environment for ``parser``'s commands and make them its defaults."""
    environ = os.environ if environ is None else environ
    path, asked = config_path(argv, environ, cwd or Path.cwd())
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            doc = tomllib.loads(path.read_text())
        except FileNotFoundError:
            if asked:
                raise ConfigError(f"configuration file {path} does not exist") from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"configuration file {path}: {exc}") from None
    layers = Layers.build(parser, doc, str(path) if path else "", environ)
    layers.apply()
    return layers, path


def show(layers: Layers, file: Path | None, target: Sequence[str], everything: bool = False) -> dict[str, Any]:
    """What ``siftstream config show`` prints, as a document: the file, and per command its
    settings. With ``target`` (a command's names, then optionally its flags) every option of that
    command; without it, for every command only the options that the file or the environment set
    (all of them with ``everything``).

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> job = parser.add_subparsers(dest="command").add_parser("job")
    >>> _ = job.add_argument("--k", type=int, default=32)
    >>> layers = Layers.build(parser, {}, "", {"SIFTSTREAM_K": "7"})
    >>> layers.apply()
    >>> show(layers, None, [])
    {'file': None, 'commands': {'job': [{'key': 'k', 'value': 7, 'source': 'env SIFTSTREAM_K'}]}}
    """
    names = [w for w in target if not w.startswith("-")]
    cmds = [p for p, _ in commands(layers.parser)]
    out: dict[str, Any] = {"file": str(file) if file else None, "commands": {}}
    if target:
        path = next((p for p in cmds if list(p) == names[: len(p)]), None)
        if path is None:
            raise ConfigError(f"no command {' '.join(names)!r} (commands: {', '.join(' '.join(p) for p in cmds)})")
        todo = [(path, list(target))]
    else:
        todo = [(p, []) for p in cmds]
    for path, argv in todo:
        settings = layers.settings(path, argv)
        if not (target or everything):
            settings = [s for s in settings if s.source != "default"]
        if settings:
            out["commands"][" ".join(path)] = [
                {"key": s.key, "value": str(s.value) if isinstance(s.value, Path) else s.value, "source": s.source}
                for s in settings
            ]
    return out
