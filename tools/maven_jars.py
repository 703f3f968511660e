"""Jars a pom names, fetched with Maven into a folder of ``.cache/`` once: the `tables` tier's
(``tools/tables_jars.py``) and the s3a jars (``tools/s3_jars.py``).

Not ``fetch_spark_kafka_jars`` (airflow_provider_kafka_spark.spark.session): that one is keyed
on the PySpark version and retries older Spark Kafka releases; these jars are keyed on the pom
itself (a version bump there fetches again) and have no fallback.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

_VERSIONED_JAR = re.compile(r"(.+?)-\d+\.\d+.*\.jar$")


def fetch_maven_jars(pom: Path, dest: Path) -> list[Path]:
    """Copy ``pom``'s runtime dependencies into ``dest`` unless that folder already holds this
    version of ``pom`` (``dest/.pom-sha256``); return the jars the installed PySpark does not
    ship (Scala, Hadoop, Jackson, Parquet, netty, log4j are left to Spark's own). Safe to call
    from several processes (a lock file beside ``dest``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = dest / ".pom-sha256"
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text().strip() == digest):
            _download(pom, dest)
            stamp.write_text(digest + "\n")
    return _not_in_pyspark(dest)


def _download(pom: Path, dest: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven (mvn) is needed once to fetch the jars of {pom}; install it.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        errors = [ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR" in ln]
        raise RuntimeError(f"could not fetch the jars of {pom} (mvn exit {done.returncode}): "
                           + ("\n".join(errors[:5]) or done.stderr[-2000:])
                           + "\nCheck access to Maven Central (or the mirror in "
                           "~/.m2/settings.xml).")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _not_in_pyspark(dest: Path) -> list[Path]:
    """The jars in ``dest`` whose artifact (name without version) PySpark's ``jars/`` lacks."""
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in dest.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar_name: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``."""
    match = _VERSIONED_JAR.match(jar_name)
    return match.group(1) if match else jar_name
