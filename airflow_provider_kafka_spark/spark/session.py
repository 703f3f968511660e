"""The one place that builds a SparkSession, and the Spark ``kafka`` source's jars.

:func:`spark_session` is what the hooks, tests and benchmarks call. It sets the environment
PySpark needs on one machine (workers run the driver's Python, so pyarrow and this package are
importable; the driver binds to loopback) and can put Spark's own Kafka source on the classpath
for ``engine="spark-kafka"``.

A driver JVM it starts writes what it prints through Python's logging (the logger
``airflow_provider_kafka_spark.spark.jvm``) at the level each line has, instead of onto the
process's stderr, which an Airflow task log shows as error lines whatever they say: log4j's
records at their own level (with the package's log4j2 configuration: warnings and errors,
Hadoop's native-library notice left out), librdkafka's lines of the Python workers at their
syslog level (``%6|`` info, ``%4|`` warning...), anything else (the JVM's ``WARNING: Using
incubator modules``) at info. Spark's console progress bars are off, and the UI takes a free
port (no walk from 4040 when tasks run side by side), unless the conf says otherwise.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
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
_SESSION_CONF: dict[str, str] = {
    # Kafka timestamps are UTC epoch milliseconds; show them as such.
    "spark.sql.session.timeZone": "UTC",
}
"""The defaults of every session, a Spark Connect one too."""
_DRIVER_CONF: dict[str, str] = {
    # No "[Stage 0:>  (0 + 1) / 1]" bars in task logs (ingest logs its own progress lines).
    "spark.ui.showConsoleProgress": "false",
    # A free port, not 4040 then 4041...: tasks side by side do not warn about taken ports.
    "spark.ui.port": "0",
}
"""The defaults of a driver JVM this process starts (a Spark Connect server has its own: set
from a client, each would only log Spark's ``CANNOT_MODIFY_CONFIG`` warning)."""

JVM_LOGGER = "airflow_provider_kafka_spark.spark.jvm"

_LOG4J2 = """\
# airflow-provider-kafka-spark: the Spark driver's log4j2 configuration (spark/session.py)
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.hadoop_native.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop_native.level = error
"""


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
    settings = dict(_SESSION_CONF)
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        settings.update(_DRIVER_CONF)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master)
        if jars:
            settings["spark.jars"] = ",".join(str(Path(j).resolve()) for j in jars)
        if spark_kafka:
            settings["spark.jars.packages"] = spark_kafka_package()
    settings.update(conf or {})
    if not remote:
        settings["spark.driver.extraJavaOptions"] = _with_log_config(
            settings.get("spark.driver.extraJavaOptions", ""))
    for key, value in settings.items():
        builder = builder.config(key, value)
    if remote:
        return builder.getOrCreate()
    with _jvm_output_to_logging():
        return builder.getOrCreate()


def _with_log_config(java_options: str) -> str:
    """``java_options`` with the package's log4j2 configuration, unless they name one."""
    if "log4j2.configurationFile" in java_options or "log4j.configuration" in java_options:
        return java_options
    digest = hashlib.sha256(_LOG4J2.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"airflow-provider-kafka-spark-log4j2-{digest}.properties"
    if not path.exists():
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text(_LOG4J2)
        part.replace(path)
    return f"{java_options} -Dlog4j2.configurationFile={path}".strip()


@contextmanager
def _jvm_output_to_logging() -> Iterator[None]:
    """While a session is got or created: this process's stderr is a pipe whose lines a thread
    logs (:func:`jvm_line_level`), so that a driver JVM started meanwhile (and the Python
    workers it starts) writes there for its whole life. A session that already runs starts
    nothing; the pipe then closes at once."""
    read_end, write_end = os.pipe()
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)  # the JVM holds its own copy, if one started
        threading.Thread(target=_relay, args=(read_end,), name="spark-jvm-output",
                         daemon=True).start()


_LOG4J_LEVEL = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_RDKAFKA_LEVEL = re.compile(r"^%(\d)\|")
_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


def jvm_line_level(line: str, previous: int) -> int:
    """The logging level of one line the driver JVM printed: a log4j record's own, a
    librdkafka line's syslog severity (0-3 error, 4 warning, 5-6 info, 7 debug), a stack
    trace's line that of the record before it, anything else info."""
    found = _LOG4J_LEVEL.match(line)
    if found:
        return _LEVELS[found.group(1)]
    found = _RDKAFKA_LEVEL.match(line)
    if found:
        severity = int(found.group(1))
        return (logging.ERROR if severity <= 3 else logging.WARNING if severity == 4
                else logging.DEBUG if severity == 7 else logging.INFO)
    if line.startswith(("\tat ", "Caused by:", "\t... ")):
        return previous
    return logging.INFO


def _relay(fd: int) -> None:
    jvm = logging.getLogger(JVM_LOGGER)
    level = logging.INFO
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            text = line.rstrip("\n")
            if text.strip():
                level = jvm_line_level(text, level)
                jvm.log(level, "%s", text)


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
