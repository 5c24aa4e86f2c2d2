"""The repository's documentation stands on its own and stays true to the tree.

- every relative link in README.md and docs/ leads to a file that exists;
- every repository path that README.md, docs/ or the code cites (a module under
  ``routing/<family>/``, a page under ``docs/<section>/``, a benchmark under ``bench/``) exists;
- nothing cites a document that lives outside the repository;
- README.md's Python example runs and prints what its comments say.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("routing", "streaming", "producers", "schemas", "infra", "bench", "tests")
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "schemas").glob("*.md")])
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
_PATH = re.compile(
    r"(?<![\w./-])((?:routing|streaming|producers|schemas|infra|bench|docs|tests)/[\w./-]*\w\.(?:py|md|avsc|xml))\b"
)
# the planning notes that live beside the repository, not in it (names split so that this file
# does not cite them itself)
_NOTES = ("QUEUEING" + "-NOTES", "THESIS" + "-DIGEST", "SPARK-KAFKA" + "-NOTES", "CONVENTIONS" + r"\.md")
_OUTSIDE = re.compile(r"\.\./" + "shared|" + r"\bSPEC(?:\.md)?\s*§|\bSPEC\.md\b|\bDESIGN\.md\b|" + "|".join(_NOTES))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", MARKDOWN, ids=_rel)
def test_relative_links_lead_to_files(page: Path) -> None:
    broken = [
        target
        for target in _LINK.findall(page.read_text())
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert not broken, f"{_rel(page)} links to missing files: {broken}"


@pytest.mark.parametrize("path", MARKDOWN + SOURCES, ids=_rel)
def test_cited_repository_paths_exist(path: Path) -> None:
    if path.name == "test_architecture.py":
        pytest.skip("its checkers are tested on made-up sources and paths")
    missing = sorted({p for p in _PATH.findall(path.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{_rel(path)} cites paths that do not exist: {missing}"


def test_nothing_cites_documents_outside_the_repository() -> None:
    found = [
        f"{_rel(path)}:{number}: {line.strip()}"
        for path in [*MARKDOWN, *SOURCES, ROOT / "pyproject.toml", ROOT / "Makefile"]
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert not found, "cite docs/ in the repository instead:\n" + "\n".join(found[:50])


def test_the_readme_python_example_prints_what_it_says() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert blocks, "README.md has no Python example"
    for block in blocks:
        namespace: dict[str, object] = {}
        for statement in ast.parse(block).body:
            line = block.splitlines()[statement.end_lineno - 1]
            code = ast.get_source_segment(block, statement)
            assert code is not None
            if "#" in line and isinstance(statement, ast.Expr):
                expected = line.split("#", 1)[1].strip()
                with contextlib.redirect_stdout(io.StringIO()):
                    value = eval(compile(code, "README.md", "eval"), namespace)
                assert repr(value) == expected, f"README.md: {code} gives {value!r}, the comment says {expected}"
            else:
                exec(compile(code, "README.md", "exec"), namespace)
