"""Fetch the JVM jars SiftStream needs from Maven Central, once, into a cache outside git.

``infra/pom.xml`` declares two sets (Maven profiles): ``spark`` (the Kafka connector and
spark-avro matching the pinned pyspark) and ``kafka`` (an Apache Kafka broker). Each set is
copied by ``mvn dependency:copy-dependencies`` into ``<cache>/<pom hash>/<set>``; a finished set
is marked with a ``.complete`` file, so a second call costs nothing and an interrupted one is
redone. From the spark set we drop every jar pyspark already ships (two copies of one library
on a classpath cause confusing conflicts).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["JarSets", "ensure_jars", "pyspark_jars_dir"]

POM = Path(__file__).with_name("pom.xml")
_VERSION_SUFFIX = re.compile(r"-\d[^_/]*\.jar$")


def default_cache() -> Path:
    return Path.home() / ".cache" / "siftstream" / "jars"


@dataclass(frozen=True)
class JarSets:
    """Where the fetched jars are."""

    spark: tuple[Path, ...]
    kafka_dir: Path

    @property
    def kafka_classpath(self) -> str:
        return str(self.kafka_dir / "*")


def _artifact(path: Path) -> str:
    """``spark-sql-kafka-0-10_2.13-4.2.0.jar`` -> ``spark-sql-kafka-0-10_2.13``."""
    return _VERSION_SUFFIX.sub("", path.name)


def pyspark_jars_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed in this environment (run `make setup`)")
    return Path(spec.origin).parent / "jars"


def _fetch(profile: str, dest: Path, log: bool) -> None:
    if (dest / ".complete").exists():
        return
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed to fetch the Kafka and Spark connector jars, and is not on PATH")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if log:
        print(f"fetching {profile} jars with Maven into {dest} ...", file=sys.stderr, flush=True)
    cmd = [
        "mvn",
        "-B",
        "-q",
        "-f",
        str(POM),
        "-P",
        profile,
        "dependency:copy-dependencies",
        f"-DoutputDirectory={dest}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Maven failed to fetch the {profile} jars:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    if profile == "spark":
        shipped = {_artifact(p) for p in pyspark_jars_dir().glob("*.jar")}
        for jar in dest.glob("*.jar"):
            if _artifact(jar) in shipped:
                jar.unlink()
    (dest / ".complete").write_text("ok\n")


def ensure_jars(cache: Path | None = None, log: bool = True) -> JarSets:
    """Fetch both jar sets if they are not cached yet; return where they are."""
    key = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    root = (cache or default_cache()) / key
    _fetch("spark", root / "spark", log)
    _fetch("kafka", root / "kafka", log)
    spark = tuple(sorted((root / "spark").glob("*.jar")))
    names = {_artifact(j) for j in spark}
    for needed in ("spark-sql-kafka-0-10_2.13", "spark-avro_2.13", "kafka-clients"):
        if needed not in names:
            raise RuntimeError(f"{needed} is missing from {root / 'spark'}; delete that folder and retry")
    return JarSets(spark=spark, kafka_dir=root / "kafka")
