"""The zip that spark-submit ships to the executors (infra/submit.py): the project imports from it,
schemas included, with nothing else of the project on the path; the same sources give the same
bytes; ``siftstream submit --dry-run`` prints the spark-submit command around it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

from infra.submit import ENTRY, PACKAGES, ROOT, package, spark_submit
from schemas.codec import schema_files, versions_of

PROBE = """
import json, routing, schemas.codec as c, streaming.arrow_matching
print(json.dumps({"routing": routing.__file__, "arrow": streaming.arrow_matching.__file__,
    "schemas": c.schema_files(), "events": len(c.versions_of("Event"))}))
"""


def test_the_project_and_its_schemas_import_from_the_zip(tmp_path: Path) -> None:
    built = package(tmp_path / "dist")
    # from another folder, the zip first on the path (as a Python worker of an executor has it)
    probe = f"import sys; sys.path.insert(0, {str(built)!r})\n" + PROBE
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["routing"] == f"{built}/routing/__init__.py"
    assert seen["arrow"] == f"{built}/streaming/arrow_matching.py"
    assert seen["schemas"] == schema_files() and len(schema_files()) > 10
    assert seen["events"] == len(versions_of("Event"))


def test_the_zip_holds_every_package_and_no_caches_and_is_reproducible(tmp_path: Path) -> None:
    first = package(tmp_path / "a").read_bytes()
    second = package(tmp_path / "b")
    assert second.read_bytes() == first
    names = zipfile.ZipFile(second).namelist()
    assert {n.split("/")[0] for n in names} == set(PACKAGES)
    assert "schemas/match.avsc" in names and "streaming/dashboard/static/index.html" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert len(names) == len(set(names))


def test_submit_dry_run_prints_the_spark_submit_command(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "streaming.cli", "submit", "--master", "spark://h:7077", "--dry-run"]
    cmd += ["--dist", str(tmp_path), "--conf", "spark.executor.cores=1", "--", "serve", "--jobs", "matching"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    printed = shlex.split(done.stdout)
    assert printed[0] == str(spark_submit()) and Path(printed[0]).is_file()
    assert printed[-4:] == [str(ENTRY), "serve", "--jobs", "matching"]
    assert printed[printed.index("--py-files") + 1] == str(tmp_path / "siftstream.zip")
    assert printed[printed.index("--conf") + 1] == "spark.executor.cores=1"
    jars = printed[printed.index("--jars") + 1].split(",")
    assert any("spark-sql-kafka-0-10" in j for j in jars) and all(Path(j).is_file() for j in jars)
    assert (tmp_path / "siftstream.zip").is_file()
