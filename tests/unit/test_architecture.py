"""The architecture rules of SiftStream in one place, checked on the source with ``ast``.

Nothing here imports the modules it checks: every rule parses the files, so a rule also sees
imports inside functions and under ``if TYPE_CHECKING:``, and a broken module cannot hide a
violation. Each failure names the file, the line and the import (or name) at fault.

The rules (docs/conventions.md §1 and §15):

layers
    ``routing/`` is split by capability into the subpackages of :data:`LAYERS`, lowest first. A
    module may import from its own subpackage and from the ones before it; ``routing/__init__.py``
    (the catalogue of the layers) may import any of them, and nothing inside a layer imports it;
    nor does a module import its own layer's catalogue (``routing/<layer>/__init__.py``, which
    imports it in turn), only the modules beside it.
    There are no modules directly under ``routing/`` other than ``__init__.py``, and no
    subpackage that is not a layer. ``routing.LAYERS`` states the same order (checked).
purity
    ``routing/`` imports only the standard library, numpy, scipy, numba and ``routing`` itself,
    and numba only in the compiled-kernel modules of :data:`NUMBA_MODULES`. pyspark is imported
    only where :data:`PYSPARK_HOMES` says, the Kafka clients only where :data:`KAFKA_HOMES` says
    (``schemas/`` and ``routing/`` import neither).
cycles
    The import graph of ``routing/`` modules (all imports: module level, function level and
    ``TYPE_CHECKING``) has no cycle.
size
    No ``routing/`` module is over :data:`MAX_LINES` lines.
``__all__``
    Every module of :data:`PACKAGES` declares ``__all__`` as one literal list of strings, every
    name in it is defined in the module, and it is in ruff's RUF022 ("isort-style") order.

The small tests at the end run each checker on made-up sources, so a checker that stopped
seeing violations would fail there.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = ("common", "stats", "matching", "planning", "composite", "reliability", "channels", "monitors")
"""The subpackages of ``routing/``, lowest first."""

PACKAGES = ("routing", "schemas", "streaming", "producers", "infra")
"""The shipped packages: each of their modules declares ``__all__``."""

SCANNED = (*PACKAGES, "bench", "tests")
"""Where the purity rules look for pyspark and Kafka clients."""

ROUTING_THIRD_PARTY = frozenset({"numpy", "scipy", "numba"})
NUMBA_MODULES = frozenset(
    {"routing.matching.kernels", "routing.matching.keyed", "routing.matching.numeric_form", "routing.channels.kernels"}
)
"""The only ``routing`` modules that import numba: the compiled inner loops of the matching index
(pyproject.toml's comment on the numba dependency) and its reader of filter text's bytes, and of
the channel planner's ``approx``."""

EDGE_PACKAGES = frozenset({"streaming", "producers", "schemas", "infra", "bench", "tests"})

PYSPARK_HOMES = ("streaming/", "tests/spark/")
"""Paths (prefixes) that may import pyspark: the jobs, and the tests that run them on a local
SparkSession. ``infra/spark_cluster.py`` starts Spark as processes and imports no pyspark."""

KAFKA_CLIENTS = frozenset({"confluent_kafka", "kafka"})
KAFKA_HOMES = (
    "producers/",
    "infra/",
    "streaming/",
    "tests/integration/",
    "tests/faults/",
    "bench/matching_e2e.py",
    "bench/delivery_e2e.py",
    "bench/latency_floor.py",
    "bench/soak.py",
    "bench/cold_start.py",
    "bench/consume_wait.py",
)
"""Paths (prefixes) that may import a Kafka client: the writers, broker setup and readers at the
edge, the tests against the real broker or the fault tier's cluster, and the six benchmarks that
read topics with a raw librdkafka consumer (and measure the broker's own ceiling, Spark's latency
floor, serve's lag and latency over a soak, the matching job's cold start, or a consumer's wait)."""

MAX_LINES = 1500


# --------------------------------------------------------------------------------------------
# Reading the source
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """One parsed source file."""

    path: str  # relative to the repository root, with forward slashes
    name: str  # dotted module name; a package's __init__.py is named after the package
    is_package: bool
    source: str = field(repr=False)
    tree: ast.Module = field(repr=False, compare=False)

    @classmethod
    def parse(cls, path: str, source: str) -> Module:
        parts = path.removesuffix(".py").split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        return cls(path, ".".join(parts), is_package, source, ast.parse(source, filename=path))

    @property
    def package(self) -> str:
        """The package that relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def lines(self) -> int:
        return len(self.source.splitlines())


@dataclass(frozen=True)
class Import:
    """One import: ``target`` is the absolute module named by the statement (relative imports
    resolved), ``names`` what a ``from`` import takes from it (empty for ``import x``)."""

    path: str
    line: int
    target: str
    names: tuple[str, ...]
    text: str

    @property
    def root(self) -> str:
        return self.target.split(".")[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _python_files(top: str) -> Iterator[Path]:
    for path in sorted((ROOT / top).rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


@cache
def modules(top: str) -> tuple[Module, ...]:
    """Every module under the top-level folder ``top``."""
    return tuple(Module.parse(p.relative_to(ROOT).as_posix(), p.read_text()) for p in _python_files(top))


def _resolve(module: Module, target: str | None, level: int) -> str:
    if level == 0:
        return target or ""
    base = module.package.split(".")
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *([target] if target else [])])


_IMPORTERS = ("import_module", "__import__")


def _segment(lines: list[bytes], node: ast.expr | ast.stmt) -> str:
    """The source of ``node`` on one line (``ast.get_source_segment`` splits the file each call)."""
    end = node.end_lineno or node.lineno
    chunk = lines[node.lineno - 1 : end]
    if len(chunk) == 1:
        chunk = [chunk[0][node.col_offset : node.end_col_offset]]
    else:
        chunk = [chunk[0][node.col_offset :], *chunk[1:-1], chunk[-1][: node.end_col_offset]]
    return " ".join(b" ".join(chunk).decode().split())


@cache
def imports(module: Module) -> tuple[Import, ...]:
    """Every import in ``module``, wherever it sits (functions, ``TYPE_CHECKING`` blocks), and
    ``importlib.import_module("x")`` / ``__import__("x")`` calls with a literal absolute name."""
    lines = module.source.encode().splitlines()
    found: list[Import] = []
    for node in ast.walk(module.tree):
        targets: list[tuple[str, tuple[str, ...]]] = []
        if isinstance(node, ast.Import):
            targets = [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            targets = [(_resolve(module, node.module, node.level), tuple(a.name for a in node.names))]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            value = node.args[0].value
            if called in _IMPORTERS and isinstance(value, str) and value and not value.startswith("."):
                targets = [(value, ())]
        if targets:
            text = _segment(lines, node)
            found += [Import(module.path, node.lineno, t, names, text) for t, names in targets]
    return tuple(found)


def imported_modules(imp: Import, known: Iterable[str]) -> list[str]:
    """The modules among ``known`` that ``imp`` loads by name: ``from a.b import c`` loads
    ``a.b.c`` when that is a module, else ``a.b``; ``import a.b`` loads ``a.b``."""
    known = set(known)
    if not imp.names:
        return [imp.target] if imp.target in known else []
    out = []
    for name in imp.names:
        sub = f"{imp.target}.{name}"
        if sub in known:
            out.append(sub)
        elif imp.target in known:
            out.append(imp.target)
    return sorted(set(out))


def _report(header: str, found: list[str]) -> None:
    if found:
        pytest.fail("\n".join([f"{header} ({len(found)}):", *(f"  {line}" for line in found)]), pytrace=False)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def layer_of(name: str) -> str | None:
    """``routing.stats.moments`` -> ``stats``; ``routing`` itself -> None."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def structure_violations(mods: Iterable[Module], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Modules directly under ``routing/`` (other than ``__init__.py``), subpackages that are not
    layers, and layers without an ``__init__.py``."""
    found = []
    packages = set()
    for m in mods:
        parts = m.path.split("/")
        if len(parts) == 2 and parts[1] != "__init__.py":
            found.append(f"{m.path}: a module directly under routing/; move it into one of {', '.join(layers)}")
        elif len(parts) > 2:
            if parts[1] not in layers:
                found.append(f"{m.path}: routing/{parts[1]}/ is not a layer ({', '.join(layers)})")
            if m.is_package and len(parts) == 3:
                packages.add(parts[1])
    found += [f"routing/{layer}/__init__.py is missing" for layer in layers if layer not in packages]
    return found


def layer_violations(mods: Iterable[Module], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Imports of a routing module that reach a later layer, the routing catalogue, or a
    subpackage that is not a layer."""
    mods = list(mods)
    known = {m.name for m in mods}
    found = []
    for m in mods:
        own = layer_of(m.name)
        if own is None or own not in layers:
            continue  # routing/__init__.py may import every layer; non-layers are reported above
        allowed = layers[: layers.index(own) + 1]
        for imp in imports(m):
            if imp.root != "routing":
                continue
            for target in imported_modules(imp, known) or [imp.target]:
                layer = layer_of(target)
                if layer is None:
                    found.append(f"{imp}: imports the routing catalogue, which sits above every layer")
                elif layer not in layers:
                    found.append(f"{imp}: routing.{layer} is not a layer")
                elif layer not in allowed:
                    found.append(f"{imp}: the {own} layer may import only {', '.join(allowed)}, not {layer}")
                elif target == f"routing.{own}" and not m.is_package:
                    found.append(f"{imp}: a module imports the modules beside it, not its own layer's catalogue")
    return found


def test_the_layer_order_here_is_routings_catalogue() -> None:
    tree = next(m.tree for m in modules("routing") if m.path == "routing/__init__.py")
    declared = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets)
    ]
    assert declared == [LAYERS], f"routing/__init__.py: LAYERS is {declared}, this test holds {LAYERS}"


