"""Package SiftStream for Spark's executors and assemble the ``spark-submit`` command that runs a
``siftstream`` command (``serve``, a job) as an application of a Spark cluster (docs/guide/cluster.md).

What runs where: the driver (spark-submit's client deploy mode, the only one Spark's standalone
manager offers Python applications) is this machine's install of SiftStream, entered through
:data:`ENTRY`; the executors' Python workers import the project from :func:`package`'s zip, which
spark-submit ships with ``--py-files`` and which Python imports as it is (zipimport). The third-party
libraries (numpy, scipy, pyarrow, fastavro, numba, ...) come from the executors' own Python
(``spark.pyspark.python``, by default this interpreter's path: right for a cluster on this machine
or on machines with the same environment at the same path).

Invariants: the zip holds every file of :data:`PACKAGES` but caches, with fixed timestamps and
sorted names, so the same sources give the same bytes; the command names the spark-submit of the
pyspark that this interpreter imports, whose version matches the connector jars.

>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as tmp:
...     built = package(Path(tmp))
...     cmd = submit_command("spark://h:7077", built, (Path("/j/a.jar"),), ["serve", "--jobs", "matching"])
>>> built.name, cmd[cmd.index("--master") + 1], cmd[cmd.index("--jars") + 1], cmd[-3:]
('siftstream.zip', 'spark://h:7077', '/j/a.jar', ['serve', '--jobs', 'matching'])
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from infra.jars import pyspark_jars_dir

__all__ = ["ENTRY", "PACKAGES", "ZIP_NAME", "package", "spark_submit", "submit_command", "submit_env"]

ROOT = Path(__file__).resolve().parents[1]
"""The folder that holds the packages: the repository, or site-packages of a regular install."""

PACKAGES = ("routing", "streaming", "producers", "schemas", "infra")
"""Every package of the project (pyproject.toml's list): the executors import routing, schemas and
streaming; the others come along so that any module of the project imports there."""

ENTRY = ROOT / "streaming" / "submit_main.py"
"""spark-submit's primary resource: a file that runs ``siftstream``'s command line."""

ZIP_NAME = "siftstream.zip"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: same sources, same bytes


def _files(root: Path, packages: Iterable[str]) -> list[Path]:
    out = []
    for name in packages:
        for path in (root / name).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.append(path)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def package(dest: Path, root: Path = ROOT, packages: Sequence[str] = PACKAGES) -> Path:
    """Write ``dest/siftstream.zip``: the packages' sources and data files (``schemas/*.avsc``, the
    dashboard's static files), importable from the zip; return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / ZIP_NAME
    partial = target.with_suffix(".zip.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in _files(root, packages):
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    partial.replace(target)
    return target


def spark_submit() -> Path:
    """The ``spark-submit`` of the installed pyspark (its version is the connector jars')."""
    return pyspark_jars_dir().parent / "bin" / "spark-submit"


def submit_command(
    master: str,
    zip_path: Path,
    jars: Sequence[Path],
    command: Sequence[str],
    *,
    name: str = "siftstream",
    driver_memory: str = "4g",
    driver_java_options: str = "",
    executor_memory: str = "1g",
    total_executor_cores: int | None = None,
    conf: Sequence[str] = (),
) -> list[str]:
    """The spark-submit command line that runs ``siftstream COMMAND...`` on ``master``, in client
    deploy mode, with the connector jars and the package; ``conf``: more ``KEY=VALUE`` settings,
    which win over the session's defaults (streaming/session.py leaves what spark-submit set)."""
    cmd = [str(spark_submit()), "--master", master, "--deploy-mode", "client", "--name", name]
    cmd += ["--jars", ",".join(str(j) for j in jars), "--py-files", str(zip_path)]
    cmd += ["--driver-memory", driver_memory, "--executor-memory", executor_memory]
    if driver_java_options:
        cmd += ["--driver-java-options", driver_java_options]
    if total_executor_cores is not None:
        cmd += ["--total-executor-cores", str(total_executor_cores)]
    for item in conf:
        cmd += ["--conf", item]
    return [*cmd, str(ENTRY), *command]


def submit_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """spark-submit's environment: the driver's and executors' Python is this interpreter unless
    ``PYSPARK_PYTHON`` names another (``--conf spark.pyspark.python=...`` wins over both)."""
    env = dict(os.environ if environ is None else environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_HOME", str(pyspark_jars_dir().parent))
    return env
