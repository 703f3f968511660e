"""The one place that builds a SparkSession, and the Spark ``kafka`` source's jars.

:func:`spark_session` is what the hooks, tests and benchmarks call. It sets the environment
PySpark needs on one machine (workers run the driver's Python, so pyarrow and this package are
importable; the driver binds to loopback) and can put Spark's own Kafka source on the classpath
for ``engine="spark-kafka"``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from airflow_provider_kafka_spark.errors import SparkKafkaJarsError

log = logging.getLogger(__name__)

SCALA_BINARY_VERSION = "2.13"
SPARK_KAFKA_ARTIFACT = f"spark-sql-kafka-0-10_{SCALA_BINARY_VERSION}"
# (spark-sql-kafka version, spark-token-provider-kafka version) pairs tried when the installed
# PySpark's own release is not on the Maven repository yet (mirrors lag new releases).
# 4.2.0 + 4.1.0-preview1 is verified to read correctly on Spark 4.3.0 (the parity tests).
_FALLBACK_VERSIONS: tuple[tuple[str, str], ...] = (("4.2.0", "4.2.0"), ("4.2.0", "4.1.0-preview1"))
_DEFAULT_CONF: dict[str, str] = {
    # Kafka timestamps are UTC epoch milliseconds; show them as such.
    "spark.sql.session.timeZone": "UTC",
}


def spark_kafka_package(spark_version: str | None = None) -> str:
    """Maven coordinates of Spark's Kafka source for ``spark_version`` (default: installed)."""
    return f"org.apache.spark:{SPARK_KAFKA_ARTIFACT}:{spark_version or pyspark.__version__}"


def spark_session(
    master: str = "local[*]",
    app_name: str = "airflow-provider-kafka-spark",
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
    *,
    jars: Sequence[str | Path] = (),
    spark_kafka: bool = False,
) -> SparkSession:
    """Get or create the SparkSession.

    Args:
        master: the Spark master URL; ignored with ``remote``.
        app_name: the application name.
        conf: extra Spark settings; they win over the defaults (``spark.sql.session.timeZone``
            is ``UTC`` unless set here).
        remote: a Spark Connect URL (``sc://host:15002``); then no local JVM is started and
            ``jars``/``spark_kafka`` must be configured on the server.
        jars: local jar files to add to the classpath (``spark.jars``), e.g. the ones
            :func:`fetch_spark_kafka_jars` returns.
        spark_kafka: add :func:`spark_kafka_package` to ``spark.jars.packages`` so Spark
            downloads its Kafka source at start-up (needs access to Maven Central).

    ``PYSPARK_PYTHON`` defaults to this interpreter and, for a ``local`` master,
    ``SPARK_LOCAL_IP`` to ``127.0.0.1``; values already in the environment are kept.
    As with ``getOrCreate()``, an already running session is returned as it is.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = dict(_DEFAULT_CONF)
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master)
        if jars:
            settings["spark.jars"] = ",".join(str(Path(j).resolve()) for j in jars)
        if spark_kafka:
            settings["spark.jars.packages"] = spark_kafka_package()
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def fetch_spark_kafka_jars(pom: str | Path, dest: str | Path) -> list[Path]:
    """Fetch Spark's Kafka source with Maven into ``dest`` once; return the jars Spark lacks.

    ``pom`` is a build file like the project's ``tools/spark-kafka/pom.xml`` taking
    ``-Dspark.version`` and ``-Dspark.token.provider.version``. The installed PySpark version is
    tried first, then known-good older releases (logged as a warning). Idempotent and safe
    to call from several processes: a finished download is recorded in ``dest/.version``
    and reused while the PySpark version is unchanged. The returned list leaves out jars the
    PySpark install already ships (Scala, Hadoop, compression codecs), so nothing is on the
    classpath twice.

    Raises:
        SparkKafkaJarsError: Maven is missing or none of the versions could be fetched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stamp = dest / ".version"
    wanted = pyspark.__version__
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text().split()[0] == wanted):
            _download(Path(pom), dest, wanted)
    return _missing_from_pyspark(dest)


def _download(pom: Path, dest: Path, pyspark_version: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SparkKafkaJarsError(
            "Maven (mvn) is needed once to fetch Spark's Kafka source; install it, or start "
            f"Spark with spark.jars.packages={spark_kafka_package()}.")
    failures: list[str] = []
    for sql_version, token_version in ((pyspark_version, pyspark_version), *_FALLBACK_VERSIONS):
        tmp = Path(tempfile.mkdtemp(prefix=".spark-kafka-", dir=dest.parent))
        proc = subprocess.run(
            [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={tmp}",
             f"-Dspark.version={sql_version}", f"-Dspark.token.provider.version={token_version}"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode == 0:
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
            (dest / ".version").write_text(f"{pyspark_version} {sql_version} {token_version}\n")
            if sql_version != pyspark_version:
                log.warning("%s:%s is not on the Maven repository; using %s with "
                            "spark-token-provider-kafka %s instead.", SPARK_KAFKA_ARTIFACT,
                            pyspark_version, sql_version, token_version)
            return
        shutil.rmtree(tmp, ignore_errors=True)
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
        failures.append(f"{sql_version}/{token_version}: {lines[0] if lines else proc.returncode}")
    raise SparkKafkaJarsError(
        f"could not fetch {SPARK_KAFKA_ARTIFACT} with {pom}: " + "; ".join(failures)
        + ". Check access to Maven Central (or your mirror in ~/.m2/settings.xml).")


def _missing_from_pyspark(dest: Path) -> list[Path]:
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in dest.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name before ``-<major>.<minor>``."""
    match = _VERSIONED_JAR.match(jar_name)
    return match.group(1) if match else jar_name


_VERSIONED_JAR = re.compile(r"(.+?)-\d+\.\d+.*\.jar$")