def test_routing_is_made_of_layers_only() -> None:
    _report("routing/ holds only its layers", structure_violations(modules("routing")))


def test_routing_imports_follow_the_layer_order() -> None:
    _report(
        f"a routing module imports from its own layer and earlier ones ({' < '.join(LAYERS)})",
        layer_violations(modules("routing")),
    )


# --------------------------------------------------------------------------------------------
# Purity
# --------------------------------------------------------------------------------------------


def routing_purity_violations(mods: Iterable[Module]) -> list[str]:
    """Imports in ``routing/`` of anything but the standard library, numpy, scipy, numba (in
    :data:`NUMBA_MODULES` only) and routing."""
    found = []
    for m in mods:
        for imp in imports(m):
            root = imp.root
            if root in sys.stdlib_module_names or root in ("__future__", "routing"):
                continue
            if root in EDGE_PACKAGES:
                found.append(f"{imp}: the pure core imports nothing from the edge package {root}/")
            elif root not in ROUTING_THIRD_PARTY:
                found.append(f"{imp}: routing/ imports only the standard library, numpy, scipy and numba")
            elif root == "numba" and m.name not in NUMBA_MODULES:
                found.append(f"{imp}: numba only in the compiled-kernel modules ({', '.join(sorted(NUMBA_MODULES))})")
    return found


def placement_violations(mods: Iterable[Module], roots: Iterable[str], homes: tuple[str, ...]) -> list[str]:
    """Imports of any of ``roots`` outside the path prefixes ``homes``."""
    roots = set(roots)
    return [
        f"{imp}: only {', '.join(homes)} may import {imp.root}"
        for m in mods
        if not m.path.startswith(homes)
        for imp in imports(m)
        if imp.root in roots
    ]


def _everything() -> list[Module]:
    return [m for top in SCANNED for m in modules(top)]


def test_routing_imports_only_the_standard_library_numpy_scipy_and_numba() -> None:
    _report("routing/ is pure", routing_purity_violations(modules("routing")))


def test_only_the_jobs_import_pyspark() -> None:
    _report("pyspark imports", placement_violations(_everything(), {"pyspark"}, PYSPARK_HOMES))


def test_only_the_kafka_edges_import_kafka_clients() -> None:
    _report("Kafka client imports", placement_violations(_everything(), KAFKA_CLIENTS, KAFKA_HOMES))


# --------------------------------------------------------------------------------------------
# Cycles
# --------------------------------------------------------------------------------------------


def import_graph(mods: Iterable[Module]) -> dict[str, dict[str, Import]]:
    """module -> {imported routing module: the first import that loads it}."""
    mods = list(mods)
    known = {m.name for m in mods}
    graph: dict[str, dict[str, Import]] = {m.name: {} for m in mods}
    for m in mods:
        for imp in sorted(imports(m), key=lambda i: i.line):
            for target in imported_modules(imp, known):
                if target != m.name:
                    graph[m.name].setdefault(target, imp)
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def a_cycle(graph: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the first node of ``component``: [a, b, ..., a]."""
    start, inside = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return [*paths[v], start]
            if w in inside and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"{component} is not strongly connected")


def cycle_violations(mods: Iterable[Module]) -> list[str]:
    graph = import_graph(mods)
    found = []
    for component in strongly_connected(graph):
        cycle = a_cycle(graph, component)
        steps = "; ".join(str(graph[a][b]) for a, b in itertools.pairwise(cycle))
        found.append(f"{' -> '.join(cycle)} (all of {', '.join(component)}) via {steps}")
    return found


def test_routing_has_no_import_cycles() -> None:
    _report("import cycles among routing modules", cycle_violations(modules("routing")))


# --------------------------------------------------------------------------------------------
# Size
# --------------------------------------------------------------------------------------------


def test_no_routing_module_is_over_the_size_limit() -> None:
    over = [f"{m.path}: {m.lines} lines" for m in modules("routing") if m.lines > MAX_LINES]
    _report(f"routing modules over {MAX_LINES} lines: one public surface, or split at its seams", over)


# --------------------------------------------------------------------------------------------
# __all__
# --------------------------------------------------------------------------------------------


def _nested_bodies(node: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists that run when the module does (not function or class bodies)."""
    if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.AsyncWith):
        yield node.body
        yield getattr(node, "orelse", [])
    elif isinstance(node, ast.Try | ast.TryStar):
        yield node.body
        for handler in node.handlers:
            yield handler.body
        yield node.orelse
        yield node.finalbody


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        for nested in _nested_bodies(node):
            yield from _module_statements(nested)


def _bound(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _bound(element)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


def defined_names(m: Module) -> set[str]:
    """Names bound at module level: assignments, defs, classes, imports (``*`` kept as ``*``);
    for a package, also its submodules and subpackages."""
    names: set[str] = set()
    for node in _module_statements(m.tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(n for t in node.targets for n in _bound(t))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            names.update(_bound(node.target))
        elif isinstance(node, ast.With | ast.AsyncWith):
            names.update(n for item in node.items if item.optional_vars for n in _bound(item.optional_vars))
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Try | ast.TryStar):
            names.update(h.name for h in node.handlers if h.name)
    if m.is_package:
        folder = (ROOT / m.path).parent
        names.update(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
        names.update(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())
    return names


def declared_all(m: Module) -> tuple[list[str] | None, int, str | None]:
    """(the names of ``__all__``, its line, what is wrong with its form); (None, 0, None) when absent."""
    found: list[tuple[int, ast.expr | None, bool]] = []
    for node in _module_statements(m.tree.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            found.append((node.lineno, node.value, False))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and _is_all(node.target):
            found.append((node.lineno, node.value, isinstance(node, ast.AugAssign)))
    if not found:
        return None, 0, None
    line, value, augmented = found[0]
    if len(found) > 1 or augmented:
        return None, line, "__all__ must be assigned once, as one literal list"
    if not isinstance(value, ast.List | ast.Tuple) or not all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
    ):
        return None, line, "__all__ must be a literal list of strings"
    return [e.value for e in value.elts if isinstance(e, ast.Constant)], line, None


def _is_all(target: ast.expr) -> bool:
    return isinstance(target, ast.Name) and target.id == "__all__"


def _natural(name: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)


def ruff_all_key(name: str) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    """ruff's RUF022 order: CONSTANTS (more than one character, no lower case), then Classes
    (an upper-case first letter), then everything else; each group in natural order."""
    if len(name) > 1 and name.upper() == name and name.lower() != name:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    return group, _natural(name)


def all_violations(mods: Iterable[Module]) -> tuple[list[str], list[str], list[str]]:
    """(modules without ``__all__``, names in ``__all__`` not defined / malformed, unsorted ones)."""
    missing, undefined, unsorted = [], [], []
    for m in mods:
        names, line, problem = declared_all(m)
        if problem:
            undefined.append(f"{m.path}:{line}: {problem}")
            continue
        if names is None:
            missing.append(f"{m.path}: no __all__")
            continue
        defined = defined_names(m)
        if "*" not in defined:  # a star import could define anything
            undefined += [
                f"{m.path}:{line}: __all__ names {n!r}, which the module does not define"
                for n in names
                if n not in defined
            ]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            unsorted.append(f"{m.path}:{line}: __all__ repeats {', '.join(duplicates)}")
        expected = sorted(names, key=ruff_all_key)
        if names != expected:
            first = next(i for i, (a, b) in enumerate(zip(names, expected, strict=True)) if a != b)
            unsorted.append(
                f"{m.path}:{line}: __all__ is not in ruff's RUF022 order: {names[first]!r} at position {first}, "
                f"expected {expected[first]!r} (ruff check --select RUF022 --fix sorts it)"
            )
    return missing, undefined, unsorted


def _shipped() -> list[Module]:
    return [m for top in PACKAGES for m in modules(top)]


def test_every_shipped_module_declares_all() -> None:
    _report("modules without __all__", all_violations(_shipped())[0])


def test_every_name_in_all_is_defined() -> None:
    _report("__all__ names a name the module does not define", all_violations(_shipped())[1])


def test_every_all_is_sorted() -> None:
    _report("__all__ out of order", all_violations(_shipped())[2])


# --------------------------------------------------------------------------------------------
# The checkers see what they should (made-up sources)
# --------------------------------------------------------------------------------------------

_FAKE = '''\
"""A made-up module."""
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING
import numpy as np
from . import sibling
from ..planning.exact import plan_exact
if TYPE_CHECKING:
    from streaming.session import SparkConfig
def later():
    import pyspark.sql as ps
    from kafka import KafkaProducer
    importlib.import_module("confluent_kafka")
    return __import__("pandas")
'''


def _fake(path: str, source: str) -> Module:
    return Module.parse(path, source)


def test_the_scanner_sees_imports_in_functions_type_checking_relative_and_importlib() -> None:
    m = _fake("routing/stats/fake.py", _FAKE)
    assert [(i.line, i.target, i.names) for i in imports(m)] == [
        (2, "__future__", ("annotations",)),
        (3, "importlib", ()),
        (4, "typing", ("TYPE_CHECKING",)),
        (5, "numpy", ()),
        (6, "routing.stats", ("sibling",)),
        (7, "routing.planning.exact", ("plan_exact",)),
        (9, "streaming.session", ("SparkConfig",)),
        (11, "pyspark.sql", ()),
        (12, "kafka", ("KafkaProducer",)),
        (13, "confluent_kafka", ()),
        (14, "pandas", ()),
    ]
    assert routing_purity_violations([m]) == [
        "routing/stats/fake.py:9: from streaming.session import SparkConfig: the pure core imports nothing "
        "from the edge package streaming/",
        "routing/stats/fake.py:11: import pyspark.sql as ps: routing/ imports only the standard library, numpy, "
        "scipy and numba",
        "routing/stats/fake.py:12: from kafka import KafkaProducer: routing/ imports only the standard library, "
        "numpy, scipy and numba",
        'routing/stats/fake.py:13: importlib.import_module("confluent_kafka"): routing/ imports only the standard '
        "library, numpy, scipy and numba",
        'routing/stats/fake.py:14: __import__("pandas"): routing/ imports only the standard library, numpy, scipy '
        "and numba",
    ]
    numba = _fake("routing/stats/fast.py", "import numba\n")
    assert routing_purity_violations([numba]) == [
        "routing/stats/fast.py:1: import numba: numba only in the compiled-kernel modules "
        "(routing.channels.kernels, routing.matching.kernels, routing.matching.keyed, routing.matching.numeric_form)"
    ]
    at_edges = [_fake("schemas/fake.py", _FAKE), _fake("streaming/fake.py", _FAKE)]
    assert placement_violations(at_edges, {"pyspark"}, PYSPARK_HOMES) == [
        "schemas/fake.py:11: import pyspark.sql as ps: only streaming/, tests/spark/ may import pyspark"
    ]
    kafka = placement_violations(at_edges, KAFKA_CLIENTS, KAFKA_HOMES)
    assert [k.split(": ")[0] for k in kafka] == ["schemas/fake.py:12", "schemas/fake.py:13"]
    own_module = _fake("schemas/client.py", "from .kafka import x\nfrom . import kafka\n")  # schemas.kafka
    assert placement_violations([own_module], KAFKA_CLIENTS, KAFKA_HOMES) == []


def test_the_layer_checker_finds_upward_imports_and_strays() -> None:
    mods = [
        _fake("routing/__init__.py", "from routing import monitors\n"),
        _fake("routing/stats/__init__.py", "from routing.stats import moments\n"),
        _fake("routing/stats/moments.py", "from routing.common import json_fields\nfrom routing.stats import Tally\n"),
        _fake("routing/stats/fake.py", _FAKE),
        _fake("routing/stats/sibling.py", ""),
        _fake("routing/common/__init__.py", "import routing\n"),
        _fake("routing/common/json_fields.py", "from routing.monitors.qos import QosStep\n"),
        _fake("routing/helpers.py", "x = 1\n"),
        _fake("routing/extras/thing.py", "from ..stats import moments\n"),
        _fake("routing/monitors/qos.py", ""),
    ]
    assert layer_violations(mods) == [
        "routing/stats/moments.py:2: from routing.stats import Tally: a module imports the modules beside it, "
        "not its own layer's catalogue",
        "routing/stats/fake.py:7: from ..planning.exact import plan_exact: the stats layer may import only "
        "common, stats, not planning",
        "routing/common/__init__.py:1: import routing: imports the routing catalogue, which sits above every layer",
        "routing/common/json_fields.py:1: from routing.monitors.qos import QosStep: the common layer may import "
        "only common, not monitors",
    ]
    assert structure_violations(mods) == [
        "routing/helpers.py: a module directly under routing/; move it into one of " + ", ".join(LAYERS),
        "routing/extras/thing.py: routing/extras/ is not a layer (" + ", ".join(LAYERS) + ")",
        *(f"routing/{layer}/__init__.py is missing" for layer in LAYERS if layer not in ("common", "stats")),
    ]


def test_the_cycle_checker_names_a_cycle_and_its_imports() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}) == [["a", "b", "c"]]
    mods = [
        _fake(
            "routing/planning/distribution.py", "import math\n\ndef f():\n    from routing.planning.exact import g\n"
        ),
        _fake("routing/planning/exact.py", "from routing.planning import distribution\n"),
        _fake("routing/planning/check.py", "from routing.planning.exact import g\n"),
    ]
    assert cycle_violations(mods) == [
        "routing.planning.distribution -> routing.planning.exact -> routing.planning.distribution "
        "(all of routing.planning.distribution, routing.planning.exact) via "
        "routing/planning/distribution.py:4: from routing.planning.exact import g; "
        "routing/planning/exact.py:1: from routing.planning import distribution"
    ]
    assert cycle_violations(mods[1:]) == []


def test_the_all_checker_finds_missing_undefined_and_unsorted_names() -> None:
    mods = [
        _fake("schemas/a.py", "x = 1\n"),
        _fake(
            "schemas/b.py",
            "import os.path\nfrom typing import Any as A\n__all__ = ['os', 'A', 'gone', 'f']\ndef f(): pass\n",
        ),
        _fake(
            "schemas/c.py",
            "__all__ = ['b', 'A', 'B', 'CONST', 'a2', 'a10', 'a']\nA = B = CONST = a = a2 = a10 = b = 0\n",
        ),
        _fake("schemas/d.py", "__all__ = ['x']\n__all__ += ['y']\nx = y = 0\n"),
        _fake("schemas/e.py", "try:\n    from x import y\nexcept ImportError:\n    y = None\n__all__ = ['y']\n"),
    ]
    missing, undefined, unsorted = all_violations(mods)
    assert missing == ["schemas/a.py: no __all__"]
    assert undefined == [
        "schemas/b.py:3: __all__ names 'gone', which the module does not define",
        "schemas/d.py:1: __all__ must be assigned once, as one literal list",
    ]
    assert unsorted == [
        "schemas/b.py:3: __all__ is not in ruff's RUF022 order: 'os' at position 0, expected 'A' "
        "(ruff check --select RUF022 --fix sorts it)",
        "schemas/c.py:1: __all__ is not in ruff's RUF022 order: 'b' at position 0, expected 'CONST' "
        "(ruff check --select RUF022 --fix sorts it)",
    ]
    assert sorted(["b", "A", "B", "CONST", "a2", "a10", "a", "_X", "T"], key=ruff_all_key) == [
        "CONST", "_X", "A", "B", "T", "a", "a2", "a10", "b"
    ]  # fmt: skip
